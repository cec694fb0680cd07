package main

import (
	"bufio"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/testutil"
)

// closingSocket listens on path and ends every connection without an
// answer once the request has arrived: reset drops it with the request
// unread, which resets it, as systemd does to the connections it holds
// when the start limit fails rootgate.service and its sockets; otherwise
// the request line is read and the connection closed, as by a daemon that
// dies before answering.
func closingSocket(t *testing.T, path string, reset bool) {
	t.Helper()
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.AcceptUnix()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if !reset {
					_, _ = bufio.NewReader(c).ReadString('\n')
					return
				}
				// Wait for the request without reading it.
				raw, err := c.SyscallConn()
				if err != nil {
					return
				}
				buf := make([]byte, 1)
				_ = raw.Read(func(fd uintptr) bool {
					n, _, err := syscall.Recvfrom(int(fd), buf, syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
					return n > 0 || err != syscall.EAGAIN
				})
			}()
		}
	}()
}

// TestClientsSayWhenClosedWithoutAnswer: a connection that ends before
// any answer (reset, or closed) is an error saying so, exit 70, with the
// hint that names systemctl status rootgate: what a client sees when a
// typo in the policy fails the service under systemd.
func TestClientsSayWhenClosedWithoutAnswer(t *testing.T) {
	t.Parallel()
	dir := testutil.ShortDir(t)
	for _, reset := range []bool{true, false} {
		sock := filepath.Join(dir, "closes")
		says := "EOF"
		if reset {
			sock, says = filepath.Join(dir, "resets"), "connection reset by peer"
		}
		closingSocket(t, sock, reset)
		for _, args := range [][]string{{"ping", "--socket", sock}, {"run", "--socket", sock, "--", "id"}} {
			t.Run(sock+" "+args[0], func(t *testing.T) {
				t.Parallel()
				code, stderr, _ := runClient(t, 20*time.Second, nil, "", args...)
				if code != exitError {
					t.Errorf("exit code %d, want %d\n%s", code, exitError, stderr)
				}
				prefix := "rootgate: error: rootgated closed the connection without an answer (" + sock + "): "
				hint := "rootgate: hint: " + client.NoAnswerHint + "\n"
				if !strings.HasPrefix(stderr, prefix) || !strings.Contains(stderr, says) || !strings.HasSuffix(stderr, hint) || strings.Count(stderr, "\n") != 2 {
					t.Errorf("stderr\n%s\nwant %q…%q…, then\n%s", stderr, prefix, says, hint)
				}
			})
		}
	}
}
