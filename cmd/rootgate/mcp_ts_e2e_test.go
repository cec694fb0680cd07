package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"testing"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/testutil"
)

// tsClientDir holds the TypeScript SDK client (client.mjs) and its pinned
// dependencies.
const tsClientDir = "../internal/mcpserver/testdata/tsclient"

// TestMCPTypeScriptClient runs the official MCP TypeScript SDK, as a
// client with a short request timeout, against the real `rootgate mcp` and
// rootgated: every structured result is validated with ajv against the
// published output schemas; a run longer than the client's timeout
// completes with its output; cancel kills the run's process tree; output
// is read back in ranges; progress names the phase. The approval it
// needs comes from a real approver connection, given once the client has
// seen the approval phase.
func TestMCPTypeScriptClient(t *testing.T) {
	t.Parallel()
	node := testutil.NeedTool(t, "node", "nodejs npm")
	if _, err := os.Stat(filepath.Join(tsClientDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		t.Fatalf("the MCP TypeScript SDK client is not installed (%v): the README's test command installs it (npm ci --no-audit --no-fund --prefix cmd/internal/mcpserver/testdata/tsclient, at the repository's root)", err)
	}
	e := startMCPEnv(t)
	a := attachApprover(t, e.asock)
	script, err := filepath.Abs(filepath.Join(tsClientDir, "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(node, script, e.bin, e.sock, e.dir)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})

	// The person decides only once the client was told that it waits
	// for one.
	prompt := a.next(t) // fails the test if none comes in time
	if prompt.Type != remote.MsgPrompt || prompt.Request.Reason != "ts e2e: ask a person" || prompt.Request.Session != "mcp: ts-e2e" {
		t.Fatalf("approver got %+v", prompt)
	}
	waitFor(t, "the client to see the approval phase", func() bool {
		_, err := os.Stat(e.dir + "/saw-approval")
		return err == nil
	})
	yes := true
	a.send(t, &remote.Message{Type: remote.MsgDecision, ID: prompt.ID, Hash: prompt.Hash, Approve: &yes})

	<-exited
	if waitErr != nil {
		t.Fatalf("the TypeScript client failed: %v\n%s", waitErr, out.String())
	}
	t.Logf("the TypeScript client said:\n%s", out.String())
	// The process the client saw cancel kill is gone for us too.
	m := regexp.MustCompile(`cancel killed process (\d+)`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("the client did not report the cancelled process:\n%s", out.String())
	}
	pid, _ := strconv.Atoi(m[1])
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !os.IsNotExist(err) {
		t.Errorf("process %d of the cancelled run still exists", pid)
	}
	if !regexp.MustCompile(`ok: \d+ structured results matched their output schemas`).MatchString(out.String()) {
		t.Errorf("the client did not finish:\n%s", out.String())
	}
}
