package main

import (
	"fmt"
	"io"
)

// The helpers below are the only writers of rootgate's own lines (see the
// output rules in the package comment): each writes one line
// "rootgate: KIND: text" to w, which is stderr.

// sayf writes one line of the given kind, e.g. "denied" or "broken".
func sayf(w io.Writer, kind, format string, a ...any) {
	fmt.Fprintf(w, "rootgate: %s: %s\n", kind, fmt.Sprintf(format, a...))
}

// errorf reports an error.
func errorf(w io.Writer, format string, a ...any) { sayf(w, "error", format, a...) }

// warningf reports something the user should know that did not stop the
// command.
func warningf(w io.Writer, format string, a ...any) { sayf(w, "warning", format, a...) }

// hintf says what to do about the line before it.
func hintf(w io.Writer, format string, a ...any) { sayf(w, "hint", format, a...) }

// errorWithHint reports an error followed by one hint line for each of
// hints: what to type instead.
func errorWithHint(w io.Writer, err string, hints ...string) {
	errorf(w, "%s", err)
	for _, h := range hints {
		hintf(w, "%s", h)
	}
}
