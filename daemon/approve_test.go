package daemon_test

import (
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
	"github.com/rootgate/rootgate/wire"
)

// approverProc is `rootgate approve` on a real pseudo-terminal.
type approverProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	pty  *os.File
	scr  *testutil.Screen
	done chan struct{}
	pos  int // how far the screen has been read
}

// startApprover runs `rootgate approve --socket sock` as uid (0 or nobody).
func startApprover(t *testing.T, sock string, uid uint32) *approverProc {
	t.Helper()
	return startApproverArgs(t, sock, uid)
}

// startApproverArgs is startApprover with more flags.
func startApproverArgs(t *testing.T, sock string, uid uint32, args ...string) *approverProc {
	t.Helper()
	cmd := exec.Command(rootgateBin, append([]string{"approve", "--socket", sock}, args...)...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color", "SUDO_USER=")
	attrs := &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL}
	if uid != 0 {
		attrs.Credential = &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
	}
	return startOnPty(t, cmd, attrs)
}

// startOnPty runs cmd on a fresh pseudo-terminal as the approver's screen.
func startOnPty(t *testing.T, cmd *exec.Cmd, attrs *syscall.SysProcAttr) *approverProc {
	t.Helper()
	a := &approverProc{t: t, cmd: cmd, done: make(chan struct{})}
	ptmx, err := pty.StartWithAttrs(a.cmd, &pty.Winsize{Rows: 60, Cols: 160}, attrs)
	if err != nil {
		t.Fatal(err)
	}
	a.pty = ptmx
	a.scr = testutil.NewScreen(ptmx, nil)
	go func() { a.cmd.Wait(); close(a.done) }()
	t.Cleanup(func() {
		a.cmd.Process.Kill()
		<-a.done
		ptmx.Close()
	})
	return a
}

// see waits until the screen shows want after what was already seen.
func (a *approverProc) see(want string) {
	a.t.Helper()
	defer func() {
		if a.t.Failed() {
			a.t.Logf("the approver's screen:\n%s", a.scr.Text())
		}
	}()
	waitFor(a.t, "the approver to show "+want, 30*time.Second, func() bool {
		txt := a.scr.Text()
		if i := strings.Index(txt[min(a.pos, len(txt)):], want); i >= 0 {
			a.pos += i + len(want)
			return true
		}
		return false
	})
}

// seeRe waits until the screen matches re after what was already seen.
func (a *approverProc) seeRe(re *regexp.Regexp) {
	a.t.Helper()
	waitFor(a.t, "the approver to show "+re.String(), 30*time.Second, func() bool {
		txt := a.scr.Text()
		if loc := re.FindStringIndex(txt[min(a.pos, len(txt)):]); loc != nil {
			a.pos += loc[1]
			return true
		}
		return false
	})
}

// use makes t, a subtest, the one failures go to until the returned
// function restores the parent.
func (a *approverProc) use(t *testing.T) (restore func()) {
	parent := a.t
	a.t = t
	return func() { a.t = parent }
}

func (a *approverProc) key(k string) {
	a.t.Helper()
	if _, err := a.pty.Write([]byte(k)); err != nil {
		a.t.Fatal(err)
	}
}

func (a *approverProc) kill() {
	a.cmd.Process.Kill()
	<-a.done
}

// ask sends a request in the background.
func (d *daemonProc) ask(over map[string]any) chan response {
	ch := make(chan response, 1)
	line := request(over)
	go func() { ch <- d.sendRaw(line) }()
	return ch
}

func approverDaemon(t *testing.T, extra ...string) *daemonProc {
	return startDaemon(t, opts{policy: "ask any\n", args: append([]string{"--prompt-timeout", "4s"}, extra...)})
}

func (d *daemonProc) asock() string { return filepath.Join(d.dir, "a") }

var deniedByRoot = regexp.MustCompile(`^denied by operator root on pts/\d+$`)

func TestApproverTerminal(t *testing.T) {
	d := approverDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.see("attached to rootgated")

	t.Run("y approves", func(t *testing.T) {
		defer a.use(t)()
		ch := d.ask(map[string]any{"id": "ap-y", "pipeline": [][]string{{"echo", "through-approver"}}, "reason": "approver test"})
		a.see("ap-y")
		a.see("echo through-approver")
		a.see("n or Esc deny")
		a.key("y")
		r := wantOK(t, <-ch)
		if string(r.Stdout) != "through-approver\n" {
			t.Fatalf("%s", r.raw)
		}
		// The idle line and the run's outcome arrive in either order.
		for _, want := range []string{"ap-y finished, exit codes 0", "idle, nothing queued; waiting for requests (last: ap-y approved)"} {
			waitFor(t, "the approver to show "+want, 30*time.Second, func() bool { return strings.Contains(a.scr.Text(), want) })
		}
	})
	t.Run("n denies naming the approver", func(t *testing.T) {
		defer a.use(t)()
		ch := d.ask(map[string]any{"id": "ap-n"})
		a.see("ap-n")
		a.see("n or Esc deny")
		a.key("n")
		if r := <-ch; r.Status != wire.StatusDenied || (!deniedByRoot.MatchString(r.Message) || r.Code != wire.CodeDeniedByOperator) {
			t.Fatalf("%s", r.raw)
		}
	})
	t.Run("no key times out", func(t *testing.T) {
		defer a.use(t)()
		ch := d.ask(map[string]any{"id": "ap-t"})
		a.see("ap-t")
		if r := <-ch; r.Status != wire.StatusTimeout || (r.Message != "no approval decision within 4s" || r.Code != wire.CodePromptTimeout) {
			t.Fatalf("%s", r.raw)
		}
		// The approver's countdown and the daemon's withdrawal race to
		// end the prompt at the same deadline; either record is right.
		a.seeRe(regexp.MustCompile(`request ap-t (timed out|withdrawn)`))
	})
}

func TestApproverAccessible(t *testing.T) {
	d := approverDaemon(t)
	a := startApproverArgs(t, d.asock(), 0, "--accessible")
	a.see("attached to rootgated")

	ch := d.ask(map[string]any{"id": "acc-y", "pipeline": [][]string{{"echo", "read-aloud"}}})
	a.see("acc-y")
	a.see("Type y and Enter to approve; Enter alone denies. [y/N]")
	a.key("y\r")
	if r := wantOK(t, <-ch); string(r.Stdout) != "read-aloud\n" {
		t.Fatalf("%s", r.raw)
	}
	a.see("acc-y approved")

	ch = d.ask(map[string]any{"id": "acc-enter"})
	a.see("acc-enter")
	a.see("[y/N]")
	a.key("\r")
	if r := <-ch; r.Status != wire.StatusDenied || (!deniedByRoot.MatchString(r.Message) || r.Code != wire.CodeDeniedByOperator) {
		t.Fatalf("Enter alone: %s", r.raw)
	}
}

func TestTwoApprovers(t *testing.T) {
	d := approverDaemon(t)
	a := startApprover(t, d.asock(), 0)
	b := startApprover(t, d.asock(), 0)
	a.see("attached to rootgated")
	b.see("attached to rootgated")

	// The first answer wins; the other sees who decided.
	ch := d.ask(map[string]any{"id": "two-1", "pipeline": [][]string{{"echo", "won"}}})
	a.see("n or Esc deny")
	b.see("n or Esc deny")
	a.key("y")
	if r := wantOK(t, <-ch); string(r.Stdout) != "won\n" {
		t.Fatalf("%s", r.raw)
	}
	b.see("withdrawn (approved by root on pts/")

	// One approver killed mid-prompt: the other still decides.
	ch = d.ask(map[string]any{"id": "two-2"})
	a.see("two-2")
	b.see("two-2")
	a.see("n or Esc deny")
	b.see("n or Esc deny")
	a.kill()
	b.key("n")
	if r := <-ch; r.Status != wire.StatusDenied || (!deniedByRoot.MatchString(r.Message) || r.Code != wire.CodeDeniedByOperator) {
		t.Fatalf("%s", r.raw)
	}

	// Both gone mid-prompt: denied, never approved.
	c := startApprover(t, d.asock(), 0)
	c.see("attached to rootgated")
	ch = d.ask(map[string]any{"id": "two-3", "pipeline": [][]string{{"echo", "must-not-run"}}})
	b.see("two-3")
	c.see("two-3")
	b.see("n or Esc deny")
	c.see("n or Esc deny")
	b.kill()
	c.kill()
	if r := <-ch; r.Status != wire.StatusDenied || (!strings.HasPrefix(r.Message, "every approver left before deciding") || r.Code != wire.CodeNoApprover) {
		t.Fatalf("%s", r.raw)
	}
}

func TestApproverAdmission(t *testing.T) {
	const nobody = 65534
	t.Run("root only: nobody cannot attach", func(t *testing.T) {
		d := approverDaemon(t)
		openToAll(t, d)
		a := startApprover(t, d.asock(), nobody)
		a.see("rootgate: error: cannot attach to " + d.asock())
		a.see("permission denied")
		<-a.done
		if code := a.cmd.ProcessState.ExitCode(); code != 70 {
			t.Errorf("exit code %d", code)
		}
	})
	t.Run("others admitted: nobody is refused with a reason", func(t *testing.T) {
		d := approverDaemon(t, "--approver", "daemon")
		openToAll(t, d)
		a := startApprover(t, d.asock(), nobody)
		a.see("rootgated refused this approver: uid 65534 (nobody) may not approve")
		<-a.done
	})
	t.Run("nobody admitted, never asked about its own requests", func(t *testing.T) {
		d := approverDaemon(t, "--approver", "nobody")
		openToAll(t, d)
		a := startApprover(t, d.asock(), nobody)
		a.see("attached to rootgated")
		a.see("as nobody")
		// nobody's own request: not shown, so no one is left to ask.
		r := sendAs(t, d.sock, nobody, nobody, []uint32{}, request(map[string]any{"id": "nobodys-own"}))
		if r.Status != wire.StatusDenied || (r.Message != `no eligible approver: the attached approvers can be controlled by uid 65534 (nobody), who sent this request; run the agent under its own account (README: "Secure setup")` || r.Code != wire.CodeNoEligibleApprover) {
			t.Fatalf("%s", r.raw)
		}
		if strings.Contains(a.scr.Text(), "nobodys-own") {
			t.Fatal("the approver was shown its own user's request")
		}
		// root's request is shown to nobody, who approves it.
		ch := d.ask(map[string]any{"id": "roots", "pipeline": [][]string{{"id", "-u"}}})
		a.see("roots")
		a.see("n or Esc deny")
		a.key("y")
		if r := wantOK(t, <-ch); string(r.Stdout) != "0\n" {
			t.Fatalf("%s", r.raw)
		}
	})
}

func TestApproverReattaches(t *testing.T) {
	dir := shortDir(t)
	d := startDaemon(t, opts{dir: dir, policy: "ask any\n"})
	a := startApprover(t, d.asock(), 0)
	a.see("attached to rootgated")
	d.stop()
	a.see("connection to rootgated lost")
	d2 := startDaemon(t, opts{dir: dir, policy: "ask any\n"})
	a.see("attached to rootgated")
	ch := d2.ask(map[string]any{"id": "again", "pipeline": [][]string{{"echo", "back"}}})
	a.see("again")
	a.see("n or Esc deny")
	a.key("y")
	if r := wantOK(t, <-ch); string(r.Stdout) != "back\n" {
		t.Fatalf("%s", r.raw)
	}

	// Ctrl-C between prompts detaches cleanly.
	a.see("idle, nothing queued")
	a.key("\x03")
	a.see("rootgate: detached")
	<-a.done
	if code := a.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("detached with exit code %d", code)
	}
}
