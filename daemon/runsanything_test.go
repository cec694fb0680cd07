package daemon_test

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"

	"github.com/rootgate/rootgate/approval/policy"
	"github.com/rootgate/rootgate/approval/remote"
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
		if m := c.next(); m.Type != remote.MsgError || m.Message != wire.ApproverRuleRunsAnything {
			t.Errorf("%s: the rule %q without rule_runs_anything got %+v, want %q", tc.name, tc.rule, m, wire.ApproverRuleRunsAnything)
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
