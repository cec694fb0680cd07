package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/wire"
)

// Reloading the policy (docs/policy.md, "Reloading"): SIGHUP puts a new
// policy in force for the requests received from then on; what is running
// or waiting for a person is untouched, and a policy that does not parse
// or that a uid other than root could write is refused.

// reloads returns the policy_reload records of the daemon's audit log.
func (d *daemonProc) reloads() []*audit.PolicyLoad {
	d.T.Helper()
	var out []*audit.PolicyLoad
	for _, r := range records(d.T.(*testing.T), d.Dir) {
		if r.Kind == audit.KindPolicyReload {
			if r.Policy == nil {
				d.T.Fatalf("policy_reload record #%d without its policy outcome", r.Seq)
			}
			out = append(out, r.Policy)
		}
	}
	return out
}

// waitReloads waits until the daemon has recorded n policy reloads, and
// returns them.
func (d *daemonProc) waitReloads(n int) []*audit.PolicyLoad {
	d.T.Helper()
	var got []*audit.PolicyLoad
	waitFor(d.T, fmt.Sprintf("%d policy_reload record(s)", n), 30*time.Second, func() bool {
		got = d.reloads()
		return len(got) >= n
	})
	if len(got) != n {
		d.T.Fatalf("%d policy_reload records, want %d", len(got), n)
	}
	return got
}

// hup sends SIGHUP to the daemon.
func (d *daemonProc) hup() {
	d.T.Helper()
	if err := d.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		d.T.Fatal(err)
	}
}

// writePolicy replaces the daemon's policy file the way an editor saving
// it would: a new file renamed over the old.
func (d *daemonProc) writePolicy(text string) {
	d.T.Helper()
	tmp := filepath.Join(d.Dir, "policy.new")
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		d.T.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.Dir, "policy")); err != nil {
		d.T.Fatal(err)
	}
}

// TestPolicyReloadSIGHUP: with a pipeline running (allowed by a rule the
// reload removes) and a request waiting at a real approver, SIGHUP loads
// the rewritten policy: the next requests are decided by it, the running
// pipeline finishes, and the waiting request is still the approver's to
// decide, as the policy it was received under said.
func TestPolicyReloadSIGHUP(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "allow any sh ...\n", Args: []string{"--prompt-timeout", "60s"}})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	release := filepath.Join(d.Dir, "release")
	running := d.ask(map[string]any{"id": "rl-running", "pipeline": [][]string{{"sh", "-c", "touch " + d.Dir + "/started; while [ ! -e " + release + " ]; do sleep 0.02; done; echo survived"}}})
	waitFor(t, "the allowed pipeline to start", 30*time.Second, func() bool {
		_, err := os.Stat(filepath.Join(d.Dir, "started"))
		return err == nil
	})
	waiting := d.ask(map[string]any{"id": "rl-waiting", "pipeline": [][]string{{"echo", "waited"}}})
	a.See("rl-waiting")
	a.See("n or Esc deny")

	// The new policy denies both of them and allows echo now.
	d.writePolicy("deny any sh ...\ndeny any echo waited\nallow any echo now\n")
	d.hup()
	if got := d.waitReloads(1)[0]; !got.OK || got.Rules != 3 || len(got.Files) != 1 {
		t.Fatalf("policy_reload %+v, want ok with 3 rules from one file", got)
	}

	if r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"echo", "now"}}})); string(r.Stdout) != "now\n" {
		t.Errorf("a request after the reload: %s", r.raw)
	}
	r := d.send(map[string]any{"pipeline": [][]string{{"sh", "-c", "true"}}})
	if r.Status != wire.StatusDenied || !strings.Contains(r.Message, "deny any sh ...") {
		t.Errorf("a request the new policy denies: %s", r.raw)
	}

	// What was received before the reload goes on as before.
	pending(t, running, "the reload")
	pending(t, waiting, "the reload")
	if err := os.WriteFile(release, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if r := wantOK(t, <-running); string(r.Stdout) != "survived\n" {
		t.Errorf("the pipeline running across the reload: %s", r.raw)
	}
	// A key counts once the prompt has been on screen for its dwell.
	var answer response
	waitFor(t, "the approver's y to approve", 30*time.Second, func() bool {
		a.Key("y")
		select {
		case answer = <-waiting:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	})
	if r := wantOK(t, answer); string(r.Stdout) != "waited\n" {
		t.Errorf("the request waiting at the approver across the reload: %s", r.raw)
	}
	d.alive()
}

// TestPolicyReloadBroken: a policy that no longer parses is refused on
// reload: the old one stays in force, the daemon logs the file and line at
// error level and records them in the audit log; a later good reload
// works.
func TestPolicyReloadBroken(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "allow any echo ...\n"})
	d.writePolicy("deny any echo ...\nalow any true\n")
	d.hup()
	got := d.waitReloads(1)[0]
	policy := filepath.Join(d.Dir, "policy")
	if got.OK || got.File != policy || got.Line != 2 || got.Rules != 1 {
		t.Errorf("policy_reload %+v, want not ok, %s line 2, 1 rule in force", got, policy)
	}
	d.waitLog("level=ERROR", "policy reload failed", `unknown action \"alow\"`, "line=2")
	// The old policy still allows echo.
	if r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"echo", "old"}}})); string(r.Stdout) != "old\n" {
		t.Errorf("after a broken reload: %s", r.raw)
	}

	d.writePolicy("deny any echo ...\n")
	d.hup()
	if got := d.waitReloads(2)[1]; !got.OK {
		t.Errorf("policy_reload %+v, want ok", got)
	}
	if r := d.send(map[string]any{"pipeline": [][]string{{"echo", "new"}}}); r.Status != wire.StatusDenied {
		t.Errorf("after a good reload: %s", r.raw)
	}
}

// TestPolicyDropInOwnership: a drop-in another uid owns, or that group or
// others may write, and a drop-in directory another uid owns, are refused:
// at start the daemon does not start, on reload the old policy stays.
// Otherwise such a uid (the agent's) could write itself an allow rule.
func TestPolicyDropInOwnership(t *testing.T) {
	t.Parallel()
	u := addAccount(t, "rgreload1")
	d := startDaemon(t, opts{Policy: "ask any echo ...\n"})
	dropDir := filepath.Join(d.Dir, "policy.d")
	if err := os.Mkdir(dropDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A root-owned drop-in is read after the main file: its allow comes
	// second to the main file's ask, so the main file still decides echo.
	mine := filepath.Join(dropDir, "10-mine.policy")
	if err := os.WriteFile(mine, []byte("allow any true\nallow any echo ...\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Skipped: not the suffix, or a dotfile.
	for _, name := range []string{"20-x.policy~", ".30-x.policy", "40-x.policy.dpkg-old"} {
		if err := os.WriteFile(filepath.Join(dropDir, name), []byte("this is no rule\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	d.hup()
	if got := d.waitReloads(1)[0]; !got.OK || got.Rules != 3 || len(got.Files) != 2 || got.Files[1] != mine {
		t.Fatalf("policy_reload %+v, want ok with 3 rules from the main file and %s", got, mine)
	}
	wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"true"}}}))

	agents := filepath.Join(dropDir, "50-agent.policy")
	bad := []struct {
		name  string
		setup func()
		file  string
		why   string
	}{
		{"file owned by another uid", func() {
			if err := os.WriteFile(agents, []byte("allow any ...\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(agents, int(u.uid), int(u.gid)); err != nil {
				t.Fatal(err)
			}
		}, agents, fmt.Sprintf("owned by uid %d, not root", u.uid)},
		{"file writable by group", func() {
			if err := os.Chown(agents, 0, int(u.gid)); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(agents, 0o664); err != nil {
				t.Fatal(err)
			}
		}, agents, "writable by group or others (mode 0664)"},
		{"directory owned by another uid", func() {
			if err := os.Chmod(agents, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dropDir, int(u.uid), int(u.gid)); err != nil {
				t.Fatal(err)
			}
		}, dropDir, fmt.Sprintf("owned by uid %d, not root", u.uid)},
	}
	for i, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			b.setup()
			d.hup()
			got := d.waitReloads(2 + i)[1+i]
			if got.OK || got.File != b.file || got.Rules != 3 {
				t.Errorf("policy_reload %+v, want refused naming %s, 3 rules still in force", got, b.file)
			}
			d.waitLog("level=ERROR", "policy reload failed", b.why)
			// The refused drop-in's "allow any ..." is not in force.
			r := d.send(map[string]any{"pipeline": [][]string{{"sh", "-c", "true"}}})
			if r.Status == wire.StatusOK {
				t.Errorf("a request only the refused drop-in allows ran: %s", r.raw)
			}

			// Nor does a daemon start with it.
			dir := shortDir(t)
			if err := os.WriteFile(filepath.Join(dir, "policy"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(dropDir, filepath.Join(dir, "policy.d")); err != nil {
				t.Fatal(err)
			}
			d2 := startDaemonNoWait(t, dir)
			out := d2.WaitExit(30 * time.Second)
			if out == nil || !strings.Contains(d2.Stderr.String(), b.why) {
				t.Errorf("a daemon started with it: %v\n%s", out, d2.Stderr)
			}
		})
	}
}

// TestPolicyReloadByUnit runs the ExecReload= command of
// systemd/rootgate.service, with $MAINPID set to a real daemon's pid: the
// daemon reloads its policy and goes on serving (what `systemctl reload
// rootgate` does).
func TestPolicyReloadByUnit(t *testing.T) {
	t.Parallel()
	unit, err := os.ReadFile(filepath.Join("..", "..", "systemd", "rootgate.service"))
	if err != nil {
		t.Fatal(err)
	}
	var argv []string
	for line := range strings.Lines(string(unit)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecReload="); ok {
			argv = strings.Fields(v)
		}
	}
	if len(argv) == 0 {
		t.Fatal("rootgate.service has no ExecReload=")
	}
	d := startDaemon(t, opts{Policy: "deny any echo ...\n"})
	d.writePolicy("allow any echo ...\n")
	for i, a := range argv {
		argv[i] = strings.ReplaceAll(a, "$MAINPID", strconv.Itoa(d.Cmd.Process.Pid))
	}
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%q: %v\n%s", argv, err, out)
	}
	if got := d.waitReloads(1)[0]; !got.OK {
		t.Fatalf("policy_reload %+v, want ok", got)
	}
	if r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"echo", "reloaded"}}})); string(r.Stdout) != "reloaded\n" {
		t.Errorf("after the unit's reload: %s", r.raw)
	}
}
