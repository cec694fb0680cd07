package desktop

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/rootgate/rootgate/internal/approval"
)

// startBus starts a private session bus (dbus-daemon from Debian's dbus
// package) for one test and returns its address.
func startBus(t *testing.T) string {
	t.Helper()
	cmd := exec.Command("dbus-daemon", "--session", "--nofork", "--nopidfile", "--print-address")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // no leftover when the test binary dies
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start dbus-daemon (apt-get install dbus): %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	addr, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read dbus-daemon's address: %v", err)
	}
	return strings.TrimSpace(addr)
}

// notifyCall is one Notify call the test service received.
type notifyCall struct {
	id      uint32
	summary string
	body    string
	actions []string
	expire  int32
}

// notifyService is a minimal org.freedesktop.Notifications service on a
// test bus: it records Notify and CloseNotification calls, and the test
// plays the person by emitting its signals.
type notifyService struct {
	conn     *dbus.Conn
	caps     []string
	notified chan notifyCall
	closed   chan uint32

	mu   sync.Mutex
	next uint32
}

func newNotifyService(t *testing.T, addr string, caps ...string) *notifyService {
	t.Helper()
	conn, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s := &notifyService{conn: conn, caps: caps, notified: make(chan notifyCall, 4), closed: make(chan uint32, 4), next: 41}
	if err := conn.Export(s, notifyPath, notifyIface); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName(notifyName, dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("request name %s: %v %v", notifyName, reply, err)
	}
	return s
}

func (s *notifyService) GetCapabilities() ([]string, *dbus.Error) { return s.caps, nil }

func (s *notifyService) Notify(app string, replaces uint32, icon, summary, body string, actions []string, hints map[string]dbus.Variant, expire int32) (uint32, *dbus.Error) {
	s.mu.Lock()
	s.next++
	id := s.next
	s.mu.Unlock()
	s.notified <- notifyCall{id: id, summary: summary, body: body, actions: actions, expire: expire}
	return id, nil
}

func (s *notifyService) CloseNotification(id uint32) *dbus.Error {
	s.closed <- id
	// Reason 3: closed by a call to CloseNotification.
	_ = s.conn.Emit(notifyPath, notifyIface+".NotificationClosed", id, uint32(3))
	return nil
}

// wait returns the next notification shown, failing the test after 10s.
func (s *notifyService) wait(t *testing.T) notifyCall {
	t.Helper()
	select {
	case c := <-s.notified:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no notification was shown")
	}
	panic("unreachable")
}

// waitClosed fails the test unless notification id is closed within 10s.
func (s *notifyService) waitClosed(t *testing.T, id uint32) {
	t.Helper()
	select {
	case got := <-s.closed:
		if got != id {
			t.Errorf("CloseNotification(%d), want %d", got, id)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("notification %d was not closed", id)
	}
}

func (s *notifyService) emit(t *testing.T, member string, args ...any) {
	t.Helper()
	if err := s.conn.Emit(notifyPath, notifyIface+"."+member, args...); err != nil {
		t.Fatal(err)
	}
}

func desktopPrompt() *approval.Prompt {
	return &approval.Prompt{
		ID:         "req-1",
		Requester:  approval.Requester{UID: 1000, GID: 1000, PID: 4242, User: "alice", Exe: "/usr/bin/agent"},
		Stages:     []approval.Stage{{Argv: []string{"echo", "\x1b[31m", "<b>&"}, Path: "/usr/bin/echo"}},
		Privileged: true,
		RunAs:      "root",
	}
}

// desktopAsync runs d.Approve in the background.
func desktopAsync(ctx context.Context, d *Desktop, p *approval.Prompt) <-chan approval.Decision {
	ch := make(chan approval.Decision, 1)
	go func() { ch <- d.Approve(ctx, p) }()
	return ch
}

func decided(t *testing.T, ch <-chan approval.Decision) approval.Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(20 * time.Second):
		t.Fatal("Approve did not return")
	}
	panic("unreachable")
}

func TestDesktopAnswers(t *testing.T) {
	tests := []struct {
		name    string
		answer  func(t *testing.T, s *notifyService, id uint32)
		verdict approval.Verdict
		message string
		closes  bool // Desktop must close the notification itself
	}{
		{"approve", func(t *testing.T, s *notifyService, id uint32) {
			s.emit(t, "ActionInvoked", id, "approve")
		}, approval.Allow, "", true},
		{"deny", func(t *testing.T, s *notifyService, id uint32) {
			s.emit(t, "ActionInvoked", id, "deny")
		}, approval.Deny, "denied by operator alice on desktop", true},
		{"closed without an answer", func(t *testing.T, s *notifyService, id uint32) {
			s.emit(t, "NotificationClosed", id, uint32(2)) // dismissed by the user
		}, approval.Deny, "denied by operator alice on desktop", false},
		{"a click on the body is no answer", func(t *testing.T, s *notifyService, id uint32) {
			s.emit(t, "ActionInvoked", id, "default")
			s.emit(t, "ActionInvoked", id+100, "approve") // another notification's
			s.emit(t, "ActionInvoked", id, "approve")
		}, approval.Allow, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := startBus(t)
			s := newNotifyService(t, addr, "actions", "body")
			d := &Desktop{BusAddress: addr, Operator: "alice", Timeout: time.Minute}
			ch := desktopAsync(t.Context(), d, desktopPrompt())
			n := s.wait(t)
			if want := []string{"approve", "Approve", "deny", "Deny"}; strings.Join(n.actions, "|") != strings.Join(want, "|") {
				t.Errorf("actions %q, want %q", n.actions, want)
			}
			if n.expire != 0 {
				t.Errorf("expire_timeout %d, want 0 (Desktop times out itself)", n.expire)
			}
			tt.answer(t, s, n.id)
			got := decided(t, ch)
			if got.Verdict != tt.verdict || got.Message != tt.message || got.By != "desktop" {
				t.Errorf("decision %+v, want %v %q by desktop", got, tt.verdict, tt.message)
			}
			if tt.closes {
				s.waitClosed(t, n.id)
			}
		})
	}
}

// A signal that names our notification but comes from another client of
// the bus than the notification service is not an answer.
func TestDesktopIgnoresForgedSignals(t *testing.T) {
	addr := startBus(t)
	s := newNotifyService(t, addr, "actions", "body")
	forger, err := dbus.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer forger.Close()
	d := &Desktop{BusAddress: addr, Operator: "alice", Timeout: time.Minute}
	ch := desktopAsync(t.Context(), d, desktopPrompt())
	n := s.wait(t)
	if err := forger.Emit(notifyPath, notifyIface+".ActionInvoked", n.id, "approve"); err != nil {
		t.Fatal(err)
	}
	s.emit(t, "ActionInvoked", n.id, "deny")
	if got := decided(t, ch); got.Verdict != approval.Deny {
		t.Errorf("verdict %v after a forged approve and a real deny, want deny", got.Verdict)
	}
}

func TestDesktopExpires(t *testing.T) {
	addr := startBus(t)
	s := newNotifyService(t, addr, "actions", "body")
	d := &Desktop{BusAddress: addr, Operator: "alice", Timeout: 300 * time.Millisecond}
	ch := desktopAsync(t.Context(), d, desktopPrompt())
	n := s.wait(t)
	got := decided(t, ch)
	if got.Verdict != approval.Expired || got.Message != "no approval decision within 300ms" {
		t.Errorf("decision %+v, want timeout %q", got, "no approval decision within 300ms")
	}
	s.waitClosed(t, n.id)
}

func TestDesktopWithdrawn(t *testing.T) {
	addr := startBus(t)
	s := newNotifyService(t, addr, "actions", "body")
	d := &Desktop{BusAddress: addr, Operator: "alice", Timeout: time.Minute}
	ctx, cancel := context.WithCancel(t.Context())
	ch := desktopAsync(ctx, d, desktopPrompt())
	n := s.wait(t)
	cancel()
	got := decided(t, ch)
	if got.Verdict != approval.Withdrawn || got.Message != "request withdrawn" {
		t.Errorf("decision %+v, want withdrawn", got)
	}
	s.waitClosed(t, n.id)
}

// The body is the whole rendered request: the command is there, nothing
// in it can reach a terminal or the markup parser unescaped.
func TestDesktopBody(t *testing.T) {
	for _, tt := range []struct {
		name   string
		caps   []string
		tag    string // how "<b>&" must appear
		absent string // what must not appear
	}{
		{"plain text", []string{"actions", "body"}, "'<b>&'", "&amp;"},
		{"markup", []string{"actions", "body", "body-markup"}, "'&lt;b&gt;&amp;'", "<"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			addr := startBus(t)
			s := newNotifyService(t, addr, tt.caps...)
			d := &Desktop{BusAddress: addr, Operator: "alice", Timeout: time.Minute}
			p := desktopPrompt()
			ch := desktopAsync(t.Context(), d, p)
			n := s.wait(t)
			s.emit(t, "ActionInvoked", n.id, "deny")
			decided(t, ch)

			if n.summary != "rootgate: run this command as ROOT?" {
				t.Errorf("summary %q", n.summary)
			}
			for _, want := range []string{"echo $'\\x1b[31m' " + tt.tag, "/usr/bin/echo", "alice (uid 1000", "PRIVILEGED"} {
				if !strings.Contains(n.body, want) {
					t.Errorf("body lacks %q:\n%s", want, n.body)
				}
			}
			if strings.Contains(n.body, "\x1b") {
				t.Errorf("body holds a raw ESC:\n%q", n.body)
			}
			if strings.Contains(n.body, tt.absent) {
				t.Errorf("body holds %q:\n%s", tt.absent, n.body)
			}
			if tt.absent == "&amp;" && n.body != approval.Render(p) {
				t.Errorf("plain body differs from Render:\n%s", n.body)
			}
		})
	}
}

func TestDesktopUnavailable(t *testing.T) {
	for _, tt := range []struct {
		name    string
		addr    func(t *testing.T) string
		message string
	}{
		{"no bus", func(t *testing.T) string {
			return "unix:path=" + t.TempDir() + "/nobus"
		}, "failed to connect to the session bus"},
		{"no notification service", startBus, "no notification service on the session bus"},
		{"no actions", func(t *testing.T) string {
			addr := startBus(t)
			newNotifyService(t, addr, "body", "body-markup")
			return addr
		}, `the notification service cannot show "actions" (it offers body, body-markup)`},
		{"no body", func(t *testing.T) string {
			addr := startBus(t)
			newNotifyService(t, addr, "actions")
			return addr
		}, `the notification service cannot show "body" (it offers actions)`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			d := &Desktop{BusAddress: tt.addr(t), Operator: "alice", Timeout: time.Minute}
			got := d.Approve(t.Context(), desktopPrompt())
			if got.Verdict != approval.Unavailable || !strings.HasPrefix(got.Message, "desktop prompt on desktop failed: ") || !strings.Contains(got.Message, tt.message) {
				t.Errorf("decision %+v, want unavailable with %q", got, tt.message)
			}
		})
	}
}

// A request whose stdin a dialog would show only in part is never put to
// the desktop: nothing is notified, and the answer sends it to a terminal.
func TestDesktopRefusesHiddenStdin(t *testing.T) {
	addr := startBus(t)
	s := newNotifyService(t, addr, "actions", "body")
	d := &Desktop{BusAddress: addr, Operator: "alice", Timeout: time.Minute}
	p := desktopPrompt()
	p.Stdin = []byte(strings.Repeat("echo harmless\n", 20) + "rm -rf /srv/data\n")
	got := d.Approve(t.Context(), p)
	if got.Verdict != approval.Unavailable || !strings.Contains(got.Message, "cannot show all of the request's stdin") || !strings.Contains(got.Message, "approve it from a terminal") {
		t.Fatalf("decision %+v, want unavailable and sent to a terminal", got)
	}
	select {
	case n := <-s.notified:
		t.Fatalf("notified anyway: %q", n.body)
	default:
	}

	// A stdin the dialog shows whole is still asked about.
	p.Stdin = []byte("echo harmless\n")
	ch := desktopAsync(t.Context(), d, p)
	n := s.wait(t)
	s.emit(t, "ActionInvoked", n.id, "deny")
	if dec := decided(t, ch); dec.Verdict != approval.Deny {
		t.Fatalf("short stdin: %+v, want the operator's deny", dec)
	}
}

// TestDesktopSummaryNamesGroup: the question of a request that adds a
// group names it, as the terminal's does: a run as the requester with
// group shadow reads /etc/shadow.
func TestDesktopSummaryNamesGroup(t *testing.T) {
	addr := startBus(t)
	s := newNotifyService(t, addr, "actions", "body")
	d := &Desktop{BusAddress: addr, Operator: "alice", Timeout: time.Minute}
	p := desktopPrompt()
	p.RunAs, p.Named = "agent", &approval.NamedRun{UID: 1000, GID: 42, Group: "shadow"}
	ch := desktopAsync(t.Context(), d, p)
	n := s.wait(t)
	s.emit(t, "ActionInvoked", n.id, "deny")
	decided(t, ch)
	if want := "rootgate: run this command as agent (uid 1000) WITH GROUP shadow (gid 42)?"; n.summary != want {
		t.Errorf("summary %q, want %q", n.summary, want)
	}
}
