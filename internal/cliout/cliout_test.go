package cliout

import (
	"bytes"
	"testing"
)

// TestLines: every kind of line is "PROG: KIND: text", one per line, hints
// after their error.
func TestLines(t *testing.T) {
	const p = Prog("prog")
	var b bytes.Buffer
	p.Errorf(&b, "bad %q", "x")
	p.Warningf(&b, "cut at %d", 16)
	p.Sayf(&b, "denied", "%s", "no")
	p.ErrorWithHint(&b, "no command given", "prog run -- ls", "prog help")
	want := `prog: error: bad "x"
prog: warning: cut at 16
prog: denied: no
prog: error: no command given
prog: hint: prog run -- ls
prog: hint: prog help
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", &b, want)
	}
}
