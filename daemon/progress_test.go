package daemon_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// lineReader reads a request's answer lines as they come.
type lineReader struct {
	t testing.TB
	c net.Conn
	r *bufio.Reader
}

// open sends a request line (half-closing after it) and returns a reader
// of the lines that come back.
func (d *daemonProc) open(line string) *lineReader {
	d.T.Helper()
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		d.T.Fatal(err)
	}
	d.T.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	if _, err := c.Write([]byte(line)); err != nil {
		d.T.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	return &lineReader{t: d.T, c: c, r: bufio.NewReaderSize(c, 1<<20)}
}

// next returns the next line, or "" at the end of the stream.
func (l *lineReader) next() string {
	l.t.Helper()
	s, err := l.r.ReadString('\n')
	if err != nil && s != "" {
		l.t.Fatalf("partial line %q: %v", s, err)
	}
	return s
}

// wantProgress reads a line and requires it to be the progress line of
// id for phase, saying the answer comes within.
func (l *lineReader) wantProgress(id, phase string, within time.Duration) {
	l.t.Helper()
	line := l.next()
	got, w, ok := wire.ParseProgress([]byte(line))
	want := fmt.Sprintf(`{"id":"%s","progress":"%s","within":%d}`+"\n", id, phase, int(within.Seconds()))
	if !ok || got != phase || w != within || line != want {
		l.t.Fatalf("got %q, want %q", line, want)
	}
}

// wantAnswer reads the answer line, then requires the end of the stream.
func (l *lineReader) wantAnswer() wire.Response {
	l.t.Helper()
	line := l.next()
	var r wire.Response
	if err := json.Unmarshal([]byte(line), &r); err != nil || r.Status == "" {
		l.t.Fatalf("got %q, want an answer line", line)
	}
	if rest := l.next(); rest != "" {
		l.t.Fatalf("more after the answer: %q", rest)
	}
	return r
}

// TestProgressLines: a request that says "progress": true hears that it
// is received, when it is put to a person and when its run starts, before
// the answer, each line saying how long the rest may take (the prompt
// timeout, the run's time limit and the kill grace); one that does not
// gets exactly one line, as in the base protocol.
func TestProgressLines(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "allow any echo ...\nask any\n", Args: []string{"--prompt-timeout", "30s", "--exec-timeout", "100s", "--kill-grace", "3s"}})
	const asking, running = 133 * time.Second, 103 * time.Second

	t.Run("policy allows: running only", func(t *testing.T) {
		l := d.open(request(map[string]any{"id": "pg-allow", "progress": true, "pipeline": [][]string{{"echo", "hi"}}}))
		l.wantProgress("pg-allow", wire.ProgressReceived, asking)
		l.wantProgress("pg-allow", wire.ProgressRunning, running)
		if r := l.wantAnswer(); r.Status != wire.StatusOK || string(r.Stdout) != "hi\n" {
			t.Fatalf("answer %+v", r)
		}
	})
	t.Run("without progress: one line", func(t *testing.T) {
		l := d.open(request(map[string]any{"id": "pg-none", "pipeline": [][]string{{"echo", "hi"}}}))
		if r := l.wantAnswer(); r.Status != wire.StatusOK {
			t.Fatalf("answer %+v", r)
		}
	})
	t.Run("refused: no progress", func(t *testing.T) {
		l := d.open(request(map[string]any{"id": "pg-bad", "progress": true, "pipeline": [][]string{{"echo", "hi"}}, "env": map[string]string{"PATH": "/x"}}))
		if r := l.wantAnswer(); r.Status != wire.StatusError {
			t.Fatalf("answer %+v", r)
		}
	})
	t.Run("a person decides: approval, then running", func(t *testing.T) {
		a := startApprover(t, d.asock(), 0)
		a.See("attached to rootgated")
		l := d.open(request(map[string]any{"id": "pg-ask", "progress": true, "pipeline": [][]string{{"true"}}, "reason": "progress test"}))
		// The approval line comes while the prompt waits for a key.
		l.wantProgress("pg-ask", wire.ProgressReceived, asking)
		l.wantProgress("pg-ask", wire.ProgressApproval, asking)
		a.See("pg-ask")
		a.See("n or Esc deny")
		a.Key("y")
		l.wantProgress("pg-ask", wire.ProgressRunning, running)
		if r := l.wantAnswer(); r.Status != wire.StatusOK {
			t.Fatalf("answer %+v", r)
		}
	})
}
