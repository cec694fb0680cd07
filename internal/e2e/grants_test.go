package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/daemon"
	"github.com/rootgate/rootgate/wire"
)

// Standing grants: a person at a real `rootgate approve` on a pty gives
// one with g, then y; the requester (the adversary) tries to stretch it
// to another argument, another file behind the same path, an interpreter
// confirmed once, or keys typed before the prompt counted.

// grantIt presses g once the prompt on screen accepts keys, waits for the
// grant to be shown in full and to accept keys, and presses y.
func (a *approverProc) grantIt(ch chan response) {
	a.T.Helper()
	a.notAnsweredKey(ch, "g")
	a.See("STANDING GRANT for 15 min")
	a.See("GRANT: y approve and grant for 15 min")
	a.Key("y")
}

// grants runs `rootgate grants` (as root) with args on the approver
// socket asock.
func grants(t *testing.T, asock string, args ...string) string {
	t.Helper()
	out, err := grantsAs(0, asock, args...)
	if err != nil {
		t.Fatalf("rootgate grants %v: %v\n%s", args, err, out)
	}
	return out
}

// grantsAs runs `rootgate grants` as uid (0, or a user whose group is
// its uid) with args on the approver socket asock.
func grantsAs(uid uint32, asock string, args ...string) (string, error) {
	cmd := exec.Command(rootgateBin, append(append([]string{"grants"}, args...), "--socket", asock)...)
	if len(args) > 0 { // grants revoke ID: flags go before the id
		cmd = exec.Command(rootgateBin, append([]string{"grants", args[0], "--socket", asock}, args[1:]...)...)
	}
	if uid != 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// wantGrant asserts r ran, decided by grant id without asking anyone.
func wantGrant(t *testing.T, r response, id string) {
	t.Helper()
	wantOK(t, r)
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByGrant || r.DecidedBy.Grant != id || !strings.HasPrefix(r.DecidedBy.Approver, "root (uid 0) on ") {
		t.Fatalf("got %s, want decided_by grant %s", r.raw, id)
	}
}

// wantAsked asserts the request on ch is put to the approver (its id
// shows) and denies it there.
func (a *approverProc) wantAsked(ch chan response, id string) {
	a.T.Helper()
	a.See(id)
	a.notAnsweredKey(ch, "n")
	if r := <-ch; r.Status != wire.StatusDenied || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson {
		a.T.Fatalf("%s: got %s, want a person's denial", id, r.raw)
	}
}

func TestGrantFromPrompt(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	run := [][]string{{"echo", "granted-run"}}

	ch := d.ask(map[string]any{"id": "grant-1", "pipeline": run, "privileged": true})
	a.See("grant-1")
	a.notAnsweredKey(ch, "g")
	a.See("STANDING GRANT for 15 min")
	// The grant has a dwell of its own: a y typed as it appears is not
	// its confirmation.
	a.tapY(ch, "a y typed as the grant appeared")
	a.See("GRANT: y approve and grant for 15 min")
	pending(t, ch, "the grant shown, not confirmed")
	a.Key("y")
	r := wantOK(t, <-ch)
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson {
		t.Fatalf("the request the grant was given on: %s", r.raw)
	}
	a.See("approved, with a standing grant for 15 min")

	wantGrant(t, d.send(map[string]any{"id": "grant-2", "pipeline": run, "privileged": true}), "g1")
	wantGrant(t, d.send(map[string]any{"id": "grant-3", "pipeline": run, "privileged": true, "reason": "other words"}), "g1")

	// Anything else about the request asks again.
	for _, c := range []struct {
		id   string
		over map[string]any
	}{
		{"other-arg", map[string]any{"pipeline": [][]string{{"echo", "granted-run", "x"}}, "privileged": true}},
		{"other-env", map[string]any{"pipeline": run, "privileged": true, "env": map[string]string{"LANG": "C"}}},
		{"other-cwd", map[string]any{"pipeline": run, "privileged": true, "cwd": "/tmp"}},
		{"other-stdin", map[string]any{"pipeline": run, "privileged": true, "stdin": "eA=="}},
		{"unprivileged", map[string]any{"pipeline": run, "privileged": false}},
	} {
		c.over["id"] = c.id
		a.wantAsked(d.ask(c.over), c.id)
	}

	list := grants(t, d.asock())
	if !strings.Contains(list, "g1  requester root (uid 0)") || !strings.Contains(list, "uses 2") || !strings.Contains(list, "run:   echo granted-run") {
		t.Fatalf("rootgate grants:\n%s", list)
	}
	if out := grants(t, d.asock(), "revoke", "g1"); out != "revoked g1\n" {
		t.Fatalf("rootgate grants revoke g1: %q", out)
	}
	if list := grants(t, d.asock()); list != "no standing grants\n" {
		t.Fatalf("after revoke, rootgate grants:\n%s", list)
	}
	a.wantAsked(d.ask(map[string]any{"id": "after-revoke", "pipeline": run, "privileged": true}), "after-revoke")

	d.Stop()
	d.VerifyAudit()
	out, err := exec.Command(rootgateBin, "audit", "show", "--file", auditPath(d.Dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("audit show: %v\n%s", err, out)
	}
	for _, want := range []string{"grant_created", "grant_revoked", "g1 given by root on pts/", "g1 revoked by root (uid 0)", "g1, the standing grant of"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("audit show lacks %q:\n%s", want, out)
		}
	}
}

// TestGrantInterpreterNeedsSecondConfirmation: a grant for sh -c … allows
// whatever a later request's identical script does, which is more than a
// command: one y is not enough, the second screen says why.
func TestGrantInterpreterNeedsSecondConfirmation(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	run := [][]string{{"sh", "-c", "echo from-sh"}}

	ch := d.ask(map[string]any{"id": "sh-1", "pipeline": run})
	a.See("sh-1")
	a.grantIt(ch)
	a.See("SECOND CONFIRMATION: this grant allows more than one command")
	a.See("runs sh, which runs whatever its arguments or input say")
	pending(t, ch, "one confirmation of a grant for sh")
	a.See("SECOND CONFIRMATION: y approve and grant it anyway")
	a.Key("n") // back to the request, then deny it
	a.See("y approve ·")
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want denied", r.raw)
	}
	// No grant came of the single confirmation.
	ch = d.ask(map[string]any{"id": "sh-2", "pipeline": run})
	a.See("sh-2")
	a.grantIt(ch)
	a.See("SECOND CONFIRMATION: y approve and grant it anyway")
	a.Key("y")
	wantOK(t, <-ch)
	wantGrant(t, d.send(map[string]any{"id": "sh-3", "pipeline": run}), "g1")
}

// TestGrantFollowsTheFile: a grant is for the file the approver was
// shown, not for its path: a requester that puts another file there, or
// writes into the same one, is asked again.
func TestGrantFollowsTheFile(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	bin := filepath.Join(d.Dir, "tool")
	write := func(path, body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte("#!/bin/sh\necho "+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write(bin, "v1")
	run := [][]string{{bin}}

	ch := d.ask(map[string]any{"id": "file-1", "pipeline": run})
	a.See("file-1")
	a.grantIt(ch)
	// A script of sh's: sh runs it with the request's arguments.
	a.See("is a script run by /bin/sh")
	a.See("SECOND CONFIRMATION: y approve and grant it anyway")
	a.Key("y")
	if r := wantOK(t, <-ch); string(r.Stdout) != "v1\n" {
		t.Fatalf("got %s", r.raw)
	}
	wantGrant(t, d.send(map[string]any{"id": "file-2", "pipeline": run}), "g1")

	// Another file renamed over the path.
	write(bin+".new", "v2")
	if err := os.Rename(bin+".new", bin); err != nil {
		t.Fatal(err)
	}
	a.wantAsked(d.ask(map[string]any{"id": "file-swapped", "pipeline": run}), "file-swapped")
	// The same file (inode) rewritten: put the first one back, grant it,
	// then write into it.
	// This time for the second length offered (d).
	ch = d.ask(map[string]any{"id": "file-3", "pipeline": run})
	a.See("file-3")
	a.notAnsweredKey(ch, "g")
	a.See("GRANT: y approve and grant for 15 min")
	a.Key("d")
	a.See("STANDING GRANT for 1 h")
	a.See("GRANT: y approve and grant for 1 h")
	a.Key("y")
	a.See("SECOND CONFIRMATION: y approve and grant it anyway")
	a.Key("y")
	wantOK(t, <-ch)
	r := d.send(map[string]any{"id": "file-4", "pipeline": run})
	wantGrant(t, r, "g2")
	if ends, err := time.Parse(time.RFC3339, r.DecidedBy.Ends); err != nil || time.Until(ends) < 55*time.Minute || time.Until(ends) > time.Hour {
		t.Fatalf("a grant for 1 h ends at %q", r.DecidedBy.Ends)
	}
	f, err := os.OpenFile(bin, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("#!/bin/sh\necho v3\n")
	f.Close()
	a.wantAsked(d.ask(map[string]any{"id": "file-written", "pipeline": run}), "file-written")
}

// TestGrantKeysDuringDwell: g and y typed while the prompt's dwell runs
// (an operator's fingers still on the keys, or keys meant for something
// else) neither open a grant nor confirm one.
func TestGrantKeysDuringDwell(t *testing.T) {
	d := promptDaemon(t)
	// A dwell every key tapped for tapFor lands in, however loaded the
	// machine.
	a := startApproverArgs(t, d.asock(), 0, "--dwell", "3s")
	a.See("attached to rootgated")
	run := [][]string{{"echo", "dwell-grant"}}

	ch := d.ask(map[string]any{"id": "gd-1", "pipeline": run})
	a.See("gd-1")
	a.See("> Deny")
	at := a.Pos
	// not a wait: keys typed through the whole dwell
	for start := time.Now(); time.Since(start) < tapFor; time.Sleep(50 * time.Millisecond) {
		for _, k := range []string{"g", "y"} {
			if time.Since(start) < tapFor { // every key inside the dwell
				a.Key(k)
			}
		}
	}
	a.notAnswered(ch, "g and y typed during the dwell")
	if strings.Contains(a.Screen.Text()[at:], "STANDING GRANT") {
		t.Fatal("a g typed during the dwell opened a grant")
	}
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want denied", r.raw)
	}
	a.wantAsked(d.ask(map[string]any{"id": "gd-2", "pipeline": run}), "gd-2")
}

// TestInProcessGrantExpires: a grant allows its requests until it ends,
// on the daemon's clock, and not after; the policy's deny rules are read
// before it.
func TestInProcessGrantExpires(t *testing.T) {
	t.Parallel()
	fa := &fakeApprover{answer: func(context.Context, *approval.Prompt) approval.Decision {
		return approval.Decision{Verdict: approval.Allow, By: "fake", Grant: 10 * time.Minute}
	}}
	var b approval.Broker
	b.Attach(&approval.Member{UID: 0, Name: "root on fake", Approver: fa})
	p := startFaked(t, "deny any echo denied\nask any\n", &b, daemon.Config{})
	run := [][]string{{"echo", "expires"}}

	wantOK(t, p.send(map[string]any{"id": "ex-1", "pipeline": run}))
	p.clock.add(10*time.Minute - time.Second)
	r := wantOK(t, p.send(map[string]any{"id": "ex-2", "pipeline": run}))
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByGrant || r.DecidedBy.Ends != "2026-02-13T14:40:00Z" {
		t.Fatalf("just before the end: %s", r.raw)
	}
	p.clock.add(time.Second)
	r = wantOK(t, p.send(map[string]any{"id": "ex-3", "pipeline": run}))
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson {
		t.Fatalf("at the end: %s", r.raw)
	}
	if got := strings.Join(fa.asked(), " "); got != "ex-1 ex-3" {
		t.Fatalf("approver asked %s, want ex-1 ex-3", got)
	}
}

// TestGrantDecisionChecks: the daemon's own checks of a grant an approver
// client sends, whatever its prompt did: only with an approval, at most
// 8 h, and for an interpreter only with grant_runs_anything. And the
// list shows an approver only the grants of requesters it may be asked
// about, while any admitted approver may revoke.
func TestGrantDecisionChecks(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "30s", "--approver", "nobody"}})
	a := attachRaw(t, d)
	run := [][]string{{"sh", "-c", "echo raw-grant"}}
	ch := d.ask(map[string]any{"id": "raw-1", "pipeline": run})
	p := a.prompt()
	yes, no := true, false
	for _, c := range []struct {
		m    remote.Message
		want string
	}{
		{remote.Message{Approve: &no, Grant: 60}, remote.ApproverGrantOnDeny},
		{remote.Message{Approve: &yes, Grant: 8*3600 + 1, GrantRunsAnything: true}, remote.ApproverGrantDuration(8*3600+1, 8*3600)},
		{remote.Message{Approve: &yes, Grant: -5, GrantRunsAnything: true}, remote.ApproverGrantDuration(-5, 8*3600)},
		{remote.Message{Approve: &yes, Grant: 60}, remote.ApproverGrantRunsAnything},
	} {
		m := c.m
		m.Type, m.ID, m.Hash = remote.MsgDecision, p.ID, p.Hash
		a.send(&m)
		if e := a.next(); e.Type != remote.MsgError || e.ID != p.ID || e.Message != c.want {
			t.Fatalf("got %+v, want the error %q", e, c.want)
		}
		pending(t, ch, c.want)
	}
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 60, GrantRunsAnything: true})
	wantOK(t, <-ch)
	wantGrant(t, d.send(map[string]any{"id": "raw-2", "pipeline": run}), "g1")

	// A grant to nobody's requests, which an approver nobody controls
	// gives.
	line := request(map[string]any{"id": "raw-nobody", "pipeline": [][]string{{"echo", "nobody-grant"}}})
	chN := make(chan response, 1)
	openToAll(t, d)
	go func() {
		r, err := trySendAs(d.Sock, 65534, 65534, []uint32{}, line)
		if err != nil {
			r.raw = err.Error()
		}
		chN <- r
	}()
	p = promptAfterResults(a)
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 60})
	wantOK(t, <-chN)

	all := grants(t, d.asock())
	if !strings.Contains(all, "g1  requester root") || !strings.Contains(all, "g2  requester nobody") || strings.Contains(all, "more for requesters") {
		t.Fatalf("root's rootgate grants:\n%s", all)
	}
	// nobody, an admitted approver, is never asked about its own
	// requests: it does not see their grant either.
	out, err := grantsAs(65534, d.asock())
	if err != nil || !strings.Contains(out, "g1  requester root") || strings.Contains(out, "g2") || !strings.Contains(out, "1 more for requesters you are never asked about") {
		t.Fatalf("nobody's rootgate grants (%v):\n%s", err, out)
	}
	if out, err := grantsAs(65534, d.asock(), "revoke", "g1"); err != nil || out != "revoked g1\n" {
		t.Fatalf("nobody revoking g1 (%v): %s", err, out)
	}
	if out, err := grantsAs(0, d.asock(), "revoke", "g9"); err == nil || !strings.Contains(out, `revoke refused: no standing grant "g9"`) {
		t.Fatalf("revoking g9 (%v): %s", err, out)
	}
	ch = d.ask(map[string]any{"id": "raw-3", "pipeline": run})
	p = promptAfterResults(a)
	if p.ID != "raw-3" {
		t.Fatalf("got a prompt for %s", p.ID)
	}
	a.decide(p, false)
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("after g1 was revoked: %s", r.raw)
	}
}

// promptAfterResults waits for the next prompt, past the result lines of
// runs a approved.
func promptAfterResults(a *rawApprover) *remote.Message {
	a.t.Helper()
	for {
		m := a.next()
		if m.Type != remote.MsgResult {
			if m.Type != remote.MsgPrompt {
				a.t.Fatalf("got %+v, want a prompt", m)
			}
			return m
		}
	}
}

// TestGrantPolicyDenyWins: a deny rule put in force after a grant was
// given (the policy reloaded on SIGHUP) denies the granted request: the
// policy's deny rules are read before grants.
func TestGrantPolicyDenyWins(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := attachRaw(t, d)
	run := [][]string{{"echo", "deny-wins"}}
	ch := d.ask(map[string]any{"id": "dw-1", "pipeline": run})
	p := a.prompt()
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 600})
	wantOK(t, <-ch)
	wantGrant(t, d.send(map[string]any{"id": "dw-2", "pipeline": run}), "g1")

	d.writePolicy("deny any echo deny-wins\nask any\n")
	d.hup()
	d.waitReloads(1)
	r := d.send(map[string]any{"id": "dw-3", "pipeline": run})
	if r.Status != wire.StatusDenied || r.Code != wire.CodeDeniedByPolicy || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPolicy {
		t.Fatalf("got %s, want denied by the policy", r.raw)
	}
}

// TestCheckSeesGrant: a check request answers what the daemon would do
// with the request now, grants included: a standing grant the requester
// holds for exactly this request is allow, named as the real run names
// it (decided_by grant, its id), under an ask rule too; a request the
// grant does not cover is still ask. A check counts no use of the grant.
// As in the real decision, a policy allow rule decides before the grant,
// and a deny rule put in force after the grant denies.
func TestCheckSeesGrant(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := attachRaw(t, d)
	run := [][]string{{"echo", "check-sees-grant"}}
	ch := d.ask(map[string]any{"id": "csg-given", "pipeline": run})
	p := a.prompt()
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 600})
	wantOK(t, <-ch)

	check := func(id string, over map[string]any) response {
		t.Helper()
		over["id"], over["check"] = id, true
		if over["pipeline"] == nil {
			over["pipeline"] = run
		}
		r := wantOK(t, d.send(over))
		if r.HasRun() {
			t.Fatalf("%s: a check ran the command: %s", id, r.raw)
		}
		return r
	}
	r := check("csg-check", map[string]any{})
	if r.Check != wire.CheckAllow || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByGrant || r.DecidedBy.Grant != "g1" ||
		!strings.HasPrefix(r.DecidedBy.Approver, "root (uid 0) on ") || r.DecidedBy.Ends == "" || !strings.Contains(r.Message, "standing grant g1 ") {
		t.Fatalf("check of the granted request: got %s, want allow by grant g1", r.raw)
	}
	for id, over := range map[string]map[string]any{
		"csg-other-arg":   {"pipeline": [][]string{{"echo", "check-sees-grant", "x"}}},
		"csg-other-stdin": {"stdin": "eA=="},
		"csg-other-cwd":   {"cwd": "/tmp"},
	} {
		if r := check(id, over); r.Check != wire.CheckAsk || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPolicy {
			t.Fatalf("%s: got %s, want ask (the ask rule)", id, r.raw)
		}
	}
	if list := grants(t, d.asock()); !strings.Contains(list, "uses 0") {
		t.Fatalf("after checks only, rootgate grants:\n%s", list)
	}
	// The run the check announced: decided by the same grant.
	wantGrant(t, d.send(map[string]any{"id": "csg-run", "pipeline": run}), "g1")

	// An allow rule decides before the grant, in a check as in a run.
	d.writePolicy("allow any echo check-sees-grant\n")
	d.hup()
	d.waitReloads(1)
	if r := check("csg-allow-rule", map[string]any{}); r.Check != wire.CheckAllow || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPolicy {
		t.Fatalf("check under an allow rule: got %s, want allow by the policy", r.raw)
	}
	if r := wantOK(t, d.send(map[string]any{"id": "csg-allow-run", "pipeline": run})); r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPolicy {
		t.Fatalf("run under an allow rule: got %s, want decided by the policy", r.raw)
	}
	// A deny rule wins over the grant.
	d.writePolicy("deny any echo check-sees-grant\nask any\n")
	d.hup()
	d.waitReloads(2)
	if r := check("csg-deny-rule", map[string]any{}); r.Check != wire.CheckDeny || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPolicy {
		t.Fatalf("check under a deny rule: got %s, want deny by the policy", r.raw)
	}
	if list := grants(t, d.asock()); !strings.Contains(list, "uses 1") {
		t.Fatalf("after one run by the grant, rootgate grants:\n%s", list)
	}
}

// TestGrantRefusedForRequestersInterpreter: a privileged run of a script
// whose interpreter the requester may change (its own file, found by its
// path when the run starts, not through the pinned script) gets no
// standing grant. Granted once, the requester put another program at the
// interpreter's path and the same request ran it as root, unasked. The
// daemon refuses the grant, saying why, and a later request is put to a
// person again.
func TestGrantRefusedForRequestersInterpreter(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rggiag")
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	agentDir := filepath.Join(dir, "agent")
	if err := os.Mkdir(agentDir, 0o755); err != nil {
		t.Fatal(err)
	}
	interp, script := filepath.Join(agentDir, "interp"), filepath.Join(agentDir, "job")
	for p, text := range map[string]string{interp: "#!/bin/sh\necho benign\n", script: "#!" + interp + "\n"} {
		if err := os.WriteFile(p, []byte(text), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{agentDir, interp, script} {
		if err := os.Chown(p, int(ag.uid), int(ag.gid)); err != nil {
			t.Fatal(err)
		}
	}
	d := promptDaemon(t)
	openToAll(t, d)
	a := attachRaw(t, d)
	ask := func(id string) chan response {
		ch := make(chan response, 1)
		go func() {
			r, err := trySendAs(d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"id": id, "pipeline": [][]string{{script}}}))
			if err != nil {
				r.raw = err.Error()
			}
			ch <- r
		}()
		return ch
	}
	ch := ask("rggi-1")
	p := a.prompt()
	if !strings.Contains(p.Request.NoGrant, "the interpreter of "+script) {
		t.Errorf("the prompt does not say why no grant: %q", p.Request.NoGrant)
	}
	// The person approving once is warned too: what runs is not all shown.
	if txt := approval.Render(p.Request); !strings.Contains(txt, "WARNING:     the interpreter of "+script) {
		t.Errorf("the prompt does not warn of the interpreter:\n%s", txt)
	}
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 600, GrantRunsAnything: true})
	if m := a.next(); m.Type != remote.MsgError || !strings.HasPrefix(m.Message, "decision refused: no standing grant for this request: the interpreter of "+script) {
		t.Fatalf("got %+v, want the grant refused", m)
	}
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes})
	if r := wantOK(t, <-ch); string(r.Stdout) != "benign\n" {
		t.Fatalf("stdout %q", r.Stdout)
	}
	// The interpreter swapped: the same request is a person's to decide.
	if err := os.WriteFile(interp, []byte("#!/bin/sh\necho PWNED as $(id -u)\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ch = ask("rggi-2")
	p = promptAfterResults(a)
	if p.ID != "rggi-2" {
		t.Fatalf("prompt %q, want rggi-2", p.ID)
	}
	no := false
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &no})
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want denied by the person", r.raw)
	}
}
