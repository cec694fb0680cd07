package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// TestPolicyPathRootsAlone: the policy decides what runs as root, so the
// path that leads to it must be root's alone, not only the file. A
// requester that owns a directory on the way to a root-owned policy file
// (an operator's --policy under their home, say) can rename the file away
// and its deny rules with it, or put another root file in its place; one
// that owns a link on the way (in sticky /tmp) re-points it. The daemon
// refuses to start on such a policy, and `rootgate policy check` says why;
// a missing main file counts only where no one else could have removed
// it. Root's link to root's directory is fine.
func TestPolicyPathRootsAlone(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rgptag")
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	policyText := []byte("deny any rm ...\nallow any\n")
	rootsDir := filepath.Join(dir, "roots")
	agentsDir := filepath.Join(dir, "agents")
	for _, d := range []string{rootsDir, agentsDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(agentsDir, int(ag.uid), int(ag.gid)); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{rootsDir, agentsDir} {
		if err := os.WriteFile(filepath.Join(d, "policy"), policyText, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The requester's link to root's directory, and root's link to it.
	agentsLink := filepath.Join(dir, "agents-link")
	if err := os.Symlink(rootsDir, agentsLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(agentsLink, int(ag.uid), int(ag.gid)); err != nil {
		t.Fatal(err)
	}
	rootsLink := filepath.Join(dir, "roots-link")
	if err := os.Symlink(rootsDir, rootsLink); err != nil {
		t.Fatal(err)
	}
	owned := "is owned by uid " + strconv.Itoa(int(ag.uid)) + ", not by root"
	// Root's link to root's directory in the requester's: ".." after it
	// is the requester's directory, though the path as written, cleaned,
	// reads as root's dir/policy.
	sub := filepath.Join(agentsDir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sub, filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "policy"), policyText, 0o600); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name, policy, want string
	}{
		{"root's file in the requester's directory", filepath.Join(agentsDir, "policy"), agentsDir + " " + owned},
		{"root's file through the requester's link", filepath.Join(agentsLink, "policy"), agentsLink + " " + owned},
		{"no file, in the requester's directory", filepath.Join(agentsDir, "none"), "missing, and " + agentsDir + " " + owned},
		{"root's file through root's link and ..", dir + "/up/../policy", agentsDir + " " + owned},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := "policy " + c.policy + ": " + c.want
			sub := shortDir(t)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, rootgated, "--socket", filepath.Join(sub, "s"), "--approver-socket", "",
				"--runtime-dir", filepath.Join(sub, "run"), "--policy", c.policy, "--audit", auditPath(sub)).CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("rootgated started on %s (want it refused: %s)\n%s", c.policy, want, out)
			}
			if err == nil || !strings.Contains(string(out), want) {
				t.Fatalf("rootgated on %s: %v, want %q\n%s", c.policy, err, want, out)
			}
			if _, err := os.Stat(c.policy); err != nil {
				return // policy check wants a file to check
			}
			out, err = exec.Command(rootgateBin, "policy", "check", c.policy).CombinedOutput()
			if err == nil || !strings.Contains(string(out), want) {
				t.Errorf("rootgate policy check %s: %v, want %q\n%s", c.policy, err, want, out)
			}
		})
	}

	// Root's own path, through root's link, and a missing file in root's
	// directory: the daemon starts, and the rules read are in force.
	d := startDaemon(t, opts{Args: []string{"--policy", filepath.Join(rootsLink, "policy")}})
	if r := d.send(map[string]any{"pipeline": [][]string{{"rm", "-rf", "/nonexistent"}}}); r.Status != wire.StatusDenied {
		t.Errorf("the deny rule read through root's link: %s", r.raw)
	}
	startDaemon(t, opts{Args: []string{"--policy", filepath.Join(rootsDir, "none")}}).alive()
}
