package e2e

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// startActivated runs rootgated under the real systemd-socket-activate,
// which binds one socket per name in fdnames (d.sock is the first, the
// approver socket the second) and execs rootgated with them on the first
// connection. At cleanup a daemon still running is stopped with SIGTERM
// and must exit 0.
func startActivated(t *testing.T, policy string, fdnames []string, args ...string) *daemonProc {
	t.Helper()
	sa := testutil.NeedTool(t, "systemd-socket-activate", "systemd")
	d := newDaemon(t, shortDir(t))
	if err := os.WriteFile(filepath.Join(d.Dir, "policy"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	var saArgs []string
	for i := range fdnames {
		saArgs = append(saArgs, "-l", filepath.Join(d.Dir, []string{"s", "a", "x"}[i]))
	}
	saArgs = append(saArgs, "--fdname="+strings.Join(fdnames, ":"), rootgated,
		"--policy", filepath.Join(d.Dir, "policy"), "--runtime-dir", filepath.Join(d.Dir, "run"), "--audit", auditPath(d.Dir))
	d.Cmd = exec.Command(sa, append(saArgs, args...)...)
	d.Cmd.Stderr = d.Stderr
	d.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.Watch()
	// The socket files are systemd-socket-activate's, left in place.
	t.Cleanup(func() { d.Terminate() })
	// systemd-socket-activate has bound the sockets once it says so.
	waitFor(t, "systemd-socket-activate to listen", 30*time.Second, func() bool {
		return strings.Count(d.Stderr.String(), "Listening on") == len(fdnames)
	})
	return d
}

// exited waits for the daemon to exit on its own and returns its exit code.
func (d *daemonProc) exited(within time.Duration) int {
	d.T.Helper()
	select {
	case <-d.Done():
	case <-time.After(within):
		d.T.Fatalf("rootgated did not exit\n%s", d.Stderr)
	}
	var ee *exec.ExitError
	if errors.As(d.Err(), &ee) {
		return ee.ExitCode()
	}
	if d.Err() != nil {
		d.T.Fatal(d.Err())
	}
	return 0
}

// running asserts the daemon has not exited.
func (d *daemonProc) running() {
	d.T.Helper()
	select {
	case <-d.Done():
		d.T.Fatalf("rootgated exited (%v) while it should not\n%s", d.Err(), d.Stderr)
	default:
	}
}

// stayUp asserts the daemon keeps running for a while: a condition that
// holds for a span of time can only be watched, not polled for.
func (d *daemonProc) stayUp(span time.Duration) {
	d.T.Helper()
	select {
	case <-d.Done():
		d.T.Fatalf("rootgated exited (%v) while it should not\n%s", d.Err(), d.Stderr)
	case <-time.After(span):
	}
}

func TestSocketActivation(t *testing.T) {
	t.Parallel()
	t.Run("request socket", func(t *testing.T) {
		t.Parallel()
		d := startActivated(t, "allow any\n", []string{"requests", "approvers"})
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"echo", "handed-over"}}}))
		if string(r.Stdout) != "handed-over\n" {
			t.Fatalf("%s", r.raw)
		}
		// The start-up line may be written after the first answer.
		waitFor(t, "the daemon to log that it was socket-activated", 10*time.Second, func() bool {
			return strings.Contains(d.Stderr.String(), "activated=true")
		})
	})
	t.Run("approver socket", func(t *testing.T) {
		t.Parallel()
		d := startActivated(t, "ask any\n", []string{"requests", "approvers"}, "--prompt-timeout", "20s")
		a := startApprover(t, d.asock(), 0)
		a.See("attached to rootgated")
		ch := d.ask(map[string]any{"id": "act-y", "pipeline": [][]string{{"echo", "approved-over-fd"}}})
		a.See("act-y")
		a.See("n or Esc deny")
		a.Key("y")
		if r := wantOK(t, <-ch); string(r.Stdout) != "approved-over-fd\n" {
			t.Fatalf("%s", r.raw)
		}
	})
	t.Run("requests only", func(t *testing.T) {
		t.Parallel()
		d := startActivated(t, "allow any\n", []string{"requests"})
		d.alive()
		waitFor(t, "the daemon to log that it serves no approver socket", 10*time.Second, func() bool {
			return strings.Contains(d.Stderr.String(), "approvers=false")
		})
	})
}

func TestSocketActivationWrongFDs(t *testing.T) {
	t.Parallel()
	const expected = `rootgated: error: socket activation: expected fds named "requests" and optionally "approvers", each a listening Unix stream socket; got `
	for _, tc := range []struct {
		names []string
		why   string
	}{
		{[]string{"bogus"}, `1 fd: "bogus" (unknown name "bogus")`},
		{[]string{"approvers"}, `1 fd: "approvers" (none named "requests")`},
		{[]string{"requests", "requests"}, `2 fds: "requests", "requests" (2 fds named "requests")`},
		{[]string{"requests", "approvers", "extra"}, `3 fds: "requests", "approvers", "extra" (unknown name "extra")`},
	} {
		t.Run(strings.Join(tc.names, ":"), func(t *testing.T) {
			t.Parallel()
			d := startActivated(t, "allow any\n", tc.names)
			// The first connection makes systemd-socket-activate start it.
			if c, err := net.Dial("unix", d.Sock); err == nil {
				c.Close()
			}
			if code := d.exited(30 * time.Second); code != 78 {
				t.Fatalf("exit code %d, want 78 (configuration)\n%s", code, d.Stderr)
			}
			if want := expected + tc.why + "\n"; !strings.Contains(d.Stderr.String(), want) {
				t.Fatalf("stderr lacks %q:\n%s", want, d.Stderr)
			}
		})
	}
}

// TestSocketActivationNoFDs: LISTEN_PID names the daemon but no fd is
// handed over (LISTEN_FDS=0, or not a number); the daemon must not fall
// back to binding sockets itself.
func TestSocketActivationNoFDs(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"0", "x"} {
		dir := shortDir(t)
		// The shell's pid is the daemon's after exec.
		cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, rootgated,
			"--socket", filepath.Join(dir, "s"), "--approver-socket", "", "--runtime-dir", filepath.Join(dir, "run"),
			"--policy", filepath.Join(dir, "policy"))
		cmd.Env = append(os.Environ(), "LISTEN_FDS="+n, "LISTEN_FDNAMES=requests")
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 78 {
			t.Fatalf("LISTEN_FDS=%s: %v, want exit code 78 (configuration)\n%s", n, err, out)
		}
		want := `rootgated: error: socket activation: expected fds named "requests" and optionally "approvers", each a listening Unix stream socket; got LISTEN_FDS="` + n + `"` + "\n"
		if !strings.Contains(string(out), want) {
			t.Errorf("LISTEN_FDS=%s: output lacks %q:\n%s", n, want, out)
		}
		if _, err := os.Stat(filepath.Join(dir, "s")); err == nil {
			t.Errorf("LISTEN_FDS=%s: the daemon bound --socket itself", n)
		}
	}
}

func TestSdNotify(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	ns, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	states := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := ns.Read(buf)
			if err != nil {
				close(states)
				return
			}
			states <- string(buf[:n])
		}
	}()
	next := func(want string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case s, ok := <-states:
				if !ok {
					t.Fatalf("notify socket closed waiting for %s", want)
				}
				if s == want {
					return
				}
				if s != "WATCHDOG=1" {
					t.Fatalf("got %q waiting for %q", s, want)
				}
			case <-timeout:
				t.Fatalf("no %s", want)
			}
		}
	}

	if err := os.WriteFile(filepath.Join(dir, "policy"), []byte("allow any\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, dir)
	d.Cmd = exec.Command(rootgated, "--socket", d.Sock, "--approver-socket", filepath.Join(dir, "a"),
		"--runtime-dir", filepath.Join(dir, "run"), "--policy", filepath.Join(dir, "policy"), "--audit", auditPath(dir))
	d.Cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+filepath.Join(dir, "notify"), "WATCHDOG_USEC=200000")
	d.Start()

	next("READY=1")
	d.alive() // ready means both sockets answer, with no waiting
	if c, err := net.Dial("unix", filepath.Join(dir, "a")); err != nil {
		t.Fatalf("approver socket not there at READY=1: %v", err)
	} else {
		c.Close()
	}
	// The watchdog is pinged at half of WATCHDOG_USEC.
	select {
	case s := <-states:
		if s != "WATCHDOG=1" {
			t.Fatalf("got %q, want WATCHDOG=1", s)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no WATCHDOG=1")
	}
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	next("STOPPING=1")
	if code := d.exited(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, d.Stderr)
	}
}

func TestIdleExit(t *testing.T) {
	t.Parallel()
	idle := []string{"--idle-exit", "2s", "--max-skew", "1s"}
	t.Run("exits when idle", func(t *testing.T) {
		t.Parallel()
		d := startActivated(t, "allow any\n", []string{"requests", "approvers"}, idle...)
		d.alive()
		if code := d.exited(60 * time.Second); code != 0 {
			t.Fatalf("exit code %d\n%s", code, d.Stderr)
		}
		if !strings.Contains(d.Stderr.String(), `msg="idle; exiting"`) {
			t.Errorf("no idle exit logged:\n%s", d.Stderr)
		}
	})
	t.Run("not within the replay window", func(t *testing.T) {
		t.Parallel()
		// A 12s window and a 1s idle time: the window decides.
		d := startActivated(t, "allow any\n", []string{"requests"}, "--idle-exit", "1s", "--max-skew", "6s")
		d.alive()
		d.stayUp(6 * time.Second)
		if code := d.exited(60 * time.Second); code != 0 {
			t.Fatalf("exit code %d\n%s", code, d.Stderr)
		}
	})
	t.Run("not while an approver is attached", func(t *testing.T) {
		t.Parallel()
		d := startActivated(t, "ask any\n", []string{"requests", "approvers"}, idle...)
		a := startApprover(t, d.asock(), 0)
		a.See("attached to rootgated")
		d.stayUp(6 * time.Second) // three times --idle-exit
		a.Kill()
		if code := d.exited(60 * time.Second); code != 0 {
			t.Fatalf("exit code %d\n%s", code, d.Stderr)
		}
	})
	t.Run("not while a run is in progress", func(t *testing.T) {
		t.Parallel()
		d := startActivated(t, "allow any\n", []string{"requests", "approvers"}, idle...)
		// The run outlasts the replay window plus --idle-exit, so only the
		// run itself keeps the daemon up: its answer must come back ok,
		// not "daemon stopping".
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"sleep", "6"}}}))
		if len(r.Stages) != 1 || r.Stages[0].ExitCode != 0 {
			t.Fatalf("%s", r.raw)
		}
		d.running()
		if code := d.exited(60 * time.Second); code != 0 {
			t.Fatalf("exit code %d\n%s", code, d.Stderr)
		}
	})
	t.Run("not when started by hand", func(t *testing.T) {
		t.Parallel()
		d := startDaemon(t, opts{Args: idle})
		d.alive()
		d.stayUp(6 * time.Second)
		d.alive()
	})
}
