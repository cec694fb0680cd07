package daemon_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
)

// ttyDaemon is rootgated --tty on a real pseudo-terminal, read and typed
// on as the harness's approvers are.
type ttyDaemon struct {
	*daemonProc
	term *rgtest.Approver
}

func startTTYDaemon(t *testing.T, promptTimeout string) *ttyDaemon {
	t.Helper()
	dir := shortDir(t)
	policy := filepath.Join(dir, "policy")
	if err := os.WriteFile(policy, []byte("ask any\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, dir)
	d.Cmd = exec.Command(rootgated, "--tty", "--socket", d.Sock, "--approver-socket", "", "--runtime-dir", filepath.Join(dir, "run"),
		"--policy", policy, "--prompt-timeout", promptTimeout, "--audit", auditPath(dir))
	d.Cmd.Env = append(os.Environ(), "TERM=xterm-256color", "SUDO_USER=")
	ptmx, err := pty.StartWithAttrs(d.Cmd, &pty.Winsize{Rows: 60, Cols: 160}, &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL})
	if err != nil {
		t.Fatal(err)
	}
	// The daemon's log goes to the pty too (stderr); keep a copy apart.
	td := &ttyDaemon{daemonProc: d, term: &rgtest.Approver{T: t, Cmd: d.Cmd, Pty: ptmx,
		Screen: testutil.NewScreen(ptmx, func(b []byte) { d.Stderr.Write(b) })}}
	d.Watch()
	t.Cleanup(func() {
		d.Stop()
		ptmx.Close()
	})
	d.WaitReady()
	return td
}

// waitScreen waits until the screen shows want, counting only output after
// offset (a rune index into the ANSI-free text).
func (td *ttyDaemon) waitScreen(t *testing.T, from int, want string) int {
	t.Helper()
	defer td.term.Use(t)()
	td.term.Pos = from
	td.term.See(want)
	return td.term.Pos
}

func (td *ttyDaemon) key(t *testing.T, k string) {
	t.Helper()
	defer td.term.Use(t)()
	td.term.Key(k)
}

// ask sends a request in the background and returns a channel with its
// answer.
func (td *ttyDaemon) ask(over map[string]any) chan response {
	ch := make(chan response, 1)
	line := request(over)
	go func() { ch <- td.sendRaw(line) }()
	return ch
}

func TestTerminalApproval(t *testing.T) {
	t.Parallel()
	td := startTTYDaemon(t, "60s")
	pos := 0

	// The daemon has the operator's terminal; an approved run must not
	// reach it: its stages lead sessions of their own, with no terminal.
	t.Run("an approved run cannot open the daemon's terminal", func(t *testing.T) {
		ch := td.ask(map[string]any{"id": "tty-reach", "pipeline": [][]string{{"sh", "-c", `printf 'FORGED%s\n' -BY-STAGE >/dev/tty && echo wrote || echo refused`}}})
		pos = td.waitScreen(t, pos, "tty-reach")
		pos = td.waitScreen(t, pos, "n or Esc deny")
		td.key(t, "y")
		r := wantOK(t, <-ch)
		if string(r.Stdout) != "refused\n" {
			t.Fatalf("a stage of a daemon on a terminal opened /dev/tty: %s", r.raw)
		}
		if strings.Contains(td.term.Screen.Text(), "FORGED-BY-STAGE") {
			t.Fatal("a stage's write reached the operator's terminal")
		}
	})

	t.Run("y approves and the prompt shows the request", func(t *testing.T) {
		ch := td.ask(map[string]any{"id": "tty-y", "pipeline": [][]string{{"echo", "approved-run"}, {"tr", "a-z", "A-Z"}}, "reason": "say hello", "session": "sess-1"})
		pos = td.waitScreen(t, pos, "tty-y")
		pos = td.waitScreen(t, pos, "n or Esc deny")
		for _, want := range []string{"echo approved-run", "/usr/bin/echo", "tr a-z A-Z", "say hello", "sess-1", "root"} {
			if !strings.Contains(td.term.Screen.Text()[pos-200:], want) && !strings.Contains(td.term.Screen.Text(), want) {
				t.Errorf("prompt does not show %q", want)
			}
		}
		td.key(t, "y")
		r := wantOK(t, <-ch)
		if string(r.Stdout) != "APPROVED-RUN\n" {
			t.Fatalf("%s", r.raw)
		}
	})

	t.Run("n denies", func(t *testing.T) {
		ch := td.ask(map[string]any{"id": "tty-n"})
		pos = td.waitScreen(t, pos, "tty-n")
		pos = td.waitScreen(t, pos, "n or Esc deny")
		td.key(t, "n")
		r := <-ch
		if r.Status != wire.StatusDenied || (!regexp.MustCompile(`^denied by operator root on (pts/\d+|tty)$`).MatchString(r.Message) || r.Code != wire.CodeDeniedByOperator) {
			t.Fatalf("%s", r.raw)
		}
	})

	t.Run("enter takes the default, deny", func(t *testing.T) {
		ch := td.ask(map[string]any{"id": "tty-enter"})
		pos = td.waitScreen(t, pos, "tty-enter")
		pos = td.waitScreen(t, pos, "n or Esc deny")
		td.key(t, "\r")
		if r := <-ch; r.Status != wire.StatusDenied {
			t.Fatalf("%s", r.raw)
		}
	})

	t.Run("newline and tab in an argument are shown escaped", func(t *testing.T) {
		ch := td.ask(map[string]any{"id": "tty-esc", "pipeline": [][]string{{"sh", "-c", "echo one\n\techo two"}}})
		pos = td.waitScreen(t, pos, "tty-esc")
		pos = td.waitScreen(t, pos, `$'echo one\n\techo two'`)
		pos = td.waitScreen(t, pos, "n or Esc deny")
		td.key(t, "n")
		if r := <-ch; r.Status != wire.StatusDenied {
			t.Fatalf("%s", r.raw)
		}
	})

	t.Run("client leaving withdraws the prompt", func(t *testing.T) {
		c, err := net.Dial("unix", td.Sock)
		if err != nil {
			t.Fatal(err)
		}
		marker := "/tmp/rootgate-must-not-exist-" + fmt.Sprint(time.Now().UnixNano())
		_, _ = c.Write([]byte(request(map[string]any{"id": "tty-gone", "pipeline": [][]string{{"touch", marker}}})))
		pos = td.waitScreen(t, pos, "tty-gone")
		pos = td.waitScreen(t, pos, "n or Esc deny")
		c.Close()
		pos = td.waitScreen(t, pos, "withdrawn")
		// A late keypress approves nothing.
		td.key(t, "y")
		td.alive()
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("a withdrawn request ran")
		}
	})
}

func TestTerminalTimeoutAndTypeAhead(t *testing.T) {
	t.Parallel()
	td := startTTYDaemon(t, "3s")
	// "y" typed before the prompt appears must not approve it.
	td.key(t, "y")
	ch := td.ask(map[string]any{"id": "tty-ahead"})
	r := <-ch
	if r.Status != wire.StatusTimeout || (r.Message != "no approval decision within 3s" || r.Code != wire.CodePromptTimeout) {
		t.Fatalf("type-ahead: %s", r.raw)
	}
	pos := td.waitScreen(t, 0, "tty-ahead")

	// Stopping the daemon answers a request waiting at the prompt.
	ch = td.ask(map[string]any{"id": "tty-stop"})
	pos = td.waitScreen(t, pos, "tty-stop")
	td.waitScreen(t, pos, "n or Esc deny")
	td.Stop()
	wantError(t, <-ch, "daemon stopping")
}
