package mcpserver

import (
	"strings"
	"syscall"
	"testing"

	"github.com/rootgate/rootgate/internal/client"
)

// TestConnectionHintClosed: a connection reset before any answer (what
// systemd does to it when a failed service's start limit fails its
// sockets) has the agent ask the user for systemctl status rootgate, as a
// silent daemon does.
func TestConnectionHintClosed(t *testing.T) {
	r := connectionResult(LocalHost, "/run/rootgate/rootgate.sock", &client.ClosedError{Socket: "/run/rootgate/rootgate.sock", Err: syscall.ECONNRESET})
	if !strings.Contains(r.Message, "closed the connection without an answer") ||
		!strings.Contains(r.Next, "`systemctl status rootgate`") || !strings.Contains(r.Next, "`journalctl -u rootgate -p err`") {
		t.Errorf("message %q, next %q", r.Message, r.Next)
	}
}
