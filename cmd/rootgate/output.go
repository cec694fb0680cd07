package main

import (
	"io"

	"github.com/rootgate/rootgate/internal/cliout"
)

// out writes rootgate's own lines (see the output rules in the package
// comment); the helpers below are the only writers of them, each one line
// "rootgate: KIND: text" to w, which is stderr.
const out = cliout.Prog("rootgate")

// sayf writes one line of the given kind, e.g. "denied" or "broken".
func sayf(w io.Writer, kind, format string, a ...any) { out.Sayf(w, kind, format, a...) }

// errorf reports an error.
func errorf(w io.Writer, format string, a ...any) { out.Errorf(w, format, a...) }

// warningf reports something the user should know that did not stop the
// command.
func warningf(w io.Writer, format string, a ...any) { out.Warningf(w, format, a...) }

// hintf says what to do about the line before it.
func hintf(w io.Writer, format string, a ...any) { out.Hintf(w, format, a...) }

// errorWithHint reports an error followed by one hint line for each of
// hints: what to type instead.
func errorWithHint(w io.Writer, err string, hints ...string) { out.ErrorWithHint(w, err, hints...) }
