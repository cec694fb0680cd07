package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
	"github.com/rootgate/rootgate/internal/testutil"
)

// scriptedDaemon is a socket whose every connection is handled by serve;
// it records the request lines it read and notes closed connections.
type scriptedDaemon struct {
	mu     sync.Mutex
	lines  []string
	closed int
}

func (d *scriptedDaemon) closedCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

func startScripted(t *testing.T, serve func(n int, line string, c net.Conn)) (*scriptedDaemon, string) {
	t.Helper()
	sock := testutil.ShortDir(t) + "/s"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	d := &scriptedDaemon{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				line, _ := br.ReadString('\n')
				d.mu.Lock()
				d.lines = append(d.lines, line)
				n := len(d.lines)
				d.mu.Unlock()
				serve(n, line, c)
				// Wait for the client to close its side.
				_, _ = br.ReadString('\n')
				d.mu.Lock()
				d.closed++
				d.mu.Unlock()
			}()
		}
	}()
	return d, sock
}

// TestOlderDaemonWithoutProgress: a rootgated that knows neither the
// stream nor the progress field refuses each before deciding anything;
// the server sends the request again without them, under the same id,
// and the call works, with the output the answer holds.
func TestOlderDaemonWithoutProgress(t *testing.T) {
	d, sock := startScripted(t, func(n int, line string, c net.Conn) {
		var req struct{ ID string }
		_ = json.Unmarshal([]byte(line), &req)
		if strings.Contains(line, `"progress":true`) {
			c.Write([]byte(`{"id":"` + req.ID + `","status":"error","code":"unknown_field","message":"unknown field \"progress\"","version":"0.9"}` + "\n"))
			return
		}
		c.Write([]byte(`{"id":"` + req.ID + `","status":"ok","stages":[{"exit_code":0,"stderr":""}],"stdout":"aGkK","version":"0.9"}` + "\n"))
	})
	cs := connect(t, mcpserver.Config{Socket: sock})
	res := call(t, cs, "execute", json.RawMessage(`{"argv":["echo","hi"],"reason":"older daemon"}`))
	var r mcpserver.Result
	remarshal(t, res.StructuredContent, &r)
	if r.Status != "ok" || r.Stdout == nil || r.Stdout.Text != "hi\n" {
		t.Fatalf("%+v", r)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// Asked with stream and progress, then progress alone, then neither.
	if len(d.lines) != 3 || !strings.Contains(d.lines[0], `"progress":true`) || !strings.Contains(d.lines[0], `"stream":1`) ||
		!strings.Contains(d.lines[1], `"progress":true`) || strings.Contains(d.lines[1], `"stream"`) ||
		strings.Contains(d.lines[2], `"progress"`) || strings.Contains(d.lines[2], `"stream"`) ||
		!strings.Contains(d.lines[2], `"id":"`+r.ID+`"`) {
		t.Errorf("request lines:\n%s", strings.Join(d.lines, ""))
	}
}

// TestSessionEndClosesPending: a request left pending after execute
// answered is withdrawn when the session ends: its daemon connection is
// closed.
func TestSessionEndClosesPending(t *testing.T) {
	d, sock := startScripted(t, func(int, string, net.Conn) {}) // never answers
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(mcpserver.Config{Socket: sock, Wait: 100 * time.Millisecond}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	res := call(t, cs, "execute", json.RawMessage(`{"argv":["id"],"reason":"left pending"}`))
	var r mcpserver.Result
	remarshal(t, res.StructuredContent, &r)
	if r.Status != mcpserver.StatusPending || res.IsError {
		t.Fatalf("%+v", r)
	}
	// A wait cut short by the client leaves the connection open.
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = cs.CallTool(wctx, &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{"id": r.ID, "wait": 5}})
	cancel()
	if err == nil {
		t.Fatal("the wait call outlived its context")
	}
	if res := call(t, cs, "wait", json.RawMessage(`{"id":"`+r.ID+`","wait":0.05}`)); !strings.Contains(text(t, res), "status: pending") {
		t.Fatalf("after a cancelled wait: %s", text(t, res))
	}
	if n := d.closedCount(); n != 0 {
		t.Fatalf("%d connections closed while the session lives", n)
	}
	cs.Close()
	testutil.WaitFor(t, "the pending request's connection to close", 10*time.Second, func() bool { return d.closedCount() == 1 })
}
