package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// TestPolicyAllowNeedsRootsPath: an allow rule names a path, and the
// requester decides which file that path leads to when it goes through a
// directory the requester may change, or through its link: its own
// symlink to a root program (a rule saved from a prompt for
// `~/bin/sc status nginx`, where sc led to systemctl; or /tmp/sc, in a
// directory of root's whose sticky bit keeps others from renaming root's
// entries, not the requester's own), or root's link to such a link,
// which it then points at any other root program, run with the rule's
// arguments. The file that runs is root's in root's
// directory, so only the path as written shows it. The rule does not
// decide such a request (with no one attached, it is denied), nor one
// whose path holds "..", which a root symlink into the requester's tree
// could take anywhere; a check says a person would be asked. The same
// rule for a path root alone controls still allows.
func TestPolicyAllowNeedsRootsPath(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rt6ag")
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	agentDir, rootDir, tmp := filepath.Join(dir, "agent"), filepath.Join(dir, "root"), filepath.Join(dir, "tmp")
	for p, uid := range map[string]uint32{agentDir: ag.uid, rootDir: 0, filepath.Join(rootDir, "bin"): 0, tmp: 0} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, int(uid), -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil { // as /tmp
		t.Fatal(err)
	}
	// The requester's links, made by the requester: sc to a root
	// program, sub to a root directory, and one more such link in the
	// shared sticky directory.
	link, sub, tmpLink := filepath.Join(agentDir, "sc"), filepath.Join(agentDir, "sub"), filepath.Join(tmp, "sc")
	for _, l := range [][2]string{{"/usr/bin/id", link}, {"/usr/lib", sub}, {"/usr/bin/id", tmpLink}} {
		ln := exec.Command("ln", "-s", l[0], l[1])
		ln.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: ag.uid, Gid: ag.gid}}
		if out, err := ln.CombinedOutput(); err != nil {
			t.Fatalf("ln -s %s %s as the requester: %v\n%s", l[0], l[1], err, out)
		}
	}
	// Root's link into the requester's tree: into/.. is where sub leads.
	if err := os.Symlink(sub, filepath.Join(rootDir, "into")); err != nil {
		t.Fatal(err)
	}
	dotdot := filepath.Join(rootDir, "into") + "/../bin/id" // /usr/lib/../bin/id
	rootLink := filepath.Join(rootDir, "id")
	if err := os.Symlink("/usr/bin/id", rootLink); err != nil {
		t.Fatal(err)
	}
	// Root's link to the requester's link: the requester's is the one
	// that chooses.
	via := filepath.Join(rootDir, "via")
	if err := os.Symlink(link, via); err != nil {
		t.Fatal(err)
	}

	d := startDaemon(t, opts{Policy: "allow privileged " + link + " -u\n" +
		"allow privileged " + dotdot + " -u\n" +
		"allow privileged " + tmpLink + " -u\n" +
		"allow privileged " + via + " -u\n" +
		"allow privileged " + rootLink + " -u\n"})
	openToAll(t, d)
	as := func(over map[string]any) response {
		t.Helper()
		return sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(over))
	}
	for _, tc := range []struct{ what, argv0 string }{
		{"the requester's link to a root program", link},
		{"a path with .. through a link into the requester's tree", dotdot},
		{"the requester's link in a sticky directory of root's", tmpLink},
		{"root's link to the requester's link", via},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := as(map[string]any{"pipeline": [][]string{{tc.argv0, "-u"}}})
			if r.Status == wire.StatusOK {
				t.Fatalf("allowed by the rule, ran as uid %q: %s", strings.TrimSpace(string(r.Stdout)), r.raw)
			}
			wantNoApprover(t, r)
			c := as(map[string]any{"pipeline": [][]string{{tc.argv0, "-u"}}, "check": true})
			if c.Status != wire.StatusOK || c.Check != wire.CheckAsk {
				t.Fatalf("check: got %s, want %q", c.raw, wire.CheckAsk)
			}
		})
	}
	t.Run("root's link in root's directory is allowed", func(t *testing.T) {
		r := wantOK(t, as(map[string]any{"pipeline": [][]string{{rootLink, "-u"}}}))
		if string(r.Stdout) != "0\n" {
			t.Fatalf("stdout %q, want 0", r.Stdout)
		}
	})
}
