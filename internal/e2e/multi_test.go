package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// farHost is the host name of the test's second machine: its daemon runs
// in a UTS namespace of its own (unshare --uts) with this name.
const farHost = "rgtfarhost"

// inUTS runs a daemon in a new UTS namespace whose host name is name, as
// a daemon on another machine would see its own.
func inUTS(name string) []string {
	return []string{"unshare", "--uts", "sh", "-c", `hostname "$1" && shift && exec "$@"`, "sh", name}
}

// operatorForward runs docs/remote.md's forward of a host's approver
// socket (without -f, so the test holds the ssh process) through the
// operator's login, and waits until its local socket exists. It is killed
// at cleanup.
func (h *sshHost) operatorForward(local, remote string) *exec.Cmd {
	h.t.Helper()
	return h.runForward(h.operatorForwardArgs(local, remote, h.opKey, h.knownHost), local, "the operator's forward's socket")
}

// operatorForwardArgs is ssh's arguments for docs/remote.md's forward of
// the approver socket remote to local, through the operator's login with
// key, the host key pinned in knownHosts.
func (h *sshHost) operatorForwardArgs(local, remote, key, knownHosts string) []string {
	h.t.Helper()
	line := strings.NewReplacer(
		"ssh -fN ", "ssh -N ",
		"~/.ssh/known_hosts.web1", knownHosts,
		"$XDG_RUNTIME_DIR/rootgate-web1.approve.sock", local,
		"/run/rootgate/approve.sock", remote,
		"alice@web1", h.operator.Username+"@web1",
	).Replace(docSSH(h.t, "ssh -fN "))
	return append([]string{"-i", key, "-o", "IdentitiesOnly=yes"}, h.reach(line)...)
}

// TestApproveManyHosts: one `rootgate approve` on a pty attached to two
// real daemons, "near" on this machine's socket and "far" in a UTS
// namespace of its own (host name rgtfarhost) reached through docs/remote.md's
// ssh -L forward of its approver socket to a real sshd, as the operator's
// login. Prompts from both appear, one at a time, each naming the machine
// its daemon says it is, whatever host the requester claims; each command
// runs on the machine named. The forward is then stopped with SIGSTOP, so
// the connection is silent rather than closed: far's pings detach the
// approver within --approver-silence, far's requests are refused at once
// instead of waiting out the 60 s prompt, and near keeps its approver and
// its answers. Resumed, the forward carries a new attachment by itself.
func TestApproveManyHosts(t *testing.T) {
	h := startSSHHost(t)
	liveness := []string{"--prompt-timeout", "60s", "--approver-ping", "200ms", "--approver-silence", "1s"}
	near := startDaemon(t, opts{Policy: "ask any\n", Args: liveness})
	far := startDaemon(t, opts{Policy: "ask any\n", Args: append(liveness, "--approver", operatorUser), Prefix: inUTS(farHost)})
	if err := os.Chmod(far.Dir, 0o711); err != nil { // the operator's login reaches its approver socket
		t.Fatal(err)
	}
	local := filepath.Join(shortDir(t), "far.approve.sock")
	fwd := h.operatorForward(local, far.asock())
	t.Cleanup(func() { fwd.Process.Signal(syscall.SIGCONT) })

	nearHost, err := os.Hostname()
	if err != nil || nearHost == farHost {
		t.Fatalf("this machine's host name %q: %v", nearHost, err)
	}
	// The doc's approve line, its two sockets standing for near's and the
	// forward's.
	args := strings.Fields(docCommand(t, "rootgate approve --socket "))[1:]
	var sockets []string
	for i, f := range args {
		if i > 0 && args[i-1] == "--socket" {
			sockets = append(sockets, f)
			args[i] = []string{near.asock(), local}[min(len(sockets)-1, 1)]
		}
	}
	if len(sockets) != 2 {
		t.Fatalf("docs/remote.md's approve line names %d sockets, want 2", len(sockets))
	}
	cmd := exec.Command(rootgateBin, args...)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color", "SUDO_USER=")
	a := startOnPty(t, cmd, &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL})
	waitFor(t, "both daemons to attach", 30*time.Second, func() bool {
		txt := a.Screen.Text()
		return strings.Contains(txt, "on host "+nearHost+" at "+near.asock()) && strings.Contains(txt, "on host "+farHost+" at "+local)
	})
	// The idle screen has a part for each daemon, headed by its machine.
	waitFor(t, "the idle screen to show both daemons", 30*time.Second, func() bool {
		txt := a.Screen.Text()
		return strings.Contains(txt, "── from rootgated on "+nearHost+" at "+near.asock()) &&
			strings.Contains(txt, "── from rootgated on "+farHost+" at "+local)
	})
	a.Pos = len(a.Screen.Text())

	// prompt waits for the prompt with id, approves it, and returns what
	// the screen showed of it.
	prompt := func(id string) string {
		t.Helper()
		a.See(id)
		from := a.Pos - len(id) // the last redraw of the prompt before may come after a.Pos
		a.See("n or Esc deny")
		shown := a.Screen.Text()[from:a.Pos]
		a.Key("y")
		return shown
	}
	ran := func(ch chan response, want string) {
		t.Helper()
		if r := wantOK(t, <-ch); string(r.Stdout) != want+"\n" {
			t.Fatalf("ran %q, want %q: %s", r.Stdout, want, r.raw)
		}
	}
	onHost := func(host string) string { return "Runs on host " + host + ": the name rootgated there gives itself" }

	// The far machine's prompt names it; the command runs there.
	ch := far.ask(map[string]any{"id": "from-far", "pipeline": [][]string{{"hostname"}}, "reason": "on the far machine"})
	shown := prompt("from-far")
	if !strings.Contains(shown, onHost(farHost)) || strings.Contains(shown, onHost(nearHost)) {
		t.Errorf("the far prompt does not name %s alone:\n%s", farHost, shown)
	}
	ran(ch, farHost)

	// A near request claiming to come from the far machine is still shown
	// as near's: the host it gives is only its own word. Meanwhile a far
	// request waits its turn behind it on the same terminal.
	ch = near.ask(map[string]any{"id": "from-near", "host": farHost, "pipeline": [][]string{{"hostname"}}})
	a.See("from-near")
	from := a.Pos - len("from-near")
	queued := far.ask(map[string]any{"id": "far-queued", "reason": "queued on far", "pipeline": [][]string{{"hostname"}}})
	requestWithReason(t, far, "queued on far")
	a.See("n or Esc deny")
	shown = a.Screen.Text()[from:a.Pos]
	if !strings.Contains(shown, onHost(nearHost)) || strings.Contains(shown, onHost(farHost)) {
		t.Errorf("the near prompt, claiming host %s, does not name %s alone:\n%s", farHost, nearHost, shown)
	}
	if strings.Contains(shown, "far-queued") {
		t.Errorf("the far request was shown while the near one was up:\n%s", shown)
	}
	a.Key("y")
	ran(ch, nearHost)
	shown = prompt("far-queued")
	if !strings.Contains(shown, onHost(farHost)) {
		t.Errorf("the queued far prompt does not name %s:\n%s", farHost, shown)
	}
	ran(queued, farHost)

	// The forward goes silent: no close reaches either end.
	if err := fwd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	r := far.send(map[string]any{"id": "far-while-silent", "pipeline": [][]string{{"hostname"}}})
	if r.Status == wire.StatusOK || r.Code != wire.CodeNoApprover {
		t.Fatalf("far request with its approver silent: %s", r.raw)
	}
	if took := time.Since(stopped); took > 20*time.Second {
		t.Errorf("far request with its approver silent took %s", took)
	}
	far.waitLog("approver silent")
	r = far.send(map[string]any{"id": "far-after-detach", "pipeline": [][]string{{"hostname"}}})
	if r.Status == wire.StatusOK || r.Message != wire.ErrNoApprover.Error() {
		t.Fatalf("far request after the detach: %s", r.raw)
	}
	a.See("connection to rootgated lost (" + farHost + " at " + local)

	// Near keeps its approver.
	ch = near.ask(map[string]any{"id": "near-still", "pipeline": [][]string{{"hostname"}}})
	shown = prompt("near-still")
	if !strings.Contains(shown, onHost(nearHost)) {
		t.Errorf("the near prompt does not name %s:\n%s", nearHost, shown)
	}
	ran(ch, nearHost)

	// The forward comes back: the approver attaches again by itself.
	if err := fwd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	a.See("attached to rootgated")
	a.See("on host " + farHost + " at " + local)
	ch = far.ask(map[string]any{"id": "far-again", "pipeline": [][]string{{"hostname"}}})
	shown = prompt("far-again")
	if !strings.Contains(shown, onHost(farHost)) {
		t.Errorf("the far prompt does not name %s:\n%s", farHost, shown)
	}
	ran(ch, farHost)
}
