package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// rootgateCmd returns a command running the real rootgate
// (rgtest.Binaries) with env as its whole environment.
func rootgateCmd(t *testing.T, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(rgtest.Rootgate(t), args...)
	cmd.Env = env
	return cmd
}

// waitFor polls cond until it holds, failing the test after 20s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, 20*time.Second, cond)
}

// TestApproveDesktop runs the real daemon, `rootgate approve --desktop`
// and `rootgate run`, with a notification service on a private session
// bus playing the operator's desktop.
func TestApproveDesktop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("rootgated needs root: run the tests as root")
	}
	_, bus := userBus(t)
	n := startNotifications(t, bus)
	dir := testutil.ShortDir(t)
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}

	// No policy file: every request asks.
	d := rgtest.StartDaemon(t, rgtest.Opts{NoFile: true, Dir: dir, Env: env})

	// No terminal: approve --desktop must not need one.
	approver := rootgateCmd(t, append(env, "DBUS_SESSION_BUS_ADDRESS="+bus), "approve", "--desktop", "--socket", d.ApproverSock())
	approver.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	var alog syncBuffer
	approver.Stderr = &alog
	if err := approver.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// SIGINT is a clean detach.
		_ = approver.Process.Signal(syscall.SIGINT)
		_ = approver.Wait()
		if t.Failed() {
			t.Logf("rootgate approve --desktop said:\n%s", alog.String())
		}
	})
	waitFor(t, "the desktop approver to attach", func() bool { return strings.Contains(alog.String(), "attached to rootgated") })
	if !strings.Contains(alog.String(), " on desktop;") {
		t.Errorf("approver's status does not name the desktop:\n%s", alog.String())
	}

	for _, tt := range []struct {
		action string
		code   int
		stdout string
		stderr string
		status string
	}{
		{"approve", 0, "hello-desktop\n", "", "approved"},
		{"deny", exitDenied, "", "denied", "denied"},
	} {
		t.Run(tt.action, func(t *testing.T) {
			run := rootgateCmd(t, env, "run", "--socket", d.Sock, "--", "echo", "hello-desktop")
			var stdout, stderr bytes.Buffer
			run.Stdout, run.Stderr = &stdout, &stderr
			if err := run.Start(); err != nil {
				t.Fatal(err)
			}
			s := n.wait(t)
			if !strings.Contains(s.body, "echo hello-desktop") {
				t.Errorf("body lacks the command:\n%s", s.body)
			}
			emit(t, n, "ActionInvoked", s.id, tt.action)
			_ = run.Wait()
			if code := run.ProcessState.ExitCode(); code != tt.code || stdout.String() != tt.stdout || !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("run: exit %d, stdout %q, stderr %q; want %d, %q, stderr with %q", code, stdout.String(), stderr.String(), tt.code, tt.stdout, tt.stderr)
			}
			waitFor(t, "the approver's outcome line", func() bool { return strings.Contains(alog.String(), " "+tt.status+"\n") })
		})
	}
}
