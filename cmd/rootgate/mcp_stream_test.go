package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
)

// TestMCPOutputPastAnswerCap: rootgate mcp reads a run's whole output,
// past the 16 MiB an answer line holds (seq writes 22,888,896 bytes):
// the result counts and hashes every byte, says nothing was cut, and the
// output tool reads a range past 16 MiB, the very end included. Output
// past the server's own bound (MaxOutput) is cut, and the result says so.
// A run still going when execute answers is waited for, as an agent does.
func TestMCPOutputPastAnswerCap(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	c := e.startMCP(t, 0)
	want, err := exec.Command("seq", "1", "3000000").Output()
	if err != nil {
		t.Fatal(err)
	}
	full := string(want)
	_, _, r := c.executeToEnd(t, map[string]any{"argv": []string{"seq", "1", "3000000"}, "reason": "e2e: past 16 MiB"})
	if r.Status != "ok" || r.Stdout == nil || r.Stdout.Bytes != len(full) || r.Stdout.SHA256 != sha(full) || r.Stdout.DaemonTruncated {
		t.Fatalf("result: status %s, stdout %+v; want %d bytes, whole", r.Status, r.Stdout, len(full))
	}
	for _, from := range []int{16<<20 + 1, len(full) - 99} {
		res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "output", Arguments: map[string]any{
			"id": r.ID, "unit": "bytes", "from": from, "count": 100}})
		if err != nil {
			t.Fatal(err)
		}
		var o mcpserver.OutputResult
		structured(t, c.tools["output"], res, &o)
		if o.Text != full[from-1:from-1+100] || o.Total != len(full) {
			t.Errorf("bytes %d to %d: %+v", from, from+99, o)
		}
	}

	over := mcpserver.MaxOutput + 1000
	_, text, r := c.executeToEnd(t, map[string]any{"argv": []string{"head", "-c", strconv.Itoa(over), "/dev/zero"}, "reason": "e2e: past the server's bound"})
	if r.Status != "ok" || r.Stdout == nil || r.Stdout.Bytes != mcpserver.MaxOutput || !r.Stdout.DaemonTruncated ||
		!strings.Contains(text, "stdout was cut: only the first 67108864 bytes were kept") {
		t.Fatalf("result: status %s, stdout %+v\n%s", r.Status, r.Stdout, text)
	}
}

// executeToEnd calls execute, then wait while the answer is pending, as an
// agent does: these runs move tens of megabytes, which may take longer
// than one call's wait under -race on a busy machine.
func (c *mcpClient) executeToEnd(t *testing.T, args map[string]any) (*mcp.CallToolResult, string, mcpserver.Result) {
	t.Helper()
	res, text, r := c.execute(t, args)
	for r.Status == "pending" {
		var err error
		if res, r, err = c.callTool(t, context.Background(), "wait", map[string]any{"id": r.ID, "wait": mcpserver.MaxWait.Seconds()}); err != nil {
			t.Fatal(err)
		}
		if len(res.Content) != 1 {
			t.Fatalf("content: %v", res.Content)
		}
		text = res.Content[0].(*mcp.TextContent).Text
	}
	return res, text, r
}
