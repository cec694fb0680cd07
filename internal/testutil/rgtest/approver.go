package rgtest

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/rootgate/rootgate/internal/testutil"
)

// Approver is a program on a real pseudo-terminal: `rootgate approve`
// ([StartApprover]) or any command ([StartOnPty]).
type Approver struct {
	T      *testing.T
	Cmd    *exec.Cmd
	Pty    *os.File // the pty's master
	Screen *testutil.Screen
	Pos    int // how far the screen has been read by See and SeeRe
	done   chan struct{}
}

// StartApprover runs `rootgate approve --socket sock` with more args as
// uid (0 or an account whose gid equals its uid, such as nobody) on a
// 160x60 pty.
func StartApprover(t *testing.T, sock string, uid uint32, args ...string) *Approver {
	t.Helper()
	cmd := exec.Command(Rootgate(t), append([]string{"approve", "--socket", sock}, args...)...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color", "SUDO_USER=")
	attrs := &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}
	if uid != 0 {
		attrs.Credential = &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
	}
	return StartOnPty(t, cmd, attrs)
}

// StartOnPty runs cmd with attrs on a fresh 160x60 pseudo-terminal whose
// screen answers the terminal's queries; it is killed when t ends.
func StartOnPty(t *testing.T, cmd *exec.Cmd, attrs *syscall.SysProcAttr) *Approver {
	t.Helper()
	a := &Approver{T: t, Cmd: cmd, done: make(chan struct{})}
	ptmx, err := pty.StartWithAttrs(a.Cmd, &pty.Winsize{Rows: 60, Cols: 160}, attrs)
	if err != nil {
		t.Fatal(err)
	}
	a.Pty = ptmx
	a.Screen = testutil.NewScreen(ptmx, nil)
	go func() { a.Cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		a.Cmd.Process.Kill()
		<-a.done
		ptmx.Close()
	})
	return a
}

// Done is closed when the program has exited.
func (a *Approver) Done() <-chan struct{} { return a.done }

// See waits until the screen shows want after what was already seen.
func (a *Approver) See(want string) {
	a.T.Helper()
	defer func() {
		if a.T.Failed() {
			a.T.Logf("the approver's screen:\n%s", a.Screen.Text())
		}
	}()
	testutil.WaitFor(a.T, "the approver to show "+want, 30*time.Second, func() bool {
		txt := a.Screen.Text()
		if i := strings.Index(txt[min(a.Pos, len(txt)):], want); i >= 0 {
			a.Pos += i + len(want)
			return true
		}
		return false
	})
}

// SeeRe waits until the screen matches re after what was already seen.
func (a *Approver) SeeRe(re *regexp.Regexp) {
	a.T.Helper()
	testutil.WaitFor(a.T, "the approver to show "+re.String(), 30*time.Second, func() bool {
		txt := a.Screen.Text()
		if loc := re.FindStringIndex(txt[min(a.Pos, len(txt)):]); loc != nil {
			a.Pos += loc[1]
			return true
		}
		return false
	})
}

// Use makes t, a subtest, the one failures go to until the returned
// function restores the parent.
func (a *Approver) Use(t *testing.T) (restore func()) {
	parent := a.T
	a.T = t
	return func() { a.T = parent }
}

// Key types k on the terminal.
func (a *Approver) Key(k string) {
	a.T.Helper()
	if _, err := a.Pty.Write([]byte(k)); err != nil {
		a.T.Fatal(err)
	}
}

// Kill kills the program and waits for it to exit.
func (a *Approver) Kill() {
	a.Cmd.Process.Kill()
	<-a.done
}
