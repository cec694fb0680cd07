package desktop

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/testutil"
	"golang.org/x/sys/unix"
)

// startXvfb starts a private X server (Debian package xvfb), points
// $DISPLAY at it for the rest of the test and returns the zenity to use
// (Debian package zenity). Nothing is skipped: a missing tool fails.
func startXvfb(t *testing.T) (zenity string) {
	t.Helper()
	zenity = testutil.NeedTool(t, "zenity", "zenity")
	testutil.NeedTool(t, "xdotool", "xdotool")
	t.Setenv("DISPLAY", testutil.StartXvfb(t, "-screen", "0", "1280x1024x24"))
	t.Setenv("WAYLAND_DISPLAY", "")
	t.Setenv("NO_AT_BRIDGE", "1") // no accessibility bus to look for
	return zenity
}

// xdotool runs xdotool on the test display, failing the test after 20s.
func xdotool(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "xdotool", args...).Output()
	if err != nil {
		t.Fatalf("xdotool %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out))
}

const rootTitle = "rootgate: run this command as ROOT?"

// approveKeys tick the box and press Approve in zenity 3 and in zenity 4
// (TestDesktopZenity says how).
var approveKeys = []string{"Tab", "space", "Tab", "Tab", "Return"}

// noDialog waits until no dialog of an earlier case is on the display:
// the X server drops a dead client's windows on its own time, and a search
// for the next dialog must not find the last one going away.
func noDialog(t *testing.T) {
	t.Helper()
	var out []byte
	if !testutil.PollEvery(20*time.Millisecond, 10*time.Second, func() bool {
		var err error
		out, err = exec.Command("xdotool", "search", "--name", rootTitle).Output()
		return err != nil && len(out) == 0
	}) {
		t.Fatalf("the dialog is still there: %q", out)
	}
}

// dialogWindow waits until the dialog is on screen and returns its window.
// A dialog with a long text exists a moment before it is mapped, and an
// unmapped window cannot take the focus.
func dialogWindow(t *testing.T) string {
	t.Helper()
	return xdotool(t, "search", "--sync", "--onlyvisible", "--limit", "1", "--name", rootTitle)
}

// press waits for the dialog, focuses it and types keys.
func press(t *testing.T, keys ...string) {
	t.Helper()
	w := dialogWindow(t)
	xdotool(t, "windowfocus", "--sync", w)
	xdotool(t, append([]string{"key"}, keys...)...)
}

// closeWindow closes window win as a window manager's close button does:
// it sends the window's client a WM_DELETE_WINDOW message, speaking the
// X11 protocol on the test display's socket (Xvfb asks for no
// authorisation).
func closeWindow(t *testing.T, win string) {
	t.Helper()
	id, err := strconv.ParseUint(win, 10, 32)
	if err != nil {
		t.Fatalf("window id %q: %v", win, err)
	}
	display, _, _ := strings.Cut(strings.TrimPrefix(os.Getenv("DISPLAY"), ":"), ".")
	c, err := net.Dial("unix", "/tmp/.X11-unix/X"+display)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	send := func(b []byte) {
		if _, err := c.Write(b); err != nil {
			t.Fatalf("X11: %v", err)
		}
	}
	receive := func(n int) []byte {
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			t.Fatalf("X11: %v", err)
		}
		return b
	}
	// Connection setup: little-endian, protocol 11.0, no authorisation.
	send([]byte{'l', 0, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	head := receive(8)
	if head[0] != 1 {
		t.Fatalf("X11 connection setup refused: % x", head)
	}
	receive(4 * int(le.Uint16(head[6:])))
	atom := func(name string) uint32 {
		req := make([]byte, 8+(len(name)+3)/4*4)
		req[0] = 16 // InternAtom
		le.PutUint16(req[2:], uint16(len(req)/4))
		le.PutUint16(req[4:], uint16(len(name)))
		copy(req[8:], name)
		send(req)
		reply := receive(32)
		if reply[0] != 1 {
			t.Fatalf("X11 InternAtom %s: % x", name, reply)
		}
		return le.Uint32(reply[8:])
	}
	protocols, deleteWindow := atom("WM_PROTOCOLS"), atom("WM_DELETE_WINDOW")
	req := make([]byte, 44)
	req[0] = 25 // SendEvent, to the client that made the window (event mask 0)
	le.PutUint16(req[2:], uint16(len(req)/4))
	le.PutUint32(req[4:], uint32(id))
	ev := req[12:]
	ev[0], ev[1] = 33, 32 // a ClientMessage of 32-bit values
	le.PutUint32(ev[4:], uint32(id))
	le.PutUint32(ev[8:], protocols)
	le.PutUint32(ev[12:], deleteWindow)
	send(req)
	atom("WM_PROTOCOLS") // a round trip: the message has gone out
}

// The fallback when the session bus has no notification service: a zenity
// dialog on a real (virtual) X display, answered with real key presses.
func TestDesktopZenity(t *testing.T) {
	zenity := startXvfb(t)
	noBus := "unix:path=" + t.TempDir() + "/nobus"
	for _, tt := range []struct {
		name    string
		keys    []string // nil: no answer
		timeout time.Duration
		verdict approval.Verdict
		message string
	}{
		// Tab goes to the box and space ticks it. Return then presses
		// Approve in zenity 3 (GTK 3, Debian 12) wherever the focus is,
		// not in zenity 4 (GTK 4, Ubuntu 24.04), where the focus goes
		// from the box to Deny, then to Approve: two Tabs get there in
		// both.
		{"approve", approveKeys, time.Minute, approval.Allow, ""},
		// Approve is greyed out until the box is ticked: Enter in any
		// form does nothing, and Escape then denies.
		{"enter does not approve", []string{"Return", "KP_Enter", "ctrl+Return", "Escape"}, time.Minute, approval.Deny, "denied by operator alice on desktop"},
		{"escape denies", []string{"Escape"}, time.Minute, approval.Deny, "denied by operator alice on desktop"},
		{"ticked, then escape denies", []string{"Tab", "space", "Escape"}, time.Minute, approval.Deny, "denied by operator alice on desktop"},
		{"no answer", nil, 2 * time.Second, approval.Expired, "no approval decision within 2s"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			noDialog(t)
			d := &Desktop{BusAddress: noBus, Operator: "alice", Timeout: tt.timeout, Zenity: zenity}
			ch := desktopAsync(t.Context(), d, desktopPrompt())
			if tt.keys != nil {
				press(t, tt.keys...)
			}
			got := decided(t, ch)
			if got.Verdict != tt.verdict || got.Message != tt.message {
				t.Errorf("decision %+v, want %v %q", got, tt.verdict, tt.message)
			}
		})
	}

	t.Run("plain text", func(t *testing.T) {
		noDialog(t)
		d := &Desktop{BusAddress: noBus, Operator: "alice", Timeout: time.Minute, Zenity: zenity}
		p := desktopPrompt()
		ch := desktopAsync(t.Context(), d, p)
		// "<b>&" stays as it is: nothing is read as markup.
		if got, want := dialogText(t, dialogWindow(t)), approval.Render(p); got != want {
			t.Errorf("the dialog holds\n%s\nwant\n%s", got, want)
		}
		press(t, "Escape")
		if got := decided(t, ch); got.Verdict != approval.Deny {
			t.Errorf("decision %+v, want deny", got)
		}
	})

	t.Run("closing the window denies", func(t *testing.T) {
		noDialog(t)
		d := &Desktop{BusAddress: noBus, Operator: "alice", Timeout: time.Minute, Zenity: zenity}
		ch := desktopAsync(t.Context(), d, desktopPrompt())
		closeWindow(t, dialogWindow(t))
		if got := decided(t, ch); got.Verdict != approval.Deny || got.Message != "denied by operator alice on desktop" {
			t.Errorf("decision %+v, want deny", got)
		}
	})

	t.Run("withdrawn", func(t *testing.T) {
		noDialog(t)
		d := &Desktop{BusAddress: noBus, Operator: "alice", Timeout: time.Minute, Zenity: zenity}
		ctx, cancel := context.WithCancel(t.Context())
		ch := desktopAsync(ctx, d, desktopPrompt())
		dialogWindow(t)
		cancel()
		if got := decided(t, ch); got.Verdict != approval.Withdrawn {
			t.Errorf("decision %+v, want withdrawn", got)
		}
		// The dialog goes: zenity was killed.
		noDialog(t)
	})

	t.Run("no display", func(t *testing.T) {
		t.Setenv("DISPLAY", ":9999")
		d := &Desktop{BusAddress: noBus, Operator: "alice", Timeout: time.Minute, Zenity: zenity}
		got := d.Approve(t.Context(), desktopPrompt())
		if got.Verdict != approval.Unavailable || !strings.Contains(got.Message, "failed to connect to the session bus") ||
			!strings.Contains(got.Message, "and no zenity dialog either: zenity cannot open the display") {
			t.Errorf("decision %+v, want unavailable", got)
		}
	})
}

// secretPrompt is desktopPrompt with a secret in its environment and a
// bash script of script bytes as its command.
func secretPrompt(secret string, script int) *approval.Prompt {
	p := desktopPrompt()
	p.Env = map[string]string{"API_TOKEN": secret}
	var b strings.Builder
	for i := 0; b.Len() < script; i++ {
		fmt.Fprintf(&b, "echo step %d >>/var/log/steps\n", i)
	}
	p.Stages = []approval.Stage{{Argv: []string{"bash", "-c", b.String()}, Path: "/usr/bin/bash"}}
	return p
}

// A request whose text is longer than the kernel lets one argument be
// (MAX_ARG_STRLEN, 128 KiB) still gets a dialog, and Approve is the only
// way to approve it.
func TestDesktopZenityLongRequest(t *testing.T) {
	zenity := startXvfb(t)
	noBus := "unix:path=" + t.TempDir() + "/nobus"
	p := secretPrompt("tok-7f3a9c", 200<<10)
	if n := len(approval.Render(p)); n <= 128<<10 {
		t.Fatalf("the rendered request is %d bytes, want more than 128 KiB", n)
	}
	for _, tt := range []struct {
		name    string
		copy    bool // first copy the dialog's text out and check it
		keys    []string
		verdict approval.Verdict
	}{
		{"enter does not approve", false, []string{"Return", "KP_Enter", "ctrl+Return", "Escape"}, approval.Deny},
		{"approve", false, approveKeys, approval.Allow},
		{"shows all of it", true, []string{"Escape"}, approval.Deny},
	} {
		t.Run(tt.name, func(t *testing.T) {
			noDialog(t)
			d := &Desktop{BusAddress: noBus, Operator: "alice", Timeout: time.Minute, Zenity: zenity}
			ch := desktopAsync(t.Context(), d, p)
			w := waitDialog(t, ch)
			// The dialog is up only once zenity has read all of the text:
			// nothing is left unread in its stdin.
			if n := unreadStdin(t, xdotool(t, "getwindowpid", w)); n != 0 {
				t.Errorf("the dialog is up with %d bytes of its text not yet read", n)
			}
			if tt.copy {
				// The whole request, as plain text.
				if got, want := dialogText(t, w), approval.Render(p); got != want {
					t.Errorf("the dialog holds %d bytes that differ from the %d of the rendered request", len(got), len(want))
				}
			}
			press(t, tt.keys...)
			if got := decided(t, ch); got.Verdict != tt.verdict {
				t.Errorf("decision %+v, want %v", got, tt.verdict)
			}
		})
	}
}

// waitDialog waits until the dialog is on screen and returns its window,
// failing the test if Approve decides first (no dialog could be shown).
func waitDialog(t *testing.T, ch <-chan approval.Decision) string {
	t.Helper()
	var w string
	if !testutil.PollEvery(20*time.Millisecond, 20*time.Second, func() bool {
		select {
		case d := <-ch:
			t.Fatalf("decided with no dialog shown: %+v", d)
		default:
		}
		out, err := exec.Command("xdotool", "search", "--onlyvisible", "--limit", "1", "--name", rootTitle).Output()
		w = strings.TrimSpace(string(out))
		return err == nil && w != ""
	}) {
		t.Fatal("no dialog was shown")
	}
	return w
}

// dialogText copies the dialog's text out through the clipboard (Debian
// package xsel): exactly what its text view holds.
func dialogText(t *testing.T, w string) string {
	t.Helper()
	xdotool(t, "windowfocus", "--sync", w)
	xdotool(t, "key", "ctrl+a", "ctrl+c")
	// The clipboard is empty until the dialog has taken the keys, and
	// then holds all of the text.
	var out []byte
	if !testutil.PollEvery(20*time.Millisecond, 10*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		var err error
		if out, err = exec.CommandContext(ctx, "xsel", "--clipboard", "--output").Output(); err != nil {
			t.Fatalf("xsel (apt-get install xsel): %v", err)
		}
		return len(out) > 0
	}) {
		t.Fatal("nothing was copied from the dialog")
	}
	return string(out)
}

// unreadStdin is how many bytes wait unread in the pipe that is process
// pid's stdin.
func unreadStdin(t *testing.T, pid string) int {
	t.Helper()
	f, err := os.OpenFile("/proc/"+pid+"/fd/0", os.O_RDONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCINQ) // FIONREAD
	if err != nil {
		t.Fatalf("FIONREAD on %s's stdin: %v", pid, err)
	}
	return n
}

// The request's text (a secret in its environment, its command) is not on
// zenity's command line, which every local user can read in
// /proc/PID/cmdline.
func TestDesktopZenityTextOffCommandLine(t *testing.T) {
	zenity := startXvfb(t)
	const secret = "tok-5e1b0d"
	p := secretPrompt(secret, 100)
	if !strings.Contains(approval.Render(p), "API_TOKEN="+secret) {
		t.Fatalf("the rendered request does not show the secret:\n%s", approval.Render(p))
	}
	d := &Desktop{BusAddress: "unix:path=" + t.TempDir() + "/nobus", Operator: "alice", Timeout: time.Minute, Zenity: zenity}
	ch := desktopAsync(t.Context(), d, p)
	w := dialogWindow(t)
	pid := xdotool(t, "getwindowpid", w)
	raw, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	argv := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	if argv[0] != zenity {
		t.Fatalf("process %s is %q, not the dialog's zenity", pid, argv)
	}
	for _, leak := range []string{secret, "echo step 1", "/var/log/steps"} {
		if strings.Contains(string(raw), leak) {
			t.Errorf("zenity's command line holds %q: %q", leak, argv)
		}
	}
	press(t, "Escape")
	if got := decided(t, ch); got.Verdict != approval.Deny {
		t.Errorf("decision %+v, want deny", got)
	}
}

func TestCheckDialogText(t *testing.T) {
	for _, tt := range []struct {
		text string
		ok   bool
	}{
		{"rootgate approval request\n  [1] echo 'é ┊'\n", true},
		{"echo a\x00rm -rf /\n", false},
		{"echo \xff\xfe\n", false},
	} {
		if err := checkDialogText(tt.text); (err == nil) != tt.ok {
			t.Errorf("checkDialogText(%q) = %v, want ok %v", tt.text, err, tt.ok)
		}
	}
}
