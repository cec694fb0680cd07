package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// allowSudo lets account run cmds as root through sudo without a password
// until cleanup.
func allowSudo(t *testing.T, account string, cmds ...string) {
	t.Helper()
	f := "/etc/sudoers.d/rootgate-test-" + account
	rule := fmt.Sprintf("%s ALL=(root) NOPASSWD: %s\n", account, strings.Join(cmds, ", "))
	if err := os.WriteFile(f, []byte(rule), 0o440); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f) })
	if out, err := exec.Command("visudo", "-c", "-f", f).CombinedOutput(); err != nil {
		t.Fatalf("sudoers rule %q: %v: %s", rule, err, out)
	}
}

// tmuxSession is a tmux server owned by an account (or root), with one
// pane running a command: the terminal an operator works in.
type tmuxSession struct {
	t     *testing.T
	sock  string
	owner string // account name, or "" for root
}

// startTmux starts a tmux server as owner ("" for root) whose one pane runs
// shell command cmd; the server is killed at cleanup.
func startTmux(t *testing.T, owner string, cmd string) *tmuxSession {
	t.Helper()
	dir := testutil.ShortDir(t)
	if owner != "" {
		if out, err := exec.Command("chown", owner, dir).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v: %s", err, out)
		}
	}
	s := &tmuxSession{t: t, sock: filepath.Join(dir, "tmux"), owner: owner}
	// remain-on-exit keeps what the pane showed after its command ends.
	s.run("new-session", "-d", "-x", "200", "-y", "50", "-s", "op", cmd)
	s.run("set-option", "-g", "remain-on-exit", "on")
	t.Cleanup(func() { _ = s.command("kill-server").Run() })
	return s
}

// command is a tmux client command run as the server's owner: the same
// uid as an agent of that user, which may type into the pane at will.
func (s *tmuxSession) command(args ...string) *exec.Cmd {
	args = append([]string{"-S", s.sock}, args...)
	if s.owner == "" {
		return exec.Command("tmux", args...)
	}
	return exec.Command("runuser", append([]string{"-u", s.owner, "--", "tmux"}, args...)...)
}

func (s *tmuxSession) run(args ...string) string {
	s.t.Helper()
	out, err := s.command(args...).CombinedOutput()
	if err != nil {
		s.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is the pane's whole history, wrapped lines joined.
func (s *tmuxSession) screen() string {
	out, _ := s.command("capture-pane", "-p", "-J", "-S", "-", "-t", "op").Output()
	return string(out)
}

// see waits until the pane shows want.
func (s *tmuxSession) see(want string) {
	s.t.Helper()
	var last string
	if !testutil.Poll(30*time.Second, func() bool {
		last = s.screen()
		return strings.Contains(last, want)
	}) {
		s.t.Fatalf("the tmux pane never showed %q; it shows:\n%s", want, last)
	}
}

// sendKeys types keys into the pane as its owner does (tmux send-keys).
func (s *tmuxSession) sendKeys(keys ...string) {
	s.t.Helper()
	s.run(append([]string{"send-keys", "-t", "op"}, keys...)...)
}

// shellQuote quotes args for sh.
func shellQuote(args ...string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// pingAs sends a ping as uid and returns its approver field.
func pingAs(t *testing.T, sock string, a userAccount) bool {
	t.Helper()
	r := sendAs(t, sock, a.uid, a.gid, []uint32{}, request(map[string]any{"action": "ping", "pipeline": nil}))
	if r.Status != wire.StatusOK || r.Approver == nil {
		t.Fatalf("ping as %s: %s", a.name, r.raw)
	}
	return *r.Approver
}

// attack sends a request as the agent account and, while the operator's
// pane shows it, keeps typing y into that pane as the agent's uid would
// (tmux send-keys), past the prompt's dwell. It returns the answer.
func attack(t *testing.T, sock string, agent userAccount, s *tmuxSession, id string) response {
	t.Helper()
	line := request(map[string]any{"id": id, "pipeline": [][]string{{"id", "-u"}}, "reason": "self-approval attempt"})
	ch := make(chan response, 1)
	errs := make(chan error, 1)
	go func() {
		r, err := trySendAs(sock, agent.uid, agent.gid, []uint32{}, line)
		if err != nil {
			errs <- err
			return
		}
		ch <- r
	}()
	var r response
	var err error
	if !testutil.Poll(30*time.Second, func() bool {
		select {
		case r = <-ch:
			return true
		case err = <-errs:
			return true
		default:
		}
		if promptShown(s.screen(), id) {
			s.sendKeys("y") // the agent answers its own prompt
		}
		return false
	}) {
		t.Fatalf("no answer; the pane shows:\n%s", s.screen())
	}
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// promptShown reports whether screen shows the prompt of request id (its
// "ID:" line; a --tty daemon's log names the id too).
func promptShown(screen, id string) bool {
	return regexp.MustCompile(`(?m)^\s*┊ id:\s+` + regexp.QuoteMeta(id) + `\s*$`).MatchString(screen)
}

// wantSelfApprovalRefused asserts the answer to an agent's request that
// only approvers it controls could have seen.
func wantSelfApprovalRefused(t *testing.T, r response, agent userAccount, s *tmuxSession, id string) {
	t.Helper()
	if want := wire.NoEligibleApproverError(int(agent.uid), agent.name).Error(); r.Status != wire.StatusDenied || r.Message != want || r.Code != wire.CodeNoEligibleApprover {
		t.Fatalf("the agent's own request: got %s, want denied with %q\nthe pane shows:\n%s", strings.TrimSpace(r.raw), want, s.screen())
	}
	if promptShown(s.screen(), id) {
		t.Fatalf("the operator's pane was shown the agent's own request:\n%s", s.screen())
	}
}

// TestSudoApproverInAgentsTmux is the attack of the "Trusted approval"
// finding: the operator runs `sudo rootgate approve` in their tmux, and an
// agent with the operator's uid asks for root and types y into that tmux.
// The approver's socket uid is root, but its controller set (sudo's real
// uid, SUDO_UID, the tmux server, the terminals) holds the operator's uid,
// so the request is never shown there; another account's is.
func TestSudoApproverInAgentsTmux(t *testing.T) {
	t.Parallel()
	op := addAccount(t, "rgts0op", "--create-home")
	other := addAccount(t, "rgts0ag", "--create-home")
	allowSudo(t, op.name, rootgateBin)
	d := approverDaemon(t)
	openToAll(t, d)
	s := startTmux(t, op.name, shellQuote("sudo", "-n", rootgateBin, "approve", "--socket", d.asock()))
	s.see("attached to rootgated")
	s.see(fmt.Sprintf("requests from uid %d (%s) are not shown here", op.uid, op.name))

	if pingAs(t, d.Sock, op) {
		t.Error("ping tells the operator's uid an approver can be asked")
	}
	if !pingAs(t, d.Sock, other) {
		t.Error("ping tells another account no approver can be asked")
	}
	r := attack(t, d.Sock, op, s, "self-approve-sudo")
	wantSelfApprovalRefused(t, r, op, s, "self-approve-sudo")

	// The same approver still serves another account's requests.
	ch := make(chan response, 1)
	line := request(map[string]any{"id": "other-account", "pipeline": [][]string{{"id", "-u"}}})
	go func() { r, _ := trySendAs(d.Sock, other.uid, other.gid, []uint32{}, line); ch <- r }()
	s.see("other-account")
	s.see("n or Esc deny") // keys count once the dwell is over
	s.sendKeys("y")
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != "0\n" {
		t.Fatalf("another account's request: %s", r.raw)
	}
	s.see("idle, nothing queued")
	s.see(fmt.Sprintf("not asked about uid %d (%s): they can control this terminal", op.uid, op.name))
}

// TestSudoTTYDaemonInAgentsTmux is the finding's second attack: `sudo
// rootgated --tty` (the README's first command) in the operator's tmux.
// Under sudo's use_pty the daemon's terminal is a root-owned inner pty;
// the outer terminal, sudo and the tmux server are the operator's, so the
// operator's uid may not approve through it, and ping says so.
func TestSudoTTYDaemonInAgentsTmux(t *testing.T) {
	t.Parallel()
	op := addAccount(t, "rgts1op", "--create-home")
	other := addAccount(t, "rgts1ag", "--create-home")
	allowSudo(t, op.name, rootgated)
	dir := shortDir(t)
	policy := filepath.Join(dir, "policy")
	if err := os.WriteFile(policy, []byte("ask any\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	s := startTmux(t, op.name, shellQuote("sudo", "-n", rootgated, "--tty", "--socket", sock, "--approver-socket", "",
		"--runtime-dir", filepath.Join(dir, "run"), "--policy", policy, "--prompt-timeout", "20s", "--audit", auditPath(dir)))
	t.Cleanup(func() {
		// kill-server hangs up sudo, which passes SIGHUP on: wait until
		// the daemon is gone before its directory is removed.
		_ = s.command("kill-server").Run()
		waitFor(t, "rootgated --tty to stop", 30*time.Second, func() bool {
			c, err := net.Dial("unix", sock)
			if err == nil {
				c.Close()
			}
			return err != nil
		})
	})
	s.see("prompts appear here")
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(sock, 0o666); err != nil {
		t.Fatal(err)
	}
	s.see(fmt.Sprintf("this terminal is not asked about requests from uid %d (%s)", op.uid, op.name))

	if pingAs(t, sock, op) {
		t.Error("ping tells the operator's uid the --tty terminal can be asked")
	}
	if !pingAs(t, sock, other) {
		t.Error("ping tells another account no approver can be asked")
	}
	r := attack(t, sock, op, s, "self-approve-tty")
	wantSelfApprovalRefused(t, r, op, s, "self-approve-tty")

	ch := make(chan response, 1)
	line := request(map[string]any{"id": "other-account", "pipeline": [][]string{{"id", "-u"}}})
	go func() { r, _ := trySendAs(sock, other.uid, other.gid, []uint32{}, line); ch <- r }()
	s.see("other-account")
	s.see("n or Esc deny") // keys count once the dwell is over
	s.sendKeys("y")
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != "0\n" {
		t.Fatalf("another account's request: %s", r.raw)
	}
}

// TestRootTmuxApprover is the legitimate set-up: an approver in a tmux only
// root controls is asked about, and approves, a non-root account's
// request.
func TestRootTmuxApprover(t *testing.T) {
	t.Parallel()
	agent := addAccount(t, "rgts2ag", "--create-home")
	d := approverDaemon(t)
	openToAll(t, d)
	s := startTmux(t, "", shellQuote(rootgateBin, "approve", "--socket", d.asock()))
	s.see("attached to rootgated")
	if !pingAs(t, d.Sock, agent) {
		t.Fatal("ping: no approver for the agent account")
	}
	ch := make(chan response, 1)
	line := request(map[string]any{"id": "agent-asks", "pipeline": [][]string{{"id", "-u"}}})
	go func() { r, _ := trySendAs(d.Sock, agent.uid, agent.gid, []uint32{}, line); ch <- r }()
	s.see("agent-asks")
	s.see("n or Esc deny") // keys count once the dwell is over
	s.sendKeys("y")
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != "0\n" {
		t.Fatalf("%s", r.raw)
	}
	if strings.Contains(s.screen(), "not shown here") {
		t.Errorf("a root-only approver says some uid is not shown:\n%s", s.screen())
	}
}

// TestUnsafeSelfApproval is the opt-out: with --unsafe-self-approval the
// operator's own-uid request reaches the sudo approver in their tmux, with
// the banner, a warning in the log, and the audit record saying so.
func TestUnsafeSelfApproval(t *testing.T) {
	t.Parallel()
	op := addAccount(t, "rgts3op", "--create-home")
	allowSudo(t, op.name, rootgateBin)
	d := approverDaemon(t, "--unsafe-self-approval")
	openToAll(t, d)
	if !strings.Contains(d.Stderr.String(), "UNSAFE: --unsafe-self-approval is on") {
		t.Errorf("no warning at start:\n%s", d.Stderr.String())
	}
	s := startTmux(t, op.name, shellQuote("sudo", "-n", rootgateBin, "approve", "--socket", d.asock()))
	s.see("attached to rootgated")
	s.see("UNSAFE: rootgated runs with --unsafe-self-approval")
	if !pingAs(t, d.Sock, op) {
		t.Error("ping: no approver under --unsafe-self-approval")
	}
	ch := make(chan response, 1)
	line := request(map[string]any{"id": "own-uid", "pipeline": [][]string{{"id", "-u"}}})
	go func() { r, _ := trySendAs(d.Sock, op.uid, op.gid, []uint32{}, line); ch <- r }()
	s.see("UNSAFE SELF-APPROVAL: the requester's uid can control this terminal")
	s.see("own-uid")
	s.see("n or Esc deny") // keys count once the dwell is over
	s.sendKeys("y")
	if r := <-ch; r.Status != wire.StatusOK {
		t.Fatalf("%s", r.raw)
	}
	b, err := os.ReadFile(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var rec struct {
			Kind     string `json:"kind"`
			ID       string `json:"id"`
			Decision *struct {
				Unsafe bool `json:"unsafe_self_approval"`
			} `json:"decision"`
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Kind == "decided" && rec.ID == "own-uid" {
			found = rec.Decision != nil && rec.Decision.Unsafe
		}
	}
	if !found {
		t.Errorf("no decided record with unsafe_self_approval for own-uid:\n%s", b)
	}
}

// readmeSecureSetup returns the lines of the README's "Secure setup"
// code blocks.
func readmeSecureSetup(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "\n## Secure setup\n")
	if !ok {
		t.Fatal("README.md has no Secure setup section")
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	var lines []string
	in := false
	for line := range strings.SplitSeq(sec, "\n") {
		switch {
		case strings.HasPrefix(line, "```"):
			in = !in
		case in:
			line, _, _ = strings.Cut(line, "#")
			lines = append(lines, strings.TrimSpace(line))
		}
	}
	return lines
}

// TestReadmeSecureSetup follows the README's secure set-up end to end: the
// agent account made with its useradd flags, the operator (its own
// account) approving with `sudo rootgate approve` in their own tmux, and a
// request from the agent account with `rootgate run`, approved with y. A
// request from the operator's own uid is refused, as the README says.
func TestReadmeSecureSetup(t *testing.T) {
	t.Parallel()
	lines := readmeSecureSetup(t)
	var useradd []string
	approve := false
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == "sudo" && f[1] == "useradd" && f[len(f)-1] == "agent" {
			// --groups rootgate is left out: a rootgate group would change
			// the socket of every test daemon on this machine; the test
			// daemon's socket is opened to all instead.
			for i := 2; i < len(f)-1; i++ {
				if f[i] == "--groups" {
					i++
					continue
				}
				useradd = append(useradd, f[i])
			}
		}
		approve = approve || l == "sudo rootgate approve"
	}
	if useradd == nil || !approve {
		t.Fatalf("README's Secure setup lacks the useradd line for agent or `sudo rootgate approve`: %q", lines)
	}
	agent := addAccount(t, "rgts4ag", useradd...)
	op := addAccount(t, "rgts4op", "--create-home")
	allowSudo(t, op.name, rootgateBin)
	d := approverDaemon(t)
	openToAll(t, d)
	s := startTmux(t, op.name, shellQuote("sudo", "-n", rootgateBin, "approve", "--socket", d.asock()))
	s.see("attached to rootgated")

	runAs := func(a userAccount) *exec.Cmd {
		cmd := exec.Command("runuser", "-u", a.name, "--", rootgateBin, "run", "--reason", "readme secure setup", "--", "id", "-un")
		cmd.Env = []string{"PATH=/usr/bin:/bin", "ROOTGATE_SOCKET=" + d.Sock}
		return cmd
	}
	out := make(chan string, 1)
	go func() {
		b, err := runAs(agent).CombinedOutput()
		out <- fmt.Sprintf("%s(err %v)", b, err)
	}()
	s.see("readme secure setup")
	s.see("n or Esc deny") // keys count once the dwell is over
	s.sendKeys("y")
	if got := <-out; got != "root\n(err <nil>)" {
		t.Fatalf("the agent's request printed %q", got)
	}

	b, err := runAs(op).CombinedOutput()
	want := "rootgate: denied: " + wire.NoEligibleApproverError(int(op.uid), op.name).Error()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 77 || strings.TrimSpace(string(b)) != want {
		t.Fatalf("the operator's own uid got %q (%v), want exit 77 and %q", b, err, want)
	}
}
