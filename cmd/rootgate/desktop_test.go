package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/testutil"
)

// nobodyID is the uid and gid the dialog child drops to in these tests.
const nobodyID = 65534

// userBus starts a private bus on a socket in a directory nobody can reach
// (dbus-daemon from Debian's dbus package), admitting every user: the bus
// of a user session, which the root test process can also use. It returns
// the directory and the bus address.
func userBus(t *testing.T) (dir, addr string) {
	t.Helper()
	dir = testutil.ShortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "bus")
	conf := `<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=` + sock + `</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_destination="*"/>
    <allow receive_sender="*"/>
  </policy>
</busconfig>
`
	confFile := filepath.Join(dir, "bus.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("dbus-daemon", "--config-file="+confFile, "--nofork", "--nopidfile", "--print-address")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no leftover when the test binary dies
	out := &syncBuffer{}
	cmd.Stdout = out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dbus-daemon (apt-get install dbus): %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	testutil.WaitFor(t, "dbus-daemon to print its address", 10*time.Second, func() bool { return strings.Contains(out.String(), "\n") })
	// A user's own bus socket is theirs to use; here it is root's.
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	return dir, "unix:path=" + sock
}

// syncBuffer is a goroutine-safe buffer for output read while written.
type syncBuffer = testutil.SyncBuffer

// shown is one Notify call: the notification's id and the uid of the
// process that sent it, as the bus knows it.
type shown struct {
	id   uint32
	uid  uint32
	body string
}

// notifications is a minimal org.freedesktop.Notifications service.
type notifications struct {
	conn     *dbus.Conn
	notified chan shown
	closed   chan uint32
}

func startNotifications(t *testing.T, addr string) *notifications {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	n := &notifications{conn: conn, notified: make(chan shown, 4), closed: make(chan uint32, 4)}
	if err := conn.Export(n, "/org/freedesktop/Notifications", "org.freedesktop.Notifications"); err != nil {
		t.Fatal(err)
	}
	if reply, err := conn.RequestName("org.freedesktop.Notifications", dbus.NameFlagDoNotQueue); err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("request name: %v %v", reply, err)
	}
	return n
}

func (n *notifications) GetCapabilities() ([]string, *dbus.Error) {
	return []string{"actions", "body"}, nil
}

func (n *notifications) Notify(sender dbus.Sender, app string, replaces uint32, icon, summary, body string, actions []string, hints map[string]dbus.Variant, expire int32) (uint32, *dbus.Error) {
	var uid uint32
	if err := n.conn.BusObject().Call("org.freedesktop.DBus.GetConnectionUnixUser", 0, string(sender)).Store(&uid); err != nil {
		return 0, dbus.MakeFailedError(err)
	}
	n.notified <- shown{id: 7, uid: uid, body: body}
	return 7, nil
}

func (n *notifications) CloseNotification(id uint32) *dbus.Error {
	n.closed <- id
	return nil
}

func (n *notifications) wait(t *testing.T) shown {
	t.Helper()
	select {
	case s := <-n.notified:
		return s
	case <-time.After(20 * time.Second):
		t.Fatal("no notification was shown")
	}
	panic("unreachable")
}

func dialogPrompt() *approval.Prompt {
	return &approval.Prompt{
		ID:        "req-9",
		Requester: approval.Requester{UID: 1000, GID: 1000, PID: 99, User: "alice"},
		Stages:    []approval.Stage{{Argv: []string{"id"}, Path: "/usr/bin/id"}},
		RunAs:     "root", Privileged: true,
	}
}

// TestUserDialog runs the real dialog child (this test binary as
// "rootgate", see TestMain) as nobody against a notification service on a
// private bus, as rootgate approve --desktop does under sudo.
func TestUserDialog(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the dialog child drops from root to nobody: run the tests as root")
	}
	for _, tt := range []struct {
		name    string
		answer  func(t *testing.T, n *notifications, cancel context.CancelFunc, id uint32)
		verdict approval.Verdict
		message string
		closed  bool
	}{
		{"approve", func(t *testing.T, n *notifications, _ context.CancelFunc, id uint32) {
			emit(t, n, "ActionInvoked", id, "approve")
		}, approval.Allow, "", true},
		{"deny", func(t *testing.T, n *notifications, _ context.CancelFunc, id uint32) {
			emit(t, n, "ActionInvoked", id, "deny")
		}, approval.Deny, "denied by operator alice on desktop", true},
		{"withdrawn", func(t *testing.T, _ *notifications, cancel context.CancelFunc, _ uint32) {
			cancel()
		}, approval.Withdrawn, "request withdrawn", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir, addr := userBus(t)
			n := startNotifications(t, addr)
			var stderr syncBuffer
			u := &userDialog{uid: nobodyID, gid: nobodyID, runtimeDir: dir, bus: addr, timeout: time.Minute, operator: "alice", stderr: &stderr}
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			ch := make(chan approval.Decision, 1)
			go func() { ch <- u.Approve(ctx, dialogPrompt()) }()
			s := n.wait(t)
			if s.uid != nobodyID {
				t.Errorf("the notification came from uid %d, want %d", s.uid, nobodyID)
			}
			if !strings.Contains(s.body, "[1] id\n") {
				t.Errorf("body lacks the command:\n%s", s.body)
			}
			tt.answer(t, n, cancel, s.id)
			var d approval.Decision
			select {
			case d = <-ch:
			case <-time.After(30 * time.Second):
				t.Fatal("Approve did not return")
			}
			if d.Verdict != tt.verdict || d.Message != tt.message {
				t.Errorf("decision %+v, want %v %q; child stderr: %s", d, tt.verdict, tt.message, stderr.String())
			}
			if tt.closed {
				select {
				case id := <-n.closed:
					if id != s.id {
						t.Errorf("closed %d, want %d", id, s.id)
					}
				case <-time.After(10 * time.Second):
					t.Error("the notification was not closed")
				}
			}
		})
	}
}

func TestUserDialogNoBus(t *testing.T) {
	dir := t.TempDir()
	var stderr syncBuffer
	u := &userDialog{uid: nobodyID, gid: nobodyID, runtimeDir: dir, bus: "unix:path=" + dir + "/none", timeout: time.Minute, operator: "alice", stderr: &stderr}
	d := u.Approve(t.Context(), dialogPrompt())
	if d.Verdict != approval.Unavailable || !strings.HasPrefix(d.Message, "desktop prompt as uid 65534 failed: desktop prompt on desktop failed: failed to connect to the session bus") {
		t.Errorf("decision %+v, want unavailable; child stderr: %s", d, stderr.String())
	}
}

func emit(t *testing.T, n *notifications, member string, args ...any) {
	t.Helper()
	if err := n.conn.Emit("/org/freedesktop/Notifications", "org.freedesktop.Notifications."+member, args...); err != nil {
		t.Fatal(err)
	}
}

// TestUserDialogZenity: with no notification service, the child (as
// nobody) falls back to a zenity dialog on the display it was given, here
// a private Xvfb (Debian packages xvfb, zenity, xdotool).
func TestUserDialogZenity(t *testing.T) {
	for tool, pkg := range map[string]string{"Xvfb": "xvfb", "zenity": "zenity", "xdotool": "xdotool"} {
		testutil.NeedTool(t, tool, pkg)
	}
	display := testutil.StartXvfb(t)

	dir := t.TempDir()
	var stderr syncBuffer
	u := &userDialog{uid: nobodyID, gid: nobodyID, runtimeDir: dir, bus: "unix:path=" + dir + "/none",
		display: []string{"DISPLAY=" + display}, timeout: time.Minute, operator: "alice", stderr: &stderr}
	ch := make(chan approval.Decision, 1)
	go func() { ch <- u.Approve(t.Context(), dialogPrompt()) }()

	xdo := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "xdotool", args...)
		cmd.Env = []string{"DISPLAY=" + display}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("xdotool %s: %v; child stderr: %s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	win := xdo("search", "--sync", "--onlyvisible", "--limit", "1", "--name", "rootgate: run this command as ROOT?")
	xdo("windowfocus", "--sync", win)
	// Tab to the box, tick it, then two Tabs to Approve and press it: in
	// zenity 4 (GTK 4, Ubuntu 24.04) the focus goes from the box to Deny,
	// then to Approve; zenity 3 (Debian 12) presses Approve on Return.
	xdo("key", "Tab", "space", "Tab", "Tab", "Return")
	select {
	case d := <-ch:
		if d.Verdict != approval.Allow {
			t.Errorf("decision %+v, want allow; child stderr: %s", d, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Approve did not return")
	}
}

func TestRelayLinesEscapes(t *testing.T) {
	// The dialog child runs as the desktop's user; what it writes to
	// stderr must reach the operator's terminal with no control sequence.
	var out bytes.Buffer
	relayLines(&out, []byte("zenity: plain\n\x1b[2J\x1b]0;title\x07cleared\r\nno newline at the end"))
	got := out.String()
	if strings.ContainsAny(got, "\x1b\x07\r") {
		t.Fatalf("a control character reached the terminal: %q", got)
	}
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(lines) != 3 || lines[0] != "zenity: plain" || !strings.Contains(lines[1], "cleared") || lines[2] != "no newline at the end" {
		t.Fatalf("relayed %q", got)
	}
}
