package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
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

// maybeProgress reads a line and, when it is the progress line of id for
// phase (one that comes only when its phase lasted, see progressHold),
// checks it whole (id, phase and within) and reads the next; it returns the line
// it did not take.
func (l *lineReader) maybeProgress(id, phase string, within time.Duration) string {
	l.t.Helper()
	line := l.next()
	if got, _, ok := wire.ParseProgress([]byte(line)); !ok || got != phase {
		return line
	}
	want := fmt.Sprintf(`{"id":"%s","progress":"%s","within":%d}`+"\n", id, phase, int(within.Seconds()))
	if line != want {
		l.t.Fatalf("got %q, want %q", line, want)
	}
	return l.next()
}

// wantAnswer reads the answer line, then requires the end of the stream.
func (l *lineReader) wantAnswer() wire.Response {
	l.t.Helper()
	return l.wantAnswerLine(l.next())
}

// wantAnswerLine requires line to be the answer line, then the end of
// the stream.
func (l *lineReader) wantAnswerLine(line string) wire.Response {
	l.t.Helper()
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
// is put to a person, and that its run started once it has lasted a
// moment (progressHold), before the answer, each line saying how long the
// rest may take (the prompt timeout, the run's time limit and the kill
// grace); that it was received, only if deciding it lasted that moment
// too. One that does not ask gets exactly one line, as in the base
// protocol.
func TestProgressLines(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "allow any echo ...\nallow any cat ...\n", Args: []string{"--prompt-timeout", "30s", "--exec-timeout", "100s", "--kill-grace", "3s"}})
	const asking, running = 133 * time.Second, 103 * time.Second

	t.Run("policy allows a run that lasts: running", func(t *testing.T) {
		// cat waits on the FIFO until the test, having seen the running
		// line, opens it and writes.
		fifo := filepath.Join(shortDir(t), "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		l := d.open(request(map[string]any{"id": "pg-allow", "progress": true, "pipeline": [][]string{{"cat", fifo}}}))
		line := l.maybeProgress("pg-allow", wire.ProgressReceived, asking)
		if got, w, ok := wire.ParseProgress([]byte(line)); !ok || got != wire.ProgressRunning || w != running {
			t.Fatalf("got %q, want the running line", line)
		}
		if err := os.WriteFile(fifo, []byte("hi\n"), 0o600); err != nil {
			t.Fatal(err)
		}
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
	t.Run("a person decides: approval", func(t *testing.T) {
		a := startApprover(t, d.asock(), 0)
		a.See("attached to rootgated")
		l := d.open(request(map[string]any{"id": "pg-ask", "progress": true, "pipeline": [][]string{{"true"}}, "reason": "progress test"}))
		// The approval line comes while the prompt waits for a key.
		line := l.maybeProgress("pg-ask", wire.ProgressReceived, asking)
		if line != fmt.Sprintf(`{"id":"pg-ask","progress":"approval","within":%d}`+"\n", int(asking.Seconds())) {
			t.Fatalf("got %q, want the approval line", line)
		}
		a.See("pg-ask")
		a.See("n or Esc deny")
		a.Key("y")
		if r := l.wantAnswerLine(l.maybeProgress("pg-ask", wire.ProgressRunning, running)); r.Status != wire.StatusOK {
			t.Fatalf("answer %+v", r)
		}
	})
}
