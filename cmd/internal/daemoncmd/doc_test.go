package daemoncmd

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/clidoc"
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

// TestFlagsParseFromDefaults: each parse of rootgated's flag table starts
// from the defaults, whatever an earlier parse set, so the manual page
// shows the defaults and an in-process Main is not changed by the last.
func TestFlagsParseFromDefaults(t *testing.T) {
	parse := func(args ...string) options {
		t.Helper()
		fs := clidoc.NewFlagSet("rootgated", flags, io.Discard)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return parseOptions(clidoc.ValuesOf(fs))
	}
	set := parse("--audit-max-size", "1K", "--audit-min-free", "2K", "--approver", "alice", "--socket", "/tmp/s")
	if set.auditMaxSize != 1<<10 || set.auditMinFree != 2<<10 || len(set.approvers) != 1 || !set.socketsGiven {
		t.Fatalf("parsed %+v", set)
	}
	def := parse()
	if def.auditMaxSize != defaultAuditMaxSize || def.auditMinFree != defaultAuditMinFree || len(def.approvers) != 0 || def.socketsGiven {
		t.Errorf("a second parse did not start from the defaults: %+v", def)
	}
	var man bytes.Buffer
	if err := writeDoc(&man, true, ""); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(man.String(), fmt.Sprintf("(default: %d)", defaultAuditMaxSize)) {
		t.Errorf("the manual page lacks --audit-max-size's default")
	}
}
