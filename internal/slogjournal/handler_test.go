package slogjournal

import (
	"bytes"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coreos/go-systemd/v22/journal"
	"github.com/rootgate/rootgate/internal/testutil"
)

func TestFieldName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"request_id", "REQUEST_ID"},
		{"REQUEST_ID", "REQUEST_ID"},
		{"uid", "UID"},
		{"_SYSTEMD_UNIT", "SYSTEMD_UNIT"},
		{"__x", "X"},
		{"9lives", "F9LIVES"},
		{"_9", "F9"},
		{"", "F"},
		{"_", "F"},
		{"a.b-c d", "A_B_C_D"},
		{"héllo", "H__LLO"},
		{strings.Repeat("a", 70), strings.Repeat("A", 64)},
	} {
		if got := FieldName(c.in); got != c.want {
			t.Errorf("FieldName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPriority(t *testing.T) {
	for l, want := range map[slog.Level]journal.Priority{
		slog.LevelDebug: journal.PriDebug, slog.LevelDebug + 3: journal.PriDebug,
		slog.LevelInfo: journal.PriInfo, slog.LevelWarn: journal.PriWarning,
		slog.LevelError: journal.PriErr, slog.LevelError + 4: journal.PriErr,
	} {
		if got := Priority(l); got != want {
			t.Errorf("Priority(%v) = %v, want %v", l, got, want)
		}
	}
}

// The journal test runs the real journal.Send against a unixgram socket
// bound at journald's path, /run/systemd/journal/socket, in a private mount
// namespace with its own /run: a child copy of this test binary does both
// ends, so no systemd is needed and the host's /run is never touched.
const childEnv = "SLOGJOURNAL_TEST_CHILD"

func TestJournalSocket(t *testing.T) {
	if os.Getenv(childEnv) == "1" {
		journalChild(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root to make a mount namespace")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestJournalSocket$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("--- PASS: TestJournalSocket")) {
		t.Fatalf("child: %v\n%s", err, out)
	}
}

func journalChild(t *testing.T) {
	if err := syscall.Mount("tmpfs", "/run", "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/run/systemd/journal", 0o755); err != nil {
		t.Fatal(err)
	}
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: "/run/systemd/journal/socket", Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	if !journal.Enabled() {
		t.Fatal("journal.Enabled() is false with the socket bound")
	}
	log := slog.New(New(Options{Identifier: "rootgated"})).With("request_id", "abc-1", slog.Group("peer", "uid", 1000))
	big := strings.Repeat("0123456789abcdef", 300<<10/16) // past a datagram's size: sent as a file descriptor
	binaryValue := "nul\x00byte \xff\xfe and\nnewline\n"
	log.Info("audit: received", "requester_pid", 42, "reason", "line one\nline two", "blob", binaryValue, "message", "spoof", "_SYSTEMD_UNIT", "spoof.service")
	log.Warn("large", "big", big)
	log.Debug("not sent")
	log.Error("last", slog.Group("g", slog.Group("h", "k", "v")), "t", time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC))

	first, viaFD := receive(t, sock)
	if viaFD {
		t.Error("a small entry came as a descriptor")
	}
	want := map[string]string{
		"MESSAGE":           "audit: received",
		"PRIORITY":          "6",
		"SYSLOG_IDENTIFIER": "rootgated",
		"REQUEST_ID":        "abc-1",
		"PEER_UID":          "1000",
		"REQUESTER_PID":     "42",
		"REASON":            "line one\nline two",
		"BLOB":              binaryValue,
		"ATTR_MESSAGE":      "spoof",
		"SYSTEMD_UNIT":      "spoof.service",
	}
	same(t, first, want)

	second, viaFD := receive(t, sock)
	if !viaFD {
		t.Error("a 300 KiB entry did not come as a descriptor")
	}
	same(t, second, map[string]string{"MESSAGE": "large", "PRIORITY": "4", "SYSLOG_IDENTIFIER": "rootgated", "REQUEST_ID": "abc-1", "PEER_UID": "1000", "BIG": big})

	third, _ := receive(t, sock)
	same(t, third, map[string]string{"MESSAGE": "last", "PRIORITY": "3", "SYSLOG_IDENTIFIER": "rootgated", "REQUEST_ID": "abc-1", "PEER_UID": "1000", "G_H_K": "v", "T": "2026-01-02T03:04:05.000000006Z"})
}

func same(t *testing.T, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got[k] != v {
			g := got[k]
			if len(g) > 80 {
				g = g[:80] + "…"
			}
			t.Errorf("field %s = %q, want %q", k, g, trim(v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected field %s=%q", k, got[k])
		}
	}
}

func trim(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}

// receive reads one journal entry in the native protocol, following a
// passed descriptor for a large one.
func receive(t *testing.T, sock *net.UnixConn) (map[string]string, bool) {
	t.Helper()
	_ = sock.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1<<20)
	oob := make([]byte, syscall.CmsgSpace(4))
	n, oobn, _, _, err := sock.ReadMsgUnix(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	data := buf[:n]
	if oobn > 0 {
		msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		fds, err := syscall.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			t.Fatalf("rights: %v %v", fds, err)
		}
		f := os.NewFile(uintptr(fds[0]), "journal-fd")
		defer f.Close()
		if data, err = io.ReadAll(io.NewSectionReader(f, 0, 1<<30)); err != nil {
			t.Fatal(err)
		}
	}
	fields, err := testutil.ParseJournal(data)
	if err != nil {
		t.Fatal(err)
	}
	return fields, oobn > 0
}
