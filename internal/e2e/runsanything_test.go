package e2e

import (
	"encoding/base64"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/policy"
	"github.com/rootgate/rootgate/wire"
)

// TestRuleReadsCodeNeedsSecondConfirmation (issue 27): a rule for a
// program that runs what it reads, saved with one y, runs whatever is
// sent to it later: sqlite3's ".shell id" on stdin, vi's ":!id", a local
// .ddeb or .changes that apt installs with its scripts. The daemon
// refuses such a rule from a client that does not say it was confirmed
// twice, by what the program is: sqlite3 under another name (a link),
// vi as the vim.basic its alternatives link leads to.
func TestRuleReadsCodeNeedsSecondConfirmation(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	alias := filepath.Join(dir, "dbtool")
	if err := os.Symlink("/usr/bin/sqlite3", alias); err != nil {
		t.Fatal(err)
	}
	body := []byte("select 1;\n")
	stdin := base64.StdEncoding.EncodeToString(body)
	bound := "allow privileged,user=root,cwd=" + dir + ",stdin=sha256:" + policy.StdinSHA256(body) + " "
	cases := []struct {
		name, rule string
		argv       []string
		need       string // a file the case needs
	}{
		{"sqlite3", bound + "sqlite3 :memory:", []string{"sqlite3", ":memory:"}, "/usr/bin/sqlite3"},
		{"sqlite3 by another name", bound + alias + " :memory:", []string{alias, ":memory:"}, "/usr/bin/sqlite3"},
		{"psql", bound + "psql -l", []string{"psql", "-l"}, "/usr/bin/psql"},
		{"vi as vim.basic", bound + "/usr/bin/vi -es", []string{"/usr/bin/vi", "-es"}, "/usr/bin/vim.basic"},
		{"apt-get a .ddeb", bound + "apt-get install ./x.ddeb", []string{"apt-get", "install", "./x.ddeb"}, "/usr/bin/apt-get"},
		{"apt a .changes", bound + "apt install ./x.changes", []string{"apt", "install", "./x.changes"}, "/usr/bin/apt"},
		{"apt a directory", bound + "apt install ./pkgs/", []string{"apt", "install", "./pkgs/"}, "/usr/bin/apt"},
	}
	d := ruleDaemon(t)
	c := attachRaw(t, d)
	for _, tc := range cases {
		if _, err := os.Stat(tc.need); err != nil {
			t.Logf("%s: skipped, no %s here", tc.name, tc.need)
			continue
		}
		ch := d.ask(map[string]any{"pipeline": [][]string{tc.argv}, "stdin": stdin, "cwd": dir})
		p := c.prompt()
		yes := true
		c.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Rule: tc.rule})
		if m := c.next(); m.Type != remote.MsgError || m.Message != remote.ApproverRuleRunsAnything {
			t.Errorf("%s: the rule %q without rule_runs_anything got %+v, want %q", tc.name, tc.rule, m, remote.ApproverRuleRunsAnything)
		}
		c.decide(p, false)
		if r := <-ch; r.Status != wire.StatusDenied {
			t.Fatalf("%s: %s, want denied", tc.name, r.raw)
		}
	}
	if _, err := os.Lstat(dropIn(d)); !os.IsNotExist(err) {
		t.Fatalf("a rule was saved: %v", err)
	}
}

// TestCopyOfInterpreterNeedsSecondConfirmation (issue 27): the requester
// has a root copy of a shell under a name no list holds (cp
// /usr/bin/dash /usr/local/bin/mytool looks harmless when asked for),
// and a root script whose #! line names that copy. A grant or a rule for
// either, given with one confirmation, would run whatever the arguments
// say (mytool -c ... with an open rule). The daemon knows the copy for
// what it is by its file, tells the approver (Stage.Is, and the
// script's Interpreters), and refuses such a grant or rule from a
// client that does not say it was confirmed twice. A root copy of a
// program that runs nothing it reads (id) keeps the one confirmation:
// its grant is given and used.
func TestCopyOfInterpreterNeedsSecondConfirmation(t *testing.T) {
	t.Parallel()
	shell, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := shortDir(t) // root's alone
	mytool, whoru, report := filepath.Join(dir, "mytool"), filepath.Join(dir, "whoru"), filepath.Join(dir, "report")
	for src, dst := range map[string]string{shell: mytool, "/usr/bin/id": whoru} {
		if out, err := exec.Command("cp", src, dst).CombinedOutput(); err != nil {
			t.Fatalf("cp %s: %v: %s", src, err, out)
		}
	}
	if err := os.WriteFile(report, []byte("#!"+mytool+"\necho report\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	d := ruleDaemon(t)
	c := attachRaw(t, d)
	yes := true
	for _, tc := range []struct {
		name string
		argv []string
		is   func(st approval.Stage) string // what the prompt must say the program is
	}{
		{"a copy of " + filepath.Base(shell), []string{mytool, "-c", "echo copied shell"}, func(st approval.Stage) string { return st.Is }},
		{"a script of the copy", []string{report}, func(st approval.Stage) string {
			if len(st.Interpreters) != 1 || st.Interpreters[0].Path != mytool {
				return ""
			}
			return st.Interpreters[0].Is
		}},
	} {
		ch := d.ask(map[string]any{"pipeline": [][]string{tc.argv}, "cwd": dir})
		p := c.prompt()
		if is := tc.is(p.Request.Stages[0]); is == "" || !approval.Listed(filepath.Base(is)) {
			t.Errorf("%s: the prompt says it is %q, want the listed program it is a copy of (stage %+v)", tc.name, is, p.Request.Stages[0])
		}
		c.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 600})
		if m := c.next(); m.Type != remote.MsgError || m.Message != remote.ApproverGrantRunsAnything {
			t.Errorf("%s: a grant without grant_runs_anything got %+v, want %q", tc.name, m, remote.ApproverGrantRunsAnything)
		}
		pending(t, ch, tc.name)
		rule := "allow privileged,user=root,cwd=" + dir + ",stdin=none " + tc.argv[0] + " ..."
		c.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Rule: rule})
		if m := c.next(); m.Type != remote.MsgError || m.Message != remote.ApproverRuleRunsAnything {
			t.Errorf("%s: the rule %q without rule_runs_anything got %+v, want %q", tc.name, rule, m, remote.ApproverRuleRunsAnything)
		}
		pending(t, ch, tc.name)
		c.decide(p, false)
		if r := <-ch; r.Status != wire.StatusDenied {
			t.Fatalf("%s: %s, want denied", tc.name, r.raw)
		}
	}
	if _, err := os.Lstat(dropIn(d)); !os.IsNotExist(err) {
		t.Fatalf("a rule was saved: %v", err)
	}

	// The legitimate path: a root copy of id is no listed program, and
	// a grant for it needs one confirmation.
	run := map[string]any{"pipeline": [][]string{{whoru, "-u"}}, "cwd": dir}
	ch := d.ask(run)
	p := c.prompt()
	if st := p.Request.Stages[0]; st.Is != "" || len(st.Interpreters) != 0 {
		t.Fatalf("a copy of id is shown as %+v", st)
	}
	c.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 600})
	if r := wantOK(t, <-ch); string(r.Stdout) != "0\n" {
		t.Fatalf("got %s, want uid 0", r.raw)
	}
	if r := d.send(run); r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByGrant {
		t.Fatalf("got %s, want the grant to decide", r.raw)
	}
}
