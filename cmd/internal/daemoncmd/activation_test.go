package daemoncmd

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil"
)

// sockListener makes a Unix socket of type typ bound in dir, listening
// when listen is set, and turns it into a net.Listener the way activation
// does.
func sockListener(t *testing.T, dir, name string, typ int, listen bool) net.Listener {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_UNIX, typ, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if err := syscall.Bind(fd, &syscall.SockaddrUnix{Name: filepath.Join(dir, name)}); err != nil {
		t.Fatal(err)
	}
	if listen {
		if err := syscall.Listen(fd, 1); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.FileListener(f)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestPickListeners(t *testing.T) {
	dir := testutil.ShortDir(t)
	n := 0
	stream := func() net.Listener {
		n++
		return sockListener(t, dir, "s"+string(rune('a'+n)), syscall.SOCK_STREAM, true)
	}

	req, appr, err := pickListeners(2, []string{"requests", "approvers"}, map[string][]net.Listener{"requests": {stream()}, "approvers": {stream()}})
	if err != nil || req == nil || appr == nil {
		t.Fatalf("both: %v %v %v", req, appr, err)
	}
	req, appr, err = pickListeners(1, []string{"requests"}, map[string][]net.Listener{"requests": {stream()}})
	if err != nil || req == nil || appr != nil {
		t.Fatalf("requests only: %v %v %v", req, appr, err)
	}

	const expected = `socket activation: expected fds named "requests" and optionally "approvers", each a listening Unix stream socket; got `
	for _, tc := range []struct {
		name   string
		nfds   int
		names  []string
		byName map[string][]net.Listener
		why    string
	}{
		{"datagram", 1, []string{"requests"},
			map[string][]net.Listener{"requests": {sockListener(t, dir, "dg", syscall.SOCK_DGRAM, false)}},
			`1 fd: "requests" (fd "requests" is a unixgram socket, not a Unix stream socket)`},
		{"not listening", 1, []string{"requests"},
			map[string][]net.Listener{"requests": {sockListener(t, dir, "nl", syscall.SOCK_STREAM, false)}},
			`1 fd: "requests" (fd "requests" is not listening)`},
		{"not a socket", 2, []string{"requests", "approvers"},
			map[string][]net.Listener{"requests": {stream()}},
			`2 fds: "requests", "approvers" (1 of them not listening sockets)`},
		{"unnamed", 1, nil,
			map[string][]net.Listener{"LISTEN_FD_3": {stream()}},
			`1 fd: an unnamed fd (unknown name "LISTEN_FD_3")`},
	} {
		_, _, err := pickListeners(tc.nfds, tc.names, tc.byName)
		if err == nil || err.Error() != expected+tc.why {
			t.Errorf("%s: got %v\nwant %s", tc.name, err, expected+tc.why)
		}
		for _, ls := range tc.byName {
			if err := ls[0].Close(); err == nil || !strings.Contains(err.Error(), "use of closed") {
				t.Errorf("%s: listener left open on error (close: %v)", tc.name, err)
			}
		}
	}
}
