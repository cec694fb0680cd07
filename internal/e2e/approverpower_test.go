package e2e

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/wire"
)

// The tests of "Who can approve" (docs/security.md): an account that may
// approve rootgate requests is root's equal, so a run as it is decided as
// a request for root, and no approver attaches from inside a run.

// sendAsync sends line as account a and hands the answer over on the
// returned channel (an error is put in raw).
func sendAsync(sock string, a userAccount, line string) chan response {
	ch := make(chan response, 1)
	go func() {
		r, err := trySendAs(sock, a.uid, a.gid, []uint32{}, line)
		if err != nil {
			r.raw = err.Error()
		}
		ch <- r
	}()
	return ch
}

// TestRunAsOperatorTypesIntoApprover is the first attack of "Approval
// power": the operator approves with `sudo rootgate approve` in their own
// tmux, and the agent (an account of its own) asks to run a command as
// the operator's account. Once approved, that run types y into the
// operator's pane and approves the agent's next request, for root. The
// operator's account controls that approver, so the run as it is never
// put there: with no other approver it is refused at once.
func TestRunAsOperatorTypesIntoApprover(t *testing.T) {
	t.Parallel()
	op := addAccount(t, "rgpw0op", "--create-home")
	agent := addAccount(t, "rgpw0ag", "--create-home")
	allowSudo(t, op.name, rootgateBin)
	d := approverDaemon(t)
	openToAll(t, d)
	s := startTmux(t, op.name, shellQuote("sudo", "-n", rootgateBin, "approve", "--socket", d.asock()))
	s.see("attached to rootgated")

	// Whenever the operator's pane shows the prompt of request pw0-root,
	// type y into it. The id is split in the script, so that the
	// prompt of this run, which shows the script, does not match.
	script := fmt.Sprintf(`i=0; while [ $i -lt 400 ]; do
  if tmux -S %[1]s capture-pane -p -J -t op | grep -q 'pw0-ro''ot'; then tmux -S %[1]s send-keys -t op y; fi
  sleep 0.1; i=$((i+1))
done`, s.sock)
	runAs := sendAsync(d.Sock, agent, request(map[string]any{"id": "pw0-runas", "run_as": op.name, "timeout": 60,
		"reason": "tidy the operator's home", "pipeline": [][]string{{"sh", "-c", script}}}))

	var r response
	answered := false
	waitFor(t, "the run as the operator to be answered or shown", 30*time.Second, func() bool {
		select {
		case r = <-runAs:
			answered = true
			return true
		default:
			return promptShown(s.screen(), "pw0-runas")
		}
	})
	if answered {
		want := wire.NoEligibleApproverRunAsError(int(op.uid), op.name)
		if r.Status != wire.StatusDenied || r.Message != want.Error() || r.Code != wire.CodeNoEligibleApprover {
			t.Fatalf("the run as the operator: got %s, want denied with %q\nthe pane shows:\n%s", strings.TrimSpace(r.raw), want, s.screen())
		}
		if promptShown(s.screen(), "pw0-runas") {
			t.Fatalf("the operator's pane was shown the run as the operator:\n%s", s.screen())
		}
		return
	}
	// The defence is gone: the operator, told the run is "neither root
	// nor the requester", approves it, and the agent asks for root.
	s.see("n or Esc deny")
	s.sendKeys("y")
	rootReq := sendAsync(d.Sock, agent, request(map[string]any{"id": "pw0-root", "pipeline": [][]string{{"id", "-u"}}}))
	select {
	case r = <-rootReq:
	case r = <-runAs:
		t.Fatalf("the run as the operator was put to the operator's approver, approved and ended: %s", r.raw)
	}
	if r.Status == wire.StatusOK {
		t.Fatalf("the run as the operator typed y into the operator's approver and approved the agent's request for root: %s", r.raw)
	}
	t.Fatalf("the run as the operator was put to the operator's approver (%s)", r.raw)
}

// TestRunAsAdmittedApproverAttaches is the second attack: with
// `rootgated --approver alice`, the agent asks to run as alice a program
// that attaches as an approver and answers y. The run as alice is put to
// root's approver saying that approving it approves root; approved
// anyway, the approver it starts is refused, for it is part of a run.
//
// It is tried with runs in cgroups of their own (the run's cgroup tells)
// and without (--cgroup none: the daemon, their orphans' subreaper, is
// an ancestor of every process of a run); the run's approver starts with
// an empty environment, so the environment tag does not tell.
func TestRunAsAdmittedApproverAttaches(t *testing.T) {
	t.Parallel()
	for i, mode := range []string{"cgroup", "no-cgroup"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var args []string
			if mode == "no-cgroup" {
				args = []string{"--cgroup", "none"}
			}
			runAsAdmittedApprover(t, fmt.Sprintf("rgpw%dal", i+1), fmt.Sprintf("rgpw%dag", i+1), args...)
		})
	}
}

func runAsAdmittedApprover(t *testing.T, aliceName, agentName string, args ...string) {
	alice := addAccount(t, aliceName, "--create-home")
	agent := addAccount(t, agentName, "--create-home")
	d := approverDaemon(t, append([]string{"--approver", alice.name}, args...)...)
	openToAll(t, d)
	a := startApprover(t, d.asock(), 0) // root's, on a terminal only root controls
	a.See("attached to rootgated")

	// `rootgate approve` wants a terminal: script(1) gives it one, and
	// types y and Enter into it (--accessible) every tenth of a second.
	inner := shellQuote(rootgateBin, "approve", "--accessible", "--socket", d.asock())
	runAs := sendAsync(d.Sock, agent, request(map[string]any{"id": "pw1-runas", "run_as": alice.name, "timeout": 60,
		"reason": "check alice's mail", "pipeline": [][]string{
			{"sh", "-c", "i=0; while [ $i -lt 400 ]; do echo y || exit 0; sleep 0.1; i=$((i+1)); done"},
			{"env", "-i", "PATH=/usr/bin:/bin", "TERM=dumb", "script", "-qfec", inner, "/dev/null"},
		}}))
	a.See(fmt.Sprintf("!!! runs as %s, who may approve rootgate requests: approving this approves root", alice.name))
	a.See("pw1-runas")
	a.See("which may approve rootgate requests: it is admitted as an approver: --approver " + alice.name)
	a.See("n or Esc deny")
	a.Key("y") // the operator, warned, approves

	var r response
	answered := false
	waitFor(t, "the run as alice to end, or its approver to attach", 30*time.Second, func() bool {
		select {
		case r = <-runAs:
			answered = true
			return true
		default:
			return strings.Count(d.Stderr.String(), "approver attached") > 1
		}
	})
	if answered {
		if r.Status != wire.StatusOK {
			t.Fatalf("the run as alice: %s", r.raw)
		}
		if want := "an approver cannot attach from inside a rootgate run ("; !strings.Contains(string(r.Stdout), want) {
			t.Fatalf("the run as alice printed %q, want the refusal %q", r.Stdout, want)
		}
		return
	}
	// The defence is gone: the run's approver is attached, and answers
	// the agent's request for root.
	rootReq := sendAsync(d.Sock, agent, request(map[string]any{"id": "pw1-root", "pipeline": [][]string{{"id", "-u"}}}))
	if r = <-rootReq; r.Status == wire.StatusOK {
		t.Fatalf("an approver started by the run as alice approved the agent's request for root: %s", r.raw)
	}
	t.Fatalf("an approver started by the run as alice attached (%s)", r.raw)
}

// TestRunAsApproverAskedAsRoot: with the operator's approver (in their
// tmux) and root's attached, a run as the operator's account is put to
// root's alone, saying that approving it approves root, and a policy
// allow rule for it asks instead. A run as an ordinary service account
// (not an approver, controlling none) is still allowed by its rule, and
// put to the operator when no rule allows it.
func TestRunAsApproverAskedAsRoot(t *testing.T) {
	t.Parallel()
	op := addAccount(t, "rgpw3op", "--create-home")
	svc := addAccount(t, "rgpw3svc", "--system")
	agent := addAccount(t, "rgpw3ag", "--create-home")
	allowSudo(t, op.name, rootgateBin)
	d := startDaemon(t, opts{Policy: fmt.Sprintf("allow privileged,runas=%s id -u\nallow privileged,runas=%s id -u\n", op.name, svc.name),
		Args: []string{"--prompt-timeout", "20s"}})
	openToAll(t, d)
	s := startTmux(t, op.name, shellQuote("sudo", "-n", rootgateBin, "approve", "--socket", d.asock()))
	s.see("attached to rootgated")
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	// The rule for the operator's account does not decide.
	c := sendAs(t, d.Sock, agent.uid, agent.gid, []uint32{}, request(map[string]any{"run_as": op.name, "pipeline": [][]string{{"id", "-u"}}, "check": true}))
	if c.Check != wire.CheckAsk || !strings.Contains(c.Message, "may approve rootgate requests") {
		t.Errorf("check of a run as the operator: %s", c.raw)
	}
	runAs := sendAsync(d.Sock, agent, request(map[string]any{"id": "pw3-runas", "run_as": op.name, "pipeline": [][]string{{"id", "-u"}}}))
	a.See(fmt.Sprintf("!!! runs as %s, who may approve rootgate requests: approving this approves root", op.name))
	a.See("pw3-runas")
	a.See("which may approve rootgate requests: it can control the terminal or session of an approver attached since rootgated started")
	a.See("n or Esc deny")
	if promptShown(s.screen(), "pw3-runas") {
		t.Errorf("the operator's pane shows the run as the operator:\n%s", s.screen())
	}
	a.Key("n")
	if r := <-runAs; r.Status != wire.StatusDenied || r.Code != wire.CodeDeniedByOperator {
		t.Fatalf("the run as the operator, denied by root: %s", r.raw)
	}

	// The service account: its rule allows without asking.
	r := sendAs(t, d.Sock, agent.uid, agent.gid, []uint32{}, request(map[string]any{"run_as": svc.name, "pipeline": [][]string{{"id", "-u"}}}))
	if r.Status != wire.StatusOK || string(r.Stdout) != strconv.Itoa(int(svc.uid))+"\n" {
		t.Fatalf("the run as %s allowed by its rule: %s", svc.name, r.raw)
	}
	// And without a rule it is put to the operator, who approves it.
	ch := sendAsync(d.Sock, agent, request(map[string]any{"id": "pw3-svc", "run_as": svc.name, "pipeline": [][]string{{"id", "-un"}}}))
	s.see("pw3-svc")
	s.see("n or Esc deny")
	if strings.Contains(s.screen(), "who may approve rootgate requests") {
		t.Errorf("the run as %s is said to approve:\n%s", svc.name, s.screen())
	}
	s.sendKeys("y")
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != svc.name+"\n" {
		t.Fatalf("the run as %s approved by the operator: %s", svc.name, r.raw)
	}
}

// TestRunAsApproverGroupAskedAsRoot: with `--approver @GROUP`, a request
// naming that group (run_as_group: the requester's own account with it)
// gets a run that could attach an approver: its prompt says approving it
// approves root, and an allow rule for it asks instead.
func TestRunAsApproverGroupAskedAsRoot(t *testing.T) {
	t.Parallel()
	gid := addGroup(t, "rgpw5grp")
	agent := addAccount(t, "rgpw5ag", "--create-home")
	d := startDaemon(t, opts{Policy: fmt.Sprintf("allow privileged,runas=%s,rungroup=rgpw5grp id -g\n", agent.name),
		Args: []string{"--prompt-timeout", "20s", "--approver", "@rgpw5grp"}})
	openToAll(t, d)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	over := map[string]any{"run_as_group": "rgpw5grp", "pipeline": [][]string{{"id", "-g"}}, "check": true}
	if c := sendAs(t, d.Sock, agent.uid, agent.gid, []uint32{}, request(over)); c.Check != wire.CheckAsk || !strings.Contains(c.Message, "may approve rootgate requests") {
		t.Errorf("check of a run with the approvers' group: %s", c.raw)
	}
	delete(over, "check")
	over["id"] = "pw5-grp"
	ch := sendAsync(d.Sock, agent, request(over))
	a.See(fmt.Sprintf("!!! runs as %s WITH GROUP rgpw5grp (gid %d), who may approve rootgate requests: approving this approves root", agent.name, gid))
	a.See("pw5-grp")
	a.See("which may approve rootgate requests: its group rgpw5grp is admitted as an approver: --approver @rgpw5grp")
	a.See("n or Esc deny")
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied || r.Code != wire.CodeDeniedByOperator {
		t.Fatalf("the run with the approvers' group, denied by root: %s", r.raw)
	}
}

// TestRunAsApproverNoGrantNoRule: from the prompt of a run as an account
// that may approve, the daemon makes neither a standing grant nor a
// policy rule, whatever an approver client sends: each such run is put
// to a person.
func TestRunAsApproverNoGrantNoRule(t *testing.T) {
	t.Parallel()
	alice := addAccount(t, "rgpw6al", "--create-home")
	agent := addAccount(t, "rgpw6ag", "--create-home")
	d := startDaemon(t, opts{Policy: "deny any rgpw6-nothing\n", Args: []string{"--prompt-timeout", "30s", "--approver", alice.name}})
	openToAll(t, d)
	a := attachRaw(t, d)
	ch := sendAsync(d.Sock, agent, request(map[string]any{"id": "pw6-runas", "run_as": alice.name, "pipeline": [][]string{{"id", "-u"}}}))
	p := a.prompt()
	if p.Request == nil || !strings.Contains(p.Request.ApproverPower, "--approver "+alice.name) {
		t.Fatalf("the prompt of a run as alice: %+v", p.Request)
	}
	yes := true
	why := "decision refused: no standing grant for this request: the run as " + alice.name + " may approve rootgate requests, so each one is put to a person, as a request for root"
	for _, c := range []struct {
		m    remote.Message
		want string
	}{
		{remote.Message{Approve: &yes, Grant: 60, GrantRunsAnything: true}, why},
		{remote.Message{Approve: &yes, Rule: "allow privileged,runas=" + alice.name + " id -u", RuleRunsAnything: true},
			remote.ApproverRuleRefused("the run as " + alice.name + " may approve rootgate requests, so each one is put to a person, as a request for root")},
	} {
		m := c.m
		m.Type, m.ID, m.Hash = remote.MsgDecision, p.ID, p.Hash
		a.send(&m)
		if e := a.next(); e.Type != remote.MsgError || e.ID != p.ID || e.Message != c.want {
			t.Fatalf("got %+v, want the error %q", e, c.want)
		}
		pending(t, ch, c.want)
	}
	a.decide(p, true)
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != strconv.Itoa(int(alice.uid))+"\n" {
		t.Fatalf("the run as alice, approved: %s", r.raw)
	}
	// The next one is asked again.
	ch = sendAsync(d.Sock, agent, request(map[string]any{"id": "pw6-again", "run_as": alice.name, "pipeline": [][]string{{"id", "-u"}}}))
	p = promptAfterResults(a)
	if p.ID != "pw6-again" {
		t.Fatalf("got prompt %q, want pw6-again", p.ID)
	}
	a.decide(p, false)
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("the second run as alice, denied: %s", r.raw)
	}
}
