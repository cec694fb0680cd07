package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/wire"
)

// TestStdoutBeforeRunEnds: a run's stdout reaches its client while the
// run goes on. The answer line begins, after the progress lines (the
// running one included, though the run wrote within the 5 ms it is held
// for), with the request's id and the stdout written so far, while the
// command still runs (here it waits on a FIFO the test opens only then);
// the line completes once the run is over, and decodes to the answer a
// client always got.
func TestStdoutBeforeRunEnds(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	fifo := filepath.Join(t.TempDir(), "go-on")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	marker := "rg-stream-" + uuid.NewString()[:8]
	killAtEnd(t, marker)
	id := uuid.NewString()
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	line := request(map[string]any{"id": id, "progress": true,
		"pipeline": [][]string{{"sh", "-c", `echo hi; read x <"$1"; echo bye`, marker, fifo}}})
	if _, err := c.Write([]byte(line)); err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()

	// Read until the answer's head and the first stdout ("hi\n") are in.
	head := `{"id":"` + id + `","stdout":"aGkK`
	r := bufio.NewReader(c)
	var got []byte
	for !bytes.Contains(got, []byte(head)) {
		b, err := r.ReadByte()
		if err != nil {
			t.Fatalf("read the answer's beginning: %v (got %q)", err, got)
		}
		got = append(got, b)
	}
	if len(procsWith(marker)) == 0 {
		t.Fatal("the command is no longer running: its stdout came with the end of its run")
	}
	// Before it, progress lines only, the running one among them: it
	// tells the client how long the line may take to complete, which is
	// now the whole run (a line held back is written before the answer
	// begins, not dropped).
	i := bytes.Index(got, []byte(head))
	running := false
	for _, l := range strings.SplitAfter(string(got[:i]), "\n") {
		if l == "" {
			continue
		}
		phase, _, ok := wire.ParseProgress([]byte(l))
		if !ok || !strings.HasSuffix(l, "\n") {
			t.Fatalf("before the answer: %q, not a progress line", l)
		}
		running = running || phase == wire.ProgressRunning
	}
	if !running {
		t.Fatalf("no running line before the answer's beginning: %q", got[:i])
	}

	// Let the run end: the line completes.
	f, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("\n")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	rest, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("read the rest of the answer: %v (got %q)", err, rest)
	}
	answer := string(got[i:]) + rest
	var resp wire.Response
	if err := json.Unmarshal([]byte(answer), &resp); err != nil {
		t.Fatalf("answer %q: %v", answer, err)
	}
	if resp.ID != id || resp.Status != wire.StatusOK || string(resp.Stdout) != "hi\nbye\n" || resp.StdoutTruncated ||
		len(resp.Stages) != 1 || resp.Stages[0].ExitCode != 0 || resp.DecidedBy == nil || resp.Version == "" {
		t.Fatalf("answer %s", answer)
	}
	if extra, _ := io.ReadAll(r); len(extra) != 0 {
		t.Errorf("after the answer: %q", extra)
	}
	waitTrail(t, d.Dir, id, "received decided started finished")
}
