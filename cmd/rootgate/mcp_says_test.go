package main

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
	"github.com/rootgate/rootgate/internal/approval/remote"
)

// checkCall calls the check tool and decodes its structured result,
// checking it against the declared output schema.
func (c *mcpClient) checkCall(t *testing.T, args map[string]any) (*mcp.CallToolResult, string, mcpserver.CheckResult) {
	t.Helper()
	res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "check", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var r mcpserver.CheckResult
	structured(t, c.tools["check"], res, &r)
	return res, res.Content[0].(*mcp.TextContent).Text, r
}

// TestMCPCheckAndNote: the check tool tells allow, ask and deny from the
// real daemon's policy, with the matching rule, and shows nothing to the
// attached approver; a person who then denies the real request writes a
// note that reaches the agent in the result.
func TestMCPCheckAndNote(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	c := e.startMCP(t, 0)
	a := attachApprover(t, e.asock)

	for _, tc := range []struct {
		argv  []string
		check string
		rule  int
	}{
		{[]string{"id"}, "allow", 3},
		{[]string{"env", "ASKME=1", "true"}, "ask", 2},
		{[]string{"rm", "-rf", "/"}, "deny", 1},
	} {
		res, text, r := c.checkCall(t, map[string]any{"argv": tc.argv})
		if res.IsError || r.Status != "ok" || r.Check != tc.check || r.DecidedBy == nil || *r.DecidedBy != *e.rule(tc.rule) {
			t.Errorf("check %v: isError %v, %+v", tc.argv, res.IsError, r)
		}
		if !strings.HasPrefix(text, "check: "+tc.check+": ") || !strings.Contains(text, "matching rule: the policy rule at "+e.rule(tc.rule).Source) {
			t.Errorf("check %v: text %q", tc.argv, text)
		}
	}
	if _, text, r := c.checkCall(t, map[string]any{"argv": []string{"rm", "x"}}); !strings.Contains(r.Next, "do not try to reach the same effect another way") {
		t.Errorf("deny hint: %s", text)
	}

	// The asking check above reached no approver: the first prompt it
	// sees is this request's.
	done := c.executeAsync(t, map[string]any{"argv": []string{"env", "ASKME=1", "true"}, "reason": "e2e: note"})
	p := a.next(t)
	if p.Type != remote.MsgPrompt || p.Request.Reason != "e2e: note" {
		t.Fatalf("approver got %+v, want the prompt of the real request", p)
	}
	no := false
	a.send(t, &remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &no, Note: "use the\x1b[2J staging host"})
	got := <-done
	by := got.r.DecidedBy
	if got.r.Status != "denied" || by == nil || by.By != "person" || by.Approver != "root (uid 0) on e2e" || by.Via != "remote" || by.Note != "use the [2J staging host" {
		t.Fatalf("denied with a note: %+v", got.r)
	}
	if !strings.Contains(got.text, "note from root (uid 0) on e2e: \"use the [2J staging host\"\n") || !strings.Contains(got.r.Next, "wrote a note") {
		t.Errorf("text: %s", got.text)
	}
}

// TestMCPCheckSeesGrant: once a person gave a standing grant for a
// request execute sent (an ask rule's), the check tool says allow for
// exactly that request, naming the grant as execute's result then does,
// and still ask for another; the real daemon's answer, not a guess. (The
// only ask rule of the policy here is for env, a command runner: the
// grant carries its second confirmation.)
func TestMCPCheckSeesGrant(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	c := e.startMCP(t, 0)
	a := attachApprover(t, e.asock)
	argv := []string{"env", "ASKME=1", "echo", "granted"}

	if _, text, r := c.checkCall(t, map[string]any{"argv": argv}); r.Check != "ask" {
		t.Fatalf("check before the grant: %s", text)
	}
	done := c.executeAsync(t, map[string]any{"argv": argv, "reason": "e2e: grant"})
	p := a.next(t)
	if p.Type != remote.MsgPrompt || p.Request.Reason != "e2e: grant" {
		t.Fatalf("approver got %+v, want the prompt of the request", p)
	}
	yes := true
	// env is a command runner: the grant needs its second confirmation.
	a.send(t, &remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 600, GrantRunsAnything: true})
	if got := <-done; got.r.Status != "ok" {
		t.Fatalf("the request the grant was given on: %s", got.text)
	}

	res, text, r := c.checkCall(t, map[string]any{"argv": argv})
	if res.IsError || r.Status != "ok" || r.Check != "allow" || r.DecidedBy == nil || r.DecidedBy.By != "grant" || r.DecidedBy.Grant != "g1" ||
		r.DecidedBy.Approver != "root (uid 0) on e2e" || !strings.Contains(text, "allowed by: standing grant g1 from root (uid 0) on e2e, until ") ||
		!strings.Contains(r.Next, "while the standing grant lasts") {
		t.Fatalf("check of the granted request: isError %v, %+v\n%s", res.IsError, r, text)
	}
	if _, text, r := c.checkCall(t, map[string]any{"argv": []string{"env", "ASKME=1", "echo", "other"}}); r.Check != "ask" {
		t.Fatalf("check of another request: %s", text)
	}
	// execute does what check said: the grant runs it, no one is asked.
	// (The approver is sent results of runs it approved, but no prompt.)
	got := c.executeAsync(t, map[string]any{"argv": argv, "reason": "e2e: granted"})
	msgs := a.msgs
	for {
		select {
		case ans := <-got:
			if ans.r.Status != "ok" || ans.r.DecidedBy == nil || ans.r.DecidedBy.Grant != "g1" {
				t.Fatalf("execute of the granted request: %s", ans.text)
			}
			return
		case m, ok := <-msgs:
			if !ok {
				msgs = nil // the approver's connection ended: wait for the answer
			} else if m.Type == remote.MsgPrompt {
				t.Fatalf("the approver was asked about the granted request: %+v", m)
			}
		}
	}
}

// TestMCPStopDuringRun: when rootgated stops while a command runs, the
// agent is told that the command had started and was killed, with what it
// wrote, and not to assume it did not run.
func TestMCPStopDuringRun(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	c := e.startMCP(t, 0)
	flag := e.dir + "/started"
	argv := []string{"sh", "-c", "echo half-done; touch " + flag + "; exec sleep 60"}
	done := c.executeAsync(t, map[string]any{"argv": argv, "reason": "e2e: stopped"})
	waitFor(t, "the run to start", func() bool { _, err := os.Stat(flag); return err == nil })
	if err := e.daemon.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	got := <-done
	r := got.r
	if !got.res.IsError || r.Status != "error" || !r.KilledStopping || r.Stdout == nil || r.Stdout.Text != "half-done\n" ||
		len(r.Stages) != 1 || r.Stages[0].Signal == "" || r.DecidedBy == nil {
		t.Fatalf("result: %+v", r)
	}
	for _, want := range []string{
		"the command had started when rootgated stopped and killed it; below is what it wrote before\n",
		"half-done\n",
		"Do not assume it did not run",
	} {
		if !strings.Contains(got.text, want) {
			t.Errorf("text lacks %q:\n%s", want, got.text)
		}
	}
}

// TestMCPSaysWhatFailed: through the real daemon, a pipeline whose last
// stage succeeded says in its status line which earlier stage failed, and
// an env refusal names the refused keys and the allowed ones.
func TestMCPSaysWhatFailed(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	c := e.startMCP(t, 0)

	pipe := [][]string{{"sh", "-c", "exit 2"}, {"sh", "-c", "kill -PIPE $$"}, {"true"}}
	res, text, r := c.execute(t, map[string]any{"pipeline": pipe, "reason": "e2e: earlier stage"})
	first, _, _ := strings.Cut(text, "\n")
	if want := "status: ok: approved and run; the last command exited with code 0, but stage 1 exited with code 2 and stage 2 was killed by SIGPIPE (exit code 141)"; first != want || res.IsError || r.Status != "ok" {
		t.Errorf("isError %v, status line %q\nwant %q", res.IsError, first, want)
	}

	_, text, r = c.execute(t, map[string]any{"argv": []string{"id"}, "reason": "e2e: env", "env": map[string]string{"LANG": "C.UTF-8", "LD_PRELOAD": "/x.so", "FOO_RG": "1"}})
	if r.Status != "error" || !strings.Contains(r.Next, "Refused: FOO_RG, LD_PRELOAD. Allowed: LANG, LANGUAGE, LC_*") {
		t.Errorf("env refusal: %s", text)
	}
}
