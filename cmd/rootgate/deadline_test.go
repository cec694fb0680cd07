package main

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// silentSocket listens on path and never accepts: what systemd's socket
// unit does while rootgate.service is failed. Connections succeed (they
// wait in the queue) and nobody ever answers.
func silentSocket(t *testing.T, path string) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
}

// runClient runs the real rootgate with args, env added and stdin, and
// returns its exit code, its stderr and how long it took. It fails the
// test if rootgate is still running after limit.
func runClient(t *testing.T, limit time.Duration, env []string, stdin string, args ...string) (int, string, time.Duration) {
	t.Helper()
	cmd := exec.Command(rgtest.Rootgate(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("rootgate %v still waiting after %s\n%s", args, limit, &stderr)
	}
	took := time.Since(start)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), stderr.String(), took
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, stderr.String(), took
}

// TestClientsGiveUpOnSilentDaemon: against sockets that take connections
// and never answer (rootgate.service failed, its sockets still
// listening), every client that talks to rootgated gives up after its
// deadline ($ROOTGATE_ANSWER_WITHIN, 1s here; 10s by default), with the
// documented error exit code 70 and a message saying what happened and
// what to check, rather than waiting for ever.
func TestClientsGiveUpOnSilentDaemon(t *testing.T) {
	t.Parallel()
	dir := testutil.ShortDir(t)
	sock, asock := filepath.Join(dir, "s"), filepath.Join(dir, "a")
	silentSocket(t, sock)
	silentSocket(t, asock)
	env := []string{client.AnswerWithinEnv + "=1s"}
	ping := fmt.Sprintf(`{"action":"ping","time":"%s"}`+"\n", time.Now().UTC().Format(time.RFC3339))
	for _, tc := range []struct {
		name  string
		stdin string
		args  []string
		says  string
	}{
		{"run", "", []string{"run", "--socket", sock, "--", "id"}, "rootgate: error: rootgated did not answer within 1s (" + sock + "); the request was withdrawn\n"},
		{"run with stdin", strings.Repeat("x", 4<<20), []string{"run", "--socket", sock, "--stdin-file", "-", "--", "cat"}, "rootgate: error: rootgated did not answer within 1s (" + sock + "); the request was withdrawn\n"},
		{"ping", "", []string{"ping", "--socket", sock}, "rootgate: error: rootgated did not answer within 1s (" + sock + "); the request was withdrawn\n"},
		{"send", ping, []string{"send", "--socket", sock}, "rootgate: error: rootgated did not answer within 1s (" + sock + "); the request was withdrawn\n"},
		{"grants", "", []string{"grants", "--socket", asock}, "rootgate: error: grants: rootgated did not answer within 1s (" + asock + ")\n"},
		{"grants revoke", "", []string{"grants", "revoke", "--socket", asock, "g1"}, "rootgate: error: grants revoke: rootgated did not answer within 1s (" + asock + ")\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, stderr, took := runClient(t, 20*time.Second, env, tc.stdin, tc.args...)
			if code != exitError {
				t.Errorf("exit code %d, want %d\n%s", code, exitError, stderr)
			}
			if want := tc.says + "rootgate: hint: " + client.NoAnswerHint + "\n"; stderr != want {
				t.Errorf("stderr\n%s\nwant\n%s", stderr, want)
			}
			if took < time.Second {
				t.Errorf("gave up after %s, before its deadline", took)
			}
		})
	}
	t.Run("approve", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(rgtest.Rootgate(t), "approve", "--socket", asock)
		cmd.Env = append(os.Environ(), "TERM=xterm-256color", "SUDO_USER=", client.AnswerWithinEnv+"=1s")
		a := rgtest.StartOnPty(t, cmd, &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL})
		a.See("rootgate: rootgated at " + asock + " did not answer within 1s (is the service failed? systemctl status rootgate; journalctl -u rootgate -p err); retrying")
		// And again: each attempt has the bound, and it keeps trying.
		a.See("did not answer within 1s")
	})
}

// TestRunOutlastsAnswerWithin: the short first deadline only bounds the
// wait for the daemon's first line. A run longer than it, and a prompt
// longer than it, still get their answer: each progress line moves the
// deadline to what the daemon says the rest may take.
func TestRunOutlastsAnswerWithin(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "allow any sleep ...\n", Args: []string{"--prompt-timeout", "30s"}})
	env := []string{client.AnswerWithinEnv + "=1s"}
	code, stderr, took := runClient(t, 30*time.Second, env, "", "run", "--socket", d.Sock, "--", "sleep", "2.5")
	if code != 0 || took < 2500*time.Millisecond {
		t.Fatalf("run of 2.5s: exit code %d after %s\n%s", code, took, stderr)
	}

	a := rgtest.StartApprover(t, d.ApproverSock(), 0)
	a.See("attached to rootgated")
	type result struct {
		code   int
		stderr string
	}
	ch := make(chan result, 1)
	go func() {
		code, stderr, _ := runClient(t, 30*time.Second, env, "", "run", "--socket", d.Sock, "--reason", "slow approver", "--", "echo", "approved")
		ch <- result{code, stderr}
	}()
	a.See("slow approver")
	a.See("n or Esc deny")
	// The person takes longer than the first deadline to answer.
	time.Sleep(1500 * time.Millisecond)
	a.Key("y")
	if r := <-ch; r.code != 0 {
		t.Fatalf("approved after 1.5s: exit code %d\n%s", r.code, r.stderr)
	}
}
