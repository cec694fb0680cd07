package e2e

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

// TestStreamFrames: a request that says "stream": 1 gets, after its
// progress lines, every byte of its last stage's stdout (here 17,000,000,
// past the 16 MiB an answer line keeps) and of each stage's stderr as
// frames, {"stdout":B64} and {"stderr":B64,"stage":N}, then the usual
// answer line, whose stdout and stderr are empty and flagged as cut
// nowhere; nothing follows it. The audit record counts every byte. The
// same request without the field gets the one answer line, cut at 16 MiB
// and flagged, as ever; a framing version the daemon does not speak is
// refused before anything runs.
func TestStreamFrames(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	const size = 17_000_000
	pipeline := [][]string{{"sh", "-c", "echo e1 >&2; head -c 17000000 /dev/zero"}, {"sh", "-c", "cat; echo e2 >&2"}}
	id := uuid.NewString()
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(120 * time.Second))
	if _, err := c.Write([]byte(request(map[string]any{"id": id, "progress": true, "stream": 1, "pipeline": pipeline}))); err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	r := bufio.NewReaderSize(c, 1<<20)
	stdout := 0
	stderr := map[int]string{}
	var answer string
	for answer == "" {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v (got %q)", err, line)
		}
		if _, _, ok := wire.ParseProgress([]byte(line)); ok {
			if stdout > 0 || len(stderr) > 0 {
				t.Fatalf("progress line %q after a frame", line)
			}
			continue
		}
		f, ok, err := wire.ParseFrame([]byte(line))
		switch {
		case err != nil:
			t.Fatalf("frame %.100q: %v", line, err)
		case !ok:
			answer = line
		case f.Stage == 0:
			if bytes.Count(f.Data, []byte{0}) != len(f.Data) {
				t.Fatalf("stdout frame holds other bytes than zeros: %.100q", line)
			}
			stdout += len(f.Data)
		default:
			stderr[f.Stage] += string(f.Data)
		}
	}
	if stdout != size || stderr[1] != "e1\n" || stderr[2] != "e2\n" || len(stderr) != 2 {
		t.Errorf("frames: %d bytes of stdout, stderr %v; want %d, e1 and e2", stdout, stderr, size)
	}
	var resp wire.Response
	if err := json.Unmarshal([]byte(answer), &resp); err != nil {
		t.Fatalf("answer %q: %v", answer, err)
	}
	if resp.ID != id || resp.Status != wire.StatusOK || len(resp.Stdout) != 0 || resp.StdoutTruncated || len(resp.Stages) != 2 ||
		len(resp.Stages[0].Stderr)+len(resp.Stages[1].Stderr) != 0 || resp.Stages[0].StderrTruncated || resp.Stages[1].StderrTruncated {
		t.Errorf("answer %s", answer)
	}
	if extra, _ := io.ReadAll(r); len(extra) != 0 {
		t.Errorf("after the answer: %q", extra)
	}
	rs := waitTrail(t, d.Dir, id, "received decided started finished")
	if res := rs[3].Result; res.StdoutBytes != size || res.StdoutTruncated || res.Stages[0].StderrBytes != 3 {
		t.Errorf("finished record: %+v", res)
	}

	// Without the field: one line, as ever.
	plain := wantOK(t, d.send(map[string]any{"pipeline": pipeline}))
	if len(plain.Stdout) != wire.MaxCapture || !plain.StdoutTruncated || string(plain.Stages[0].Stderr) != "e1\n" || string(plain.Stages[1].Stderr) != "e2\n" {
		t.Errorf("plain answer: %d bytes of stdout, truncated %v, stages %+v", len(plain.Stdout), plain.StdoutTruncated, plain.Stages)
	}

	for _, v := range []any{2, 0, true, "1", 1.5} {
		r := d.send(map[string]any{"stream": v})
		wantError(t, r, `field "stream" must be 1, the version of the stream framing this daemon speaks`)
		if r.Code != wire.CodeInvalidRequest {
			t.Errorf("stream %v: code %q", v, r.Code)
		}
	}
}

// TestStreamWaitsForPausedReader: a streamed run's client that stops
// reading for longer than --stall-timeout (as a pager left open does)
// holds the run, whose writes wait, instead of being disconnected: once
// it reads again it gets every byte and the answer.
func TestStreamWaitsForPausedReader(t *testing.T) {
	t.Parallel()
	const stall = time.Second
	d := startDaemon(t, opts{Args: []string{"--stall-timeout", stall.String()}})
	marker := "rg-paused-" + uuid.NewString()[:8]
	killAtEnd(t, marker)
	const size = 8 << 20 // more than the socket's and the pipe's buffers
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(120 * time.Second))
	start := time.Now()
	if _, err := c.Write([]byte(request(map[string]any{"progress": true, "stream": 1,
		"pipeline": [][]string{{"sh", "-c", "head -c 8388608 /dev/zero; echo end >&2", marker}}}))); err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	// The run waits on its full pipe, past the stall timeout.
	waitFor(t, "the run to be held past the stall timeout", 60*time.Second, func() bool {
		return time.Since(start) > 3*stall && len(procsWith(marker)) > 0
	})
	r := bufio.NewReaderSize(c, 1<<20)
	stdout, stderr := 0, ""
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read after the pause: %v, after %d bytes of stdout", err, stdout)
		}
		if _, _, ok := wire.ParseProgress([]byte(line)); ok {
			continue
		}
		f, ok, err := wire.ParseFrame([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			resp := response{raw: line}
			if err := json.Unmarshal([]byte(line), &resp.Response); err != nil {
				t.Fatalf("answer %q: %v", line, err)
			}
			wantOK(t, resp)
			break
		}
		if f.Stage == 0 {
			stdout += len(f.Data)
		} else {
			stderr += string(f.Data)
		}
	}
	if stdout != size || stderr != "end\n" {
		t.Errorf("after the pause: %d bytes of stdout, stderr %q", stdout, stderr)
	}
}

// TestStreamedOutputNotHeld: a streamed run printing 64 MiB to stdout and
// 64 MiB to stderr raises the real daemon's peak memory by a few buffers,
// not by any of its output, which goes out as frames as it is read.
func TestStreamedOutputNotHeld(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	pid := d.Cmd.Process.Pid
	wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"true"}}, "stream": 1}))
	idle := vmHWM(t, pid)
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(120 * time.Second))
	if _, err := c.Write([]byte(request(map[string]any{"stream": 1,
		"pipeline": [][]string{{"sh", "-c", "head -c 67108864 /dev/urandom >&2 & head -c 67108864 /dev/urandom; wait"}}}))); err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	r := bufio.NewReaderSize(c, 1<<20)
	got := map[int]int{}
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		f, ok, err := wire.ParseFrame(line)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		got[f.Stage] += len(f.Data)
	}
	if got[0] != 64<<20 || got[1] != 64<<20 {
		t.Fatalf("frames carried %v bytes by stream; want 64 MiB each", got)
	}
	peak := vmHWM(t, pid)
	t.Logf("daemon peak RSS: %d KiB idle, %d KiB after a streamed run printing 64 MiB to stdout and 64 MiB to stderr", idle>>10, peak>>10)
	if peak-idle > rssSlack() {
		t.Errorf("a streamed run printing 128 MiB raised the daemon's peak RSS by %d KiB; want at most %d MiB: its output is held", (peak-idle)>>10, rssSlack()>>20)
	}
}

// TestStreamStopDuringRun: a streamed run the daemon kills as it stops
// sends what it writes while it is killed (here a trap's last line), and
// is answered killed_stopping, as a run that is not streamed is.
func TestStreamStopDuringRun(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	marker := "rg-streamstop-" + uuid.NewString()[:8]
	killAtEnd(t, marker)
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(120 * time.Second))
	if _, err := c.Write([]byte(request(map[string]any{"stream": 1, "pipeline": [][]string{
		{"sh", "-c", `trap 'echo bye; exit 1' TERM; echo out-before; echo err-before >&2; while :; do sleep 0.1; done`, marker}}}))); err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	r := bufio.NewReaderSize(c, 1<<20)
	var stdout, stderr string
	next := func() (wire.Frame, string) {
		t.Helper()
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v (got %q, stdout %q)", err, line, stdout)
		}
		f, ok, err := wire.ParseFrame([]byte(line))
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return wire.Frame{}, line
		}
		if f.Stage == 0 {
			stdout += string(f.Data)
		} else {
			stderr += string(f.Data)
		}
		return f, ""
	}
	for stdout != "out-before\n" || stderr != "err-before\n" {
		if _, answer := next(); answer != "" {
			t.Fatalf("answer %q before the output", answer)
		}
	}
	if !d.Terminate() {
		t.Fatal("daemon did not stop cleanly")
	}
	var answer string
	for answer == "" {
		_, answer = next()
	}
	var resp wire.Response
	if err := json.Unmarshal([]byte(answer), &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Code != wire.CodeKilledStopping || stdout != "out-before\nbye\n" || len(resp.Stages) != 1 || resp.Stages[0].ExitCode != 1 {
		t.Fatalf("answer %s, stdout %q", answer, stdout)
	}
}

// TestStreamCloseStdout: a streaming client whose own reader of stdout is
// gone says so (wire.CloseStdout); the daemon ends the run's stdout as a
// pipe's exited reader ends it: the last stage's writer dies of SIGPIPE,
// the stage goes on (its stderr still comes as frames) and the answer
// comes as ever, with no stdout frame after the line. Without it the
// writer would write until the run's time limit.
func TestStreamCloseStdout(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	pipeline := [][]string{{"sh", "-c", `yes; echo "yes ended: $?" >&2`}}
	if _, err := c.Write([]byte(request(map[string]any{"stream": 1, "pipeline": pipeline}))); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReaderSize(c, 1<<20)
	closed, afterClose, stderr := false, 0, ""
	var answer string
	for answer == "" {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		f, ok, err := wire.ParseFrame([]byte(line))
		switch {
		case err != nil:
			t.Fatalf("frame %.100q: %v", line, err)
		case !ok:
			answer = line
		case f.Stage > 0:
			stderr += string(f.Data)
		case closed:
			afterClose += len(f.Data)
		default:
			if _, err := c.Write([]byte(wire.CloseStdout)); err != nil {
				t.Fatal(err)
			}
			closed = true
		}
	}
	var resp wire.Response
	if err := json.Unmarshal([]byte(answer), &resp); err != nil {
		t.Fatalf("answer %q: %v", answer, err)
	}
	if resp.Status != wire.StatusOK || len(resp.Stages) != 1 || resp.Stages[0].ExitCode != 0 || stderr != "yes ended: 141\n" {
		t.Fatalf("answer %s, stderr %q; want the shell gone on after yes died of SIGPIPE", answer, stderr)
	}
	// Frames already on their way (in the socket's buffers) may come
	// after the line; not a stream of them: yes writes about a GB a
	// second.
	if afterClose > 8<<20 {
		t.Errorf("%d bytes of stdout after the client said its reader was gone", afterClose)
	}
}
