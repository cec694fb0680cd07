package daemoncmd

import (
	"bytes"
	"strings"
	"testing"
)

// TestManListsEveryFlag: the manual page and each completion script name
// every flag rootgated parses.
func TestManListsEveryFlag(t *testing.T) {
	docs := map[string]string{}
	for _, kind := range []string{"man", "bash", "zsh", "fish"} {
		var b bytes.Buffer
		if err := writeDoc(&b, kind == "man", kind); err != nil {
			t.Fatal(err)
		}
		docs[kind] = b.String()
	}
	n := 0
	for _, f := range flags {
		n++
		if !strings.Contains(docs["man"], `\fB\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)+`\fR`) {
			t.Errorf("the manual page lacks --%s", f.Name)
		}
		for _, sh := range []string{"bash", "zsh"} {
			if !strings.Contains(docs[sh], "--"+f.Name) {
				t.Errorf("the %s completion lacks --%s", sh, f.Name)
			}
		}
		if !strings.Contains(docs["fish"], "-l "+f.Name+" ") {
			t.Errorf("the fish completion lacks --%s", f.Name)
		}
	}
	if n < 15 {
		t.Errorf("only %d flags", n)
	}
}
