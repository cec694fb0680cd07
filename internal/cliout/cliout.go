// Package cliout writes a command-line program's own lines by rootgate's
// output rules: each is one line "PROG: KIND: text" on stderr, lowercase,
// where KIND is error, warning, hint or a word of the program's own
// ("denied", "ready"). A hint follows the line it is about and says what
// to type instead.
//
// A program names itself once, const out = cliout.Prog("rootgated"), and
// writes every such line through out.
package cliout

import (
	"fmt"
	"io"
)

// Prog is a program's name: the first word of each of its lines.
type Prog string

// Sayf writes one line of the given kind to w.
func (p Prog) Sayf(w io.Writer, kind, format string, a ...any) {
	fmt.Fprintf(w, "%s: %s: %s\n", p, kind, fmt.Sprintf(format, a...))
}

// Errorf reports an error.
func (p Prog) Errorf(w io.Writer, format string, a ...any) { p.Sayf(w, "error", format, a...) }

// Warningf reports something the user should know that did not stop the
// program.
func (p Prog) Warningf(w io.Writer, format string, a ...any) { p.Sayf(w, "warning", format, a...) }

// Hintf says what to do about the line before it.
func (p Prog) Hintf(w io.Writer, format string, a ...any) { p.Sayf(w, "hint", format, a...) }

// ErrorWithHint reports an error followed by one hint line for each of
// hints.
func (p Prog) ErrorWithHint(w io.Writer, err string, hints ...string) {
	p.Errorf(w, "%s", err)
	for _, h := range hints {
		p.Hintf(w, "%s", h)
	}
}
