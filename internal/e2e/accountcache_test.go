package e2e

import (
	"os/exec"
	"testing"
)

// TestAccountChangeSeenAtOnce: the daemon keeps the run-as accounts it
// looked up (pipeline.CachedAccount), but an account changed in the
// account files is never run as the old one: the next request after
// usermod sees the new login shell and home, however soon it comes.
func TestAccountChangeSeenAtOnce(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	openToAll(t, d)
	u := addAccount(t, "rgperf1", "-s", "/bin/sh", "-d", "/nonexistent-rgperf1")
	ask := func() string {
		t.Helper()
		show := request(map[string]any{"pipeline": [][]string{{"sh", "-c", `echo "$SHELL $HOME"`}}, "privileged": false, "cwd": "/"})
		r := wantOK(t, sendAs(t, d.Sock, u.uid, u.gid, []uint32{}, show))
		return string(r.Stdout)
	}
	if got, want := ask(), "/bin/sh /nonexistent-rgperf1\n"; got != want {
		t.Fatalf("before the change: %q, want %q", got, want)
	}
	// Twice, so the cache has served the account before it changes.
	ask()
	if out, err := exec.Command("usermod", "-s", "/bin/bash", "-d", "/nonexistent-rgperf1b", "rgperf1").CombinedOutput(); err != nil {
		t.Fatalf("usermod: %v: %s", err, out)
	}
	if got, want := ask(), "/bin/bash /nonexistent-rgperf1b\n"; got != want {
		t.Fatalf("right after usermod: %q, want %q", got, want)
	}
}
