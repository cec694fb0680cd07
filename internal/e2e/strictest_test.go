package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// Tests of issue 27, "The policy says what it does": the strictest rule
// that matches decides, whatever file and line it is on.

// writeDropIn writes a root-owned drop-in of the daemon's policy.
func writeDropIn(t *testing.T, d *daemonProc, name, text string) {
	t.Helper()
	dir := filepath.Join(d.Dir, "policy.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPolicyStrictestAcrossFiles: under the packaged policy, a drop-in's
// allow runs its request without a prompt, and a rule widened at the
// prompt (approved.policy, read before local.policy) cannot override a
// later drop-in's deny: the deny decides. Under first-match-wins the
// saved rule would allow the denied request.
func TestPolicyStrictestAcrossFiles(t *testing.T) {
	t.Parallel()
	packaged, err := os.ReadFile(filepath.Join("..", "..", "packaging", "policy"))
	if err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{Policy: string(packaged), Args: []string{"--prompt-timeout", "4s"}})
	writeDropIn(t, d, "10-site.policy", "allow any touch ...\n")
	writeDropIn(t, d, "approved.policy", "# saved from the prompt, widened\nallow any echo ...\n")
	writeDropIn(t, d, "local.policy", "deny any echo secret ...\n")
	d.hup()
	d.waitReloads(1)

	file := filepath.Join(d.Dir, "touched")
	r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"touch", file}}}))
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPolicy || r.DecidedBy.Rule != "allow any touch ..." {
		t.Fatalf("touch under the packaged policy: %s, want allowed by the drop-in", r.raw)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("the allowed touch did not run: %v", err)
	}

	for _, c := range []struct {
		argv  []string
		check string
		rule  string
	}{
		{[]string{"echo", "secret", "x"}, wire.CheckDeny, "deny any echo secret ..."},
		{[]string{"echo", "hello"}, wire.CheckAllow, "allow any echo ..."},
	} {
		r := wantOK(t, d.send(map[string]any{"check": true, "pipeline": [][]string{c.argv}}))
		if r.Check != c.check || r.DecidedBy == nil || r.DecidedBy.Rule != c.rule {
			t.Errorf("check %v: %s, want %s by %q", c.argv, r.raw, c.check, c.rule)
		}
	}
	r = d.send(map[string]any{"pipeline": [][]string{{"echo", "secret", "x"}}})
	if r.Status != wire.StatusDenied {
		t.Fatalf("echo secret x ran or was asked about: %s, want denied by local.policy", r.raw)
	}
}

// TestPolicyOverridesWarned: a policy written for first-match-wins, a
// catch-all "ask any" in the main file above drop-in allows, now turns
// those allows into prompts; the daemon's log at start and `rootgate
// policy check` name each rule it overrides, with both files and lines.
func TestPolicyOverridesWarned(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	main := filepath.Join(dir, "policy")
	if err := os.WriteFile(main, []byte("deny any rm ...\nask any\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(main+".d", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(main+".d", "10-web.policy"), []byte("allow privileged systemctl status {unit}\nallow any rm -f /tmp/x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wants := []string{
		main + ".d/10-web.policy:1: allow privileged systemctl status {unit}",
		main + ":2: ask any",
		main + ".d/10-web.policy:2: allow any rm -f /tmp/x",
		main + ":1: deny any rm ...",
	}
	out, err := exec.Command(rootgateBin, "policy", "check", main).CombinedOutput()
	if err != nil {
		t.Fatalf("policy check: %v\n%s", err, out)
	}
	for _, w := range wants {
		if !strings.Contains(string(out), w) {
			t.Errorf("policy check does not name %q:\n%s", w, out)
		}
	}
	if n := strings.Count(string(out), "never decides anything"); n != 2 {
		t.Errorf("policy check reports %d rules that never decide, want 2:\n%s", n, out)
	}

	// policy test names the deciding rule and the one it overrides.
	out, err = exec.Command(rootgateBin, "policy", "test", "--policy", main, "--", "systemctl", "status", "nginx").CombinedOutput()
	if err != nil {
		t.Fatalf("policy test: %v\n%s", err, out)
	}
	for _, w := range []string{"decision: ask\n", "  ask by " + main + ":2: ask any\n", "  overridden " + main + ".d/10-web.policy:1: allow privileged systemctl status {unit}\n"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("policy test lacks %q:\n%s", w, out)
		}
	}

	d := startDaemon(t, opts{Args: []string{"--policy", main}})
	log := d.Stderr.String()
	for _, w := range wants {
		if !strings.Contains(log, w) {
			t.Errorf("the daemon's log at start does not name %q:\n%s", w, log)
		}
	}
}
