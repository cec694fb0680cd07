package daemon_test

import (
	"errors"
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

// markEnv makes the test binary a rootgate that only leaves a file
// behind (markRan), to show it was run.
const markEnv = "ROOTGATE_TEST_MARK_RAN"

// markRan creates path and exits.
func markRan(path string) int {
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		return 1
	}
	return 0
}

// TestTTYRunsNoClientOthersCanChange: rootgated --tty runs rootgate's
// approver on its terminal as root, so a rootgate next to it that someone
// other than root and rootgated's owner could change must never be run:
// the attack is nobody's rootgate, or one others may write, beside a root
// rootgated. The daemon refuses to start instead, naming the file (exit
// 78). Next to a rootgated of nobody's own, as in a checkout built by its
// user and started with sudo, nobody's rootgate runs, as that user could
// change rootgated itself. The rootgate here is the test binary, which
// leaves a file behind when run (markEnv, passed on by the daemon).
func TestTTYRunsNoClientOthersCanChange(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const nobody = 65534
	for _, tc := range []struct {
		name            string
		daemonUID       int // rootgated's owner
		clientUID, mode int // rootgate's owner and mode
		refused         bool
	}{
		{"another user's", 0, nobody, 0o755, true},
		{"writable by others", 0, 0, 0o757, true},
		{"writable by its group", 0, 0, 0o775, true},
		{"rootgated's owner's", nobody, nobody, 0o755, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := shortDir(t)
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			bin := filepath.Join(dir, "bin")
			if err := os.Mkdir(bin, 0o755); err != nil {
				t.Fatal(err)
			}
			daemonExe, client := filepath.Join(bin, "rootgated"), filepath.Join(bin, "rootgate")
			copyFile(t, rootgated, daemonExe, tc.daemonUID, 0o755)
			copyFile(t, self, client, tc.clientUID, os.FileMode(tc.mode))
			marker := filepath.Join(dir, "ran-as-root")
			policy := filepath.Join(dir, "policy")
			if err := os.WriteFile(policy, []byte("ask any\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(daemonExe, "--tty", "--socket", filepath.Join(dir, "s"), "--approver-socket", "",
				"--runtime-dir", filepath.Join(dir, "run"), "--policy", policy, "--audit", auditPath(dir))
			cmd.Env = append(os.Environ(), "TERM=xterm-256color", "SUDO_USER=", markEnv+"="+marker)
			ptmx, err := pty.StartWithAttrs(cmd, &pty.Winsize{Rows: 40, Cols: 160}, &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL})
			if err != nil {
				t.Fatal(err)
			}
			defer ptmx.Close()
			screen := testutil.NewScreen(ptmx, nil)
			// Either way the daemon stops by itself: refused, or its
			// approver gone at once.
			err = cmd.Wait()
			_, serr := os.Stat(marker)
			if ran := serr == nil; ran == tc.refused {
				t.Fatalf("the rootgate next to rootgated ran as root: %v, want %v\n%s", ran, !tc.refused, screen.Text())
			}
			if !tc.refused {
				return
			}
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 78 {
				t.Errorf("rootgated exited with %v, want exit status 78\n%s", err, screen.Text())
			}
			want := "will not run " + client + " as root"
			testutil.WaitFor(t, "the refusal on the terminal", 10*time.Second, func() bool { return strings.Contains(screen.Text(), want) })
		})
	}
}

// copyFile copies src to dst, owned by uid (and the group of that
// number) with mode.
func copyFile(t *testing.T, src, dst string, uid int, mode os.FileMode) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dst, uid, uid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dst, mode); err != nil {
		t.Fatal(err)
	}
}
