package e2e

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// dialRequest connects to d, writes a request built from over, and, when
// halfClose, ends its stream with the line.
func dialRequest(t *testing.T, d *daemonProc, over map[string]any, halfClose bool) *net.UnixConn {
	t.Helper()
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(request(over))); err != nil {
		t.Fatal(err)
	}
	if halfClose {
		if err := c.(*net.UnixConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
	}
	return c.(*net.UnixConn)
}

// wantNoAnswer asserts the daemon closes c without answering.
func wantNoAnswer(t *testing.T, c *net.UnixConn) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 0 {
		t.Fatalf("got %q, %v; want the connection closed without an answer", b, err)
	}
}

// TestEOFWithdraws: on a local connection, a request that says
// eof_withdraws is withdrawn by the end of its stream, its reading side
// still open: while it waits for a person, while it runs, and when the
// stream ends with the line itself.
func TestEOFWithdraws(t *testing.T) {
	t.Parallel()
	t.Run("waiting for a person", func(t *testing.T) {
		d := startDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s"}})
		a := startApprover(t, d.asock(), 0)
		a.See("attached to rootgated")
		c := dialRequest(t, d, map[string]any{"id": "eofw-prompt", "reason": "eofw prompt", "eof_withdraws": true}, false)
		a.See("eofw prompt")
		a.See("Deny")
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		a.See("withdrawn")
		wantNoAnswer(t, c)
		rs := waitTrail(t, d.Dir, "eofw-prompt", "received decided")
		if v := rs[1].Decision.Verdict; v != "withdrawn" {
			t.Fatalf("decided %q, want withdrawn", v)
		}
	})
	t.Run("running", func(t *testing.T) {
		d := startDaemon(t, opts{Args: []string{"--kill-grace", "1s"}})
		marker := fmt.Sprintf("61.%d", 100000+time.Now().Nanosecond()%900000)
		c := dialRequest(t, d, map[string]any{"id": "eofw-run", "pipeline": [][]string{{"sleep", marker}}, "eof_withdraws": true}, false)
		waitFor(t, "the run to start", 20*time.Second, func() bool { return len(procsWith(marker)) > 0 })
		if err := c.CloseWrite(); err != nil {
			t.Fatal(err)
		}
		noSurvivors(t, marker)
		wantNoAnswer(t, c)
		waitTrail(t, d.Dir, "eofw-run", "received decided started cancelled")
	})
	t.Run("ended before its run could start", func(t *testing.T) {
		// One run slot, held by a sleeper: the request waits for it with
		// its stream already ended, so the daemon must see the end before
		// it could start, whichever way the bytes arrive.
		d := startDaemon(t, opts{Args: []string{"--max-runs", "1", "--kill-grace", "1s"}})
		sleeper := fmt.Sprintf("62.%d", 100000+time.Now().Nanosecond()%900000)
		hold := dialRequest(t, d, map[string]any{"id": "eofw-hold", "pipeline": [][]string{{"sleep", sleeper}}}, false)
		waitFor(t, "the slot to be taken", 20*time.Second, func() bool { return len(procsWith(sleeper)) > 0 })
		marker := filepath.Join(shortDir(t), "ran")
		c := dialRequest(t, d, map[string]any{"id": "eofw-line", "pipeline": [][]string{{"touch", marker}}, "eof_withdraws": true}, true)
		rs := waitTrail(t, d.Dir, "eofw-line", "received decided failed")
		if rs[2].Error != "not started: client went away" {
			t.Errorf("failed with %q", rs[2].Error)
		}
		hold.Close() // frees the slot
		noSurvivors(t, sleeper)
		wantNoAnswer(t, c)
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("a request whose stream had ended ran")
		}
		// The same line without the field is answered.
		c = dialRequest(t, d, map[string]any{"id": "eofw-plain", "pipeline": [][]string{{"touch", marker}}}, true)
		wantOK(t, readResponse(t, c))
	})
}
