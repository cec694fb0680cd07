package main

import (
	"errors"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// terminalQuery matches the queries a program sends to learn about its
// terminal and then waits for an answer to: OSC 10/11 (foreground and
// background colour), DSR cursor position and DA1.
var terminalQuery = regexp.MustCompile(`\x1b\]1[01];\?|\x1b\[6n|\x1b\[0?c`)

// runOnSilentTTY runs this test binary as name with args, its controlling
// terminal a pty whose master is read but never answers, and returns all
// it wrote there. It fails the test if the program does not exit within
// 20 s.
func runOnSilentTTY(t *testing.T, name string, env []string, args ...string) string {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("failed to open a pty: %v", err)
	}
	defer master.Close()
	if err := pty.Setsize(master, &pty.Winsize{Rows: 24, Cols: 80}); err != nil {
		t.Fatalf("failed to size the pty: %v", err)
	}
	var out testutil.SyncBuffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return // EIO once the program and its terminal are gone
			}
		}
	}()

	bin := rgtest.Rootgate(t)
	if name == "rootgated" {
		bin = rgtest.Rootgated(t)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	// Its own session with the pty as controlling terminal, in the
	// foreground: as in a shell on a serial console.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("failed to start %s: %v", name, err)
	}
	tty.Close()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		// run and ping fail, with no daemon: that is expected.
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("%s %q: %v", name, args, err)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("%s %q did not exit within 20s on a terminal that does not answer; it wrote %q", name, args, out.String())
	}
	select {
	case <-read:
	case <-time.After(20 * time.Second):
		t.Fatalf("the pty of %s %q did not close", name, args)
	}
	return out.String()
}

// TestNoTerminalQueryOnSilentTTY runs commands that draw no form on a
// terminal that never answers (a serial console, some multiplexers): none
// may ask the terminal anything, since that is waited on; each must exit.
// Bubble Tea v1 queried the background colour in every process that
// linked it, and each of these commands then took 5 s.
func TestNoTerminalQueryOnSilentTTY(t *testing.T) {
	t.Parallel()
	dir := testutil.ShortDir(t)
	missing := dir + "/missing.sock"
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir, "TERM=xterm-256color", "ROOTGATE_SOCKET=" + missing}
	for _, c := range []struct {
		name string
		args []string
		want string // in what it writes: it did run on the pty
	}{
		{"rootgate", []string{"version"}, "rootgate "},
		{"rootgate", []string{"run", "--", "true"}, missing},
		{"rootgate", []string{"ping", "--socket", missing}, missing},
		{"rootgated", []string{"--version"}, "rootgated "},
	} {
		t.Run(c.name+" "+c.args[0], func(t *testing.T) {
			t.Parallel()
			out := runOnSilentTTY(t, c.name, env, c.args...)
			if !strings.Contains(out, c.want) {
				t.Errorf("%s %q wrote %q, want it to say %q", c.name, c.args, out, c.want)
			}
			if q := terminalQuery.FindString(out); q != "" {
				t.Errorf("%s %q sent the terminal query %q; it wrote %q", c.name, c.args, q, out)
			}
		})
	}
}
