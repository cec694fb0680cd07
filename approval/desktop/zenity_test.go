package desktop

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/approval"
)

// startXvfb starts a private X server (Debian package xvfb), points
// $DISPLAY at it for the rest of the test and returns the zenity to use
// (Debian package zenity). Nothing is skipped: a missing tool fails.
func startXvfb(t *testing.T) (zenity string) {
	t.Helper()
	zenity, err := exec.LookPath("zenity")
	if err != nil {
		t.Fatalf("zenity (apt-get install zenity): %v", err)
	}
	if _, err := exec.LookPath("xdotool"); err != nil {
		t.Fatalf("xdotool (apt-get install xdotool): %v", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// -displayfd: Xvfb picks a free display and writes its number to fd 3.
	cmd := exec.Command("Xvfb", "-displayfd", "3", "-screen", "0", "1280x1024x24", "-nolisten", "tcp")
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start Xvfb (apt-get install xvfb): %v", err)
	}
	w.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	num, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("read Xvfb's display number: %v", err)
	}
	t.Setenv("DISPLAY", ":"+strings.TrimSpace(num))
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

// noDialog waits until no dialog of an earlier case is on the display:
// the X server drops a dead client's windows on its own time, and a search
// for the next dialog must not find the last one going away.
func noDialog(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command("xdotool", "search", "--name", rootTitle).Output()
		if err != nil && len(out) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the dialog is still there: %q", out)
		}
	}
}

// press waits for the dialog, focuses it and types keys.
func press(t *testing.T, keys ...string) {
	t.Helper()
	w := xdotool(t, "search", "--sync", "--limit", "1", "--name", rootTitle)
	xdotool(t, "windowfocus", "--sync", w)
	xdotool(t, append([]string{"key"}, keys...)...)
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
		{"approve", []string{"Tab", "Return"}, time.Minute, approval.Allow, ""},
		{"enter denies", []string{"Return"}, time.Minute, approval.Deny, "denied by operator alice on desktop"},
		{"escape denies", []string{"Escape"}, time.Minute, approval.Deny, "denied by operator alice on desktop"},
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

	t.Run("withdrawn", func(t *testing.T) {
		noDialog(t)
		d := &Desktop{BusAddress: noBus, Operator: "alice", Timeout: time.Minute, Zenity: zenity}
		ctx, cancel := context.WithCancel(t.Context())
		ch := desktopAsync(ctx, d, desktopPrompt())
		xdotool(t, "search", "--sync", "--limit", "1", "--name", rootTitle)
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
