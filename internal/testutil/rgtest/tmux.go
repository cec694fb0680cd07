package rgtest

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// Tmux is `rootgate approve` in a detached session of a tmux server of
// its own, so a test sees the screen as the operator does (rows of the
// window, long lines wrapped by the terminal) and types into it with
// send-keys, as any program of the same uid can.
type Tmux struct {
	T    testing.TB
	Sock string // the tmux server's socket
}

// StartTmuxApprover runs `rootgate approve --socket asock` with more args
// as root in a cols×rows window of a new tmux server, killed when t ends.
func StartTmuxApprover(t testing.TB, asock string, cols, rows int, args ...string) *Tmux {
	t.Helper()
	tm := &Tmux{T: t, Sock: filepath.Join(testutil.ShortDir(t), "tmux")}
	// With more than one word after the options, tmux runs the command
	// itself, without a shell.
	cmd := append([]string{"env", "TERM=xterm-256color", "SUDO_USER=", Rootgate(t), "approve", "--socket", asock}, args...)
	if out, err := exec.Command("tmux", append([]string{"-S", tm.Sock, "-f", "/dev/null", "new-session", "-d",
		"-x", fmt.Sprint(cols), "-y", fmt.Sprint(rows)}, cmd...)...).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.Sock, "kill-server").Run() })
	return tm
}

// Rows returns the window's rows as shown now.
func (tm *Tmux) Rows() []string {
	tm.T.Helper()
	out, err := exec.Command("tmux", "-S", tm.Sock, "capture-pane", "-p").Output()
	if err != nil {
		tm.T.Fatalf("capture-pane: %v", err)
	}
	return strings.Split(string(out), "\n")
}

// Wait waits until a row holds want, and returns the rows.
func (tm *Tmux) Wait(want string) []string {
	tm.T.Helper()
	return tm.WaitRows("the tmux window to show "+want, func(rows []string) bool {
		return slices.ContainsFunc(rows, func(r string) bool { return strings.Contains(r, want) })
	})
}

// WaitRows waits until the window's rows satisfy cond, and returns them;
// on a timeout the failure shows the window.
func (tm *Tmux) WaitRows(what string, cond func(rows []string) bool) []string {
	tm.T.Helper()
	var rows []string
	if !testutil.Poll(30*time.Second, func() bool { rows = tm.Rows(); return cond(rows) }) {
		tm.T.Fatalf("timed out waiting for %s; the window shows:\n%s", what, strings.Join(rows, "\n"))
	}
	return rows
}

// Key types k, as it is, into the window.
func (tm *Tmux) Key(k string) {
	tm.T.Helper()
	if out, err := exec.Command("tmux", "-S", tm.Sock, "send-keys", "-l", k).CombinedOutput(); err != nil {
		tm.T.Fatalf("send-keys: %v: %s", err, out)
	}
}
