package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
	"github.com/rootgate/rootgate/internal/approval/remote"
)

// callTool calls tool and decodes its structured result, checked against
// the tool's output schema.
func (c *mcpClient) callTool(t *testing.T, ctx context.Context, tool string, args map[string]any) (*mcp.CallToolResult, mcpserver.Result, error) {
	t.Helper()
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return nil, mcpserver.Result{}, err
	}
	var r mcpserver.Result
	structured(t, c.tools[tool], res, &r)
	return res, r, nil
}

// TestMCPRunOutlivesCall: a request outlives the tool call that sent it.
// execute answers within --wait with the call's id while a person
// decides; a wait call the client gives up on leaves the run going; wait
// returns the whole output once the run ends; cancel kills a running
// command with its processes.
func TestMCPRunOutlivesCall(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	c := e.startMCP(t, 0, "--wait", "1s", "--progress-interval", "100ms")
	a := attachApprover(t, e.asock)
	marker := e.dir + "/ran"

	// execute answers pending while the prompt waits for the person.
	start := time.Now()
	res, r, err := c.callTool(t, context.Background(), "execute", map[string]any{
		"argv":   []string{"env", "ASKME=1", "sh", "-c", "echo begin; while [ ! -e " + marker + " ]; do sleep 0.05; done; echo end"},
		"reason": "e2e: outlive the call",
	})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("execute took %s with --wait 1s", took)
	}
	if r.Status != mcpserver.StatusPending || res.IsError || r.ID == "" ||
		!strings.Contains(r.Next, `Call wait with {"id": "`+r.ID+`"}`) {
		t.Fatalf("execute before the decision: %+v (isError %v)", r, res.IsError)
	}
	id := r.ID
	prompt := a.next(t)
	if prompt.Type != remote.MsgPrompt || prompt.Request.Reason != "e2e: outlive the call" {
		t.Fatalf("approver got %+v", prompt)
	}
	// The phase may still be "sent" when execute answered on a loaded
	// machine; with the prompt up, wait says a person is asked.
	waitFor(t, "wait to say a person is asked", func() bool {
		_, r, err := c.callTool(t, context.Background(), "wait", map[string]any{"id": id, "wait": 0.2})
		return err == nil && r.Status == mcpserver.StatusPending && r.Phase == mcpserver.PhaseApproval
	})
	yes := true
	a.send(t, &remote.Message{Type: remote.MsgDecision, ID: prompt.ID, Hash: prompt.Hash, Approve: &yes})

	// A wait the client gives up on (its own timeout) cancels nothing.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, _, err = c.callTool(t, ctx, "wait", map[string]any{"id": id, "wait": 30})
	cancel()
	if err == nil {
		t.Fatal("the wait call outlived its client's timeout")
	}
	// The run still goes on: wait says it is running.
	waitFor(t, "wait to say the command runs", func() bool {
		_, r, err := c.callTool(t, context.Background(), "wait", map[string]any{"id": id, "wait": 0.2})
		return err == nil && r.Status == mcpserver.StatusPending && r.Phase == mcpserver.PhaseRunning
	})
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var final mcpserver.Result
	waitFor(t, "the run to finish", func() bool {
		_, final, err = c.callTool(t, context.Background(), "wait", map[string]any{"id": id})
		return err == nil && final.Status != mcpserver.StatusPending
	})
	if final.Status != "ok" || final.ID != id || final.Stdout == nil || final.Stdout.Text != "begin\nend\n" || *final.ExitCode != 0 {
		t.Fatalf("final result %+v", final)
	}
	if m := a.next(t); m.Type != remote.MsgResult || m.ID != prompt.ID {
		t.Errorf("approver got %+v, want the result", m)
	}

	// cancel kills a running command with its processes.
	pidFile := e.dir + "/pid"
	_, r, err = c.callTool(t, context.Background(), "execute", map[string]any{
		"argv":   []string{"sh", "-c", "sleep 300 & echo $! > " + pidFile + "; wait"},
		"reason": "e2e: cancel me",
	})
	if err != nil || r.Status != mcpserver.StatusPending {
		t.Fatalf("execute of a long run: %+v %v", r, err)
	}
	var pid int
	waitFor(t, "the run to write its pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	procDir := fmt.Sprintf("/proc/%d", pid)
	if _, err := os.Stat(procDir); err != nil {
		t.Fatalf("the background sleep is not running: %v", err)
	}
	res, cr, err := c.callTool(t, context.Background(), "cancel", map[string]any{"id": r.ID})
	if err != nil || cr.Status != "error" || !res.IsError || !strings.HasPrefix(cr.Message, "cancelled with the cancel tool") {
		t.Fatalf("cancel: %+v %v", cr, err)
	}
	waitFor(t, "the run's background process to be gone", func() bool {
		_, err := os.Stat(procDir)
		return os.IsNotExist(err)
	})
	// Unknown ids are told apart.
	res, ur, err := c.callTool(t, context.Background(), "wait", map[string]any{"id": "no-such-call"})
	if err != nil || !res.IsError || !strings.Contains(ur.Message, `no call with id "no-such-call" in this session`) {
		t.Errorf("wait for an unknown id: %+v %v", ur, err)
	}
}

// TestMCPSessionEndWithdrawsPending: a request execute left pending
// belongs to the session: when the client closes rootgate mcp's stdin,
// the prompt is withdrawn and rootgate mcp exits 0.
func TestMCPSessionEndWithdrawsPending(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	a := attachApprover(t, e.asock)
	cmd, stdin, stdout := e.startMCPPipes(t, "--wait", "1s")
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "1"}, nil).
		Connect(context.Background(), &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute", Arguments: map[string]any{
		"argv": []string{"env", "ASKME=1", "true"}, "reason": "e2e: left pending"}})
	if err != nil || res.IsError {
		t.Fatalf("execute: %v %+v", err, res)
	}
	prompt := a.next(t)
	if prompt.Type != remote.MsgPrompt || prompt.Request.Reason != "e2e: left pending" {
		t.Fatalf("approver got %+v", prompt)
	}
	// The tool call is over; the prompt is still up. The session ends.
	stdin.Close()
	if m := a.next(t); m.Type != remote.MsgWithdraw || m.ID != prompt.ID || m.Reason != "client went away" {
		t.Errorf("approver got %+v, want the prompt withdrawn", m)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("rootgate mcp exited with %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("rootgate mcp did not exit when its client left")
	}
}
