package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
)

// approverProc is `rootgate approve` (or another program) on a real
// pseudo-terminal, with this package's helpers.
type approverProc struct{ *rgtest.Approver }

// startApprover runs `rootgate approve --socket sock` as uid (0 or nobody).
func startApprover(t *testing.T, sock string, uid uint32) *approverProc {
	t.Helper()
	return &approverProc{rgtest.StartApprover(t, sock, uid)}
}

// startApproverArgs is startApprover with more flags.
func startApproverArgs(t *testing.T, sock string, uid uint32, args ...string) *approverProc {
	t.Helper()
	return &approverProc{rgtest.StartApprover(t, sock, uid, args...)}
}

// startOnPty runs cmd on a fresh pseudo-terminal as the approver's screen.
func startOnPty(t *testing.T, cmd *exec.Cmd, attrs *syscall.SysProcAttr) *approverProc {
	t.Helper()
	return &approverProc{rgtest.StartOnPty(t, cmd, attrs)}
}

// ask sends a request in the background.
func (d *daemonProc) ask(over map[string]any) chan response {
	ch := make(chan response, 1)
	line := request(over)
	go func() { ch <- d.sendRaw(line) }()
	return ch
}

func approverDaemon(t *testing.T, extra ...string) *daemonProc {
	return startDaemon(t, opts{Policy: "ask any\n", Args: append([]string{"--prompt-timeout", "4s"}, extra...)})
}

func (d *daemonProc) asock() string { return filepath.Join(d.Dir, "a") }

var deniedByRoot = regexp.MustCompile(`^denied by operator root on pts/\d+$`)

func TestApproverTerminal(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	t.Run("y approves", func(t *testing.T) {
		defer a.Use(t)()
		ch := d.ask(map[string]any{"id": "ap-y", "pipeline": [][]string{{"echo", "through-approver"}}, "reason": "approver test"})
		a.See("ap-y")
		a.See("echo through-approver")
		a.See("n or Esc deny")
		a.Key("y")
		r := wantOK(t, <-ch)
		if string(r.Stdout) != "through-approver\n" {
			t.Fatalf("%s", r.raw)
		}
		// The idle line and the run's outcome arrive in either order.
		for _, want := range []string{"ap-y finished, exit codes 0", "idle, nothing queued; waiting for requests (last: ap-y approved)"} {
			waitFor(t, "the approver to show "+want, 30*time.Second, func() bool { return strings.Contains(a.Screen.Text(), want) })
		}
	})
	t.Run("n denies naming the approver", func(t *testing.T) {
		defer a.Use(t)()
		ch := d.ask(map[string]any{"id": "ap-n"})
		a.See("ap-n")
		a.See("n or Esc deny")
		a.Key("n")
		if r := <-ch; r.Status != wire.StatusDenied || (!deniedByRoot.MatchString(r.Message) || r.Code != wire.CodeDeniedByOperator) {
			t.Fatalf("%s", r.raw)
		}
	})
	t.Run("no key times out", func(t *testing.T) {
		defer a.Use(t)()
		ch := d.ask(map[string]any{"id": "ap-t"})
		a.See("ap-t")
		if r := <-ch; r.Status != wire.StatusTimeout || (r.Message != "no approval decision within 4s" || r.Code != wire.CodePromptTimeout) {
			t.Fatalf("%s", r.raw)
		}
		// The approver's countdown and the daemon's withdrawal race to
		// end the prompt at the same deadline; either record is right.
		a.SeeRe(regexp.MustCompile(`request ap-t (timed out|withdrawn)`))
	})
}

func TestApproverAccessible(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := startApproverArgs(t, d.asock(), 0, "--accessible")
	a.See("attached to rootgated")

	ch := d.ask(map[string]any{"id": "acc-y", "pipeline": [][]string{{"echo", "read-aloud"}}})
	a.See("acc-y")
	a.See("Type y and Enter to approve; Enter alone denies. [y/N]")
	a.Key("y\r")
	if r := wantOK(t, <-ch); string(r.Stdout) != "read-aloud\n" {
		t.Fatalf("%s", r.raw)
	}
	a.See("acc-y approved")

	ch = d.ask(map[string]any{"id": "acc-enter"})
	a.See("acc-enter")
	a.See("[y/N]")
	a.Key("\r")
	if r := <-ch; r.Status != wire.StatusDenied || (!deniedByRoot.MatchString(r.Message) || r.Code != wire.CodeDeniedByOperator) {
		t.Fatalf("Enter alone: %s", r.raw)
	}
}

func TestTwoApprovers(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := startApprover(t, d.asock(), 0)
	b := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	b.See("attached to rootgated")

	// The first answer wins; the other sees who decided.
	ch := d.ask(map[string]any{"id": "two-1", "pipeline": [][]string{{"echo", "won"}}})
	a.See("n or Esc deny")
	b.See("n or Esc deny")
	a.Key("y")
	if r := wantOK(t, <-ch); string(r.Stdout) != "won\n" {
		t.Fatalf("%s", r.raw)
	}
	b.See("withdrawn (approved by root on pts/")

	// One approver killed mid-prompt: the other still decides.
	ch = d.ask(map[string]any{"id": "two-2"})
	a.See("two-2")
	b.See("two-2")
	a.See("n or Esc deny")
	b.See("n or Esc deny")
	a.Kill()
	b.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied || (!deniedByRoot.MatchString(r.Message) || r.Code != wire.CodeDeniedByOperator) {
		t.Fatalf("%s", r.raw)
	}

	// Both gone mid-prompt: denied, never approved.
	c := startApprover(t, d.asock(), 0)
	c.See("attached to rootgated")
	ch = d.ask(map[string]any{"id": "two-3", "pipeline": [][]string{{"echo", "must-not-run"}}})
	b.See("two-3")
	c.See("two-3")
	b.See("n or Esc deny")
	c.See("n or Esc deny")
	b.Kill()
	c.Kill()
	if r := <-ch; r.Status != wire.StatusDenied || (!strings.HasPrefix(r.Message, "every approver left before deciding") || r.Code != wire.CodeNoApprover) {
		t.Fatalf("%s", r.raw)
	}
}

func TestApproverAdmission(t *testing.T) {
	t.Parallel()
	const nobody = 65534
	t.Run("root only: nobody cannot attach", func(t *testing.T) {
		d := approverDaemon(t)
		openToAll(t, d)
		a := startApprover(t, d.asock(), nobody)
		a.See("rootgate: error: cannot attach to " + d.asock())
		a.See("permission denied")
		<-a.Done()
		if code := a.Cmd.ProcessState.ExitCode(); code != 70 {
			t.Errorf("exit code %d", code)
		}
	})
	t.Run("others admitted: nobody is refused with a reason", func(t *testing.T) {
		d := approverDaemon(t, "--approver", "daemon")
		openToAll(t, d)
		a := startApprover(t, d.asock(), nobody)
		a.See("rootgated refused this approver: uid 65534 (nobody) may not approve")
		<-a.Done()
	})
	t.Run("nobody admitted, never asked about its own requests", func(t *testing.T) {
		d := approverDaemon(t, "--approver", "nobody")
		openToAll(t, d)
		a := startApprover(t, d.asock(), nobody)
		a.See("attached to rootgated")
		a.See("as nobody")
		// nobody's own request: not shown, so no one is left to ask.
		r := sendAs(t, d.Sock, nobody, nobody, []uint32{}, request(map[string]any{"id": "nobodys-own"}))
		if r.Status != wire.StatusDenied || (r.Message != `no eligible approver: the attached approvers can be controlled by uid 65534 (nobody), who sent this request; run the agent under its own account (README: "Secure setup"), or approve with a passkey (README: "Approving your own account's agent with a passkey")` || r.Code != wire.CodeNoEligibleApprover) {
			t.Fatalf("%s", r.raw)
		}
		if strings.Contains(a.Screen.Text(), "nobodys-own") {
			t.Fatal("the approver was shown its own user's request")
		}
		// root's request is shown to nobody, who approves it.
		ch := d.ask(map[string]any{"id": "roots", "pipeline": [][]string{{"id", "-u"}}})
		a.See("roots")
		a.See("n or Esc deny")
		a.Key("y")
		if r := wantOK(t, <-ch); string(r.Stdout) != "0\n" {
			t.Fatalf("%s", r.raw)
		}
	})
}

func TestApproverReattaches(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	d := startDaemon(t, opts{Dir: dir, Policy: "ask any\n"})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	d.Stop()
	a.See("connection to rootgated lost")
	d2 := startDaemon(t, opts{Dir: dir, Policy: "ask any\n"})
	a.See("attached to rootgated")
	ch := d2.ask(map[string]any{"id": "again", "pipeline": [][]string{{"echo", "back"}}})
	a.See("again")
	a.See("n or Esc deny")
	a.Key("y")
	if r := wantOK(t, <-ch); string(r.Stdout) != "back\n" {
		t.Fatalf("%s", r.raw)
	}

	// Ctrl-C between prompts detaches cleanly.
	a.See("idle, nothing queued")
	a.Key("\x03")
	a.See("rootgate: detached")
	<-a.Done()
	if code := a.Cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("detached with exit code %d", code)
	}
}

// TestApproverConnectionsCapped: an admitted uid other than root may hold
// only remote.MaxApproverConns approver connections at once; the next is
// refused at once with a reason, before any walk of its ancestry.
func TestApproverConnectionsCapped(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t, "--approver", "nobody")
	openToAll(t, d)
	const script = `use IO::Socket::UNIX;
my @c;
for my $i (1..$ARGV[1]) {
	push @c, IO::Socket::UNIX->new(Type => SOCK_STREAM(), Peer => $ARGV[0]) or die "connect $i: $!";
}
# One of them (whichever the daemon served last) is refused at once; the
# others would wait for a hello.
use IO::Select;
my @ready = IO::Select->new(@c)->can_read(30);
my $s = $ready[0] or die "no answer";
my $line = <$s>;
print $line;`
	const nobody = 65534
	cmd := exec.Command("perl", "-e", script, d.asock(), strconv.Itoa(remote.MaxApproverConns+1))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("perl: %v: %s", err, out)
	}
	want := remote.ApproverTooMany(nobody)
	if !strings.Contains(string(out), `"type":"error"`) || !strings.Contains(string(out), want) {
		t.Fatalf("the first answer of %d connections: %q, want the refusal %q", remote.MaxApproverConns+1, out, want)
	}
}
