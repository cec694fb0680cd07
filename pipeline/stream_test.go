package pipeline

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// collector is a StdoutTo that keeps what it is given, checking that it
// is called one write at a time; with failAfter > 0, a write that takes
// it past that many bytes fails, and so would every later one.
type collector struct {
	mu        sync.Mutex
	b         bytes.Buffer
	failAfter int
	failed    bool
	after     int // writes made to it after it failed
	busy      bool
	overlap   bool
}

var errSink = errors.New("sink broken")

func (c *collector) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.busy {
		c.overlap = true
	}
	c.busy = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
	}()
	if c.failed {
		c.after++
		return 0, errSink
	}
	if c.failAfter > 0 && c.b.Len()+len(p) > c.failAfter {
		c.failed = true
		return 0, errSink
	}
	return c.b.Write(p)
}

// checkStreamed fails t unless stdout, written to w as it was read, was
// the first min(total, limit) pattern bytes, and the capture counts them
// and hashes them without holding any.
func checkStreamed(t *testing.T, what string, c Capture, w *collector, total, limit int) {
	t.Helper()
	keep := min(total, limit)
	if c.Total != int64(total) || c.Truncated != (total > limit) || c.Len() != keep {
		t.Errorf("%s: Total %d Truncated %v Len %d; want %d %v %d", what, c.Total, c.Truncated, c.Len(), total, total > limit, keep)
	}
	if len(c.Chunks()) != 0 {
		t.Errorf("%s: a streamed stdout holds %d chunks", what, len(c.Chunks()))
	}
	if sum := sha256.Sum256(pattern(keep)); !bytes.Equal(c.SHA256, sum[:]) {
		t.Errorf("%s: SHA256 %x, want that of the %d bytes kept, %x", what, c.SHA256, keep, sum)
	}
	if w.overlap {
		t.Errorf("%s: StdoutTo written by two calls at once", what)
	}
	if w.failAfter == 0 && !bytes.Equal(w.b.Bytes(), pattern(keep)) {
		t.Errorf("%s: StdoutTo got %d bytes, not the first %d written", what, w.b.Len(), keep)
	}
}

// TestStreamSizes: a stdout given to StdoutTo, of every size around the
// stream's buffer sizes and the cap, reaches it exactly as the stage
// wrote it, up to the cap, with Total, Truncated and the hash right;
// stderr is captured as before.
func TestStreamSizes(t *testing.T) {
	t.Parallel()
	const limit = 300001
	sizes := []int{0, 1, 2, 3}
	for _, end := range []int{captureStart, captureStart + captureGrow*captureStart, streamBuf, 3 * streamBuf, limit} {
		sizes = append(sizes, end-1, end, end+1)
	}
	sizes = append(sizes, 4<<20)
	for _, n := range sizes {
		w := &collector{}
		c := helperCmd([]string{"write", "1", fmt.Sprint(n)}, []string{"pass-stderr", fmt.Sprint(n)})
		c.Cap, c.StdoutTo = limit, w
		res := run(t, c)
		checkStreamed(t, fmt.Sprintf("stdout of %d", n), res.Stdout, w, n, limit)
		checkCapture(t, fmt.Sprintf("stderr of %d", n), res.Stages[1].Stderr, n, limit)
	}
}

// TestStreamWriterFails: a StdoutTo whose write fails is not written to
// again, and the run goes on to its end as if it had not: the kept bytes
// are still counted and hashed, the rest thrown away.
func TestStreamWriterFails(t *testing.T) {
	t.Parallel()
	const limit = 1 << 20
	for _, n := range []int{limit - 1, 4 << 20} {
		w := &collector{failAfter: 100 << 10}
		c := helperCmd([]string{"write", "1", fmt.Sprint(n)})
		c.Cap, c.StdoutTo = limit, w
		res := run(t, c)
		checkStage(t, res, 0, 0, "")
		checkStreamed(t, fmt.Sprintf("stdout of %d", n), res.Stdout, w, n, limit)
		if !w.failed || w.after != 0 {
			t.Errorf("stdout of %d: the sink failed %v, then was written %d times more", n, w.failed, w.after)
		}
		if !bytes.Equal(w.b.Bytes(), pattern(w.b.Len())) {
			t.Errorf("stdout of %d: the sink got %d bytes before it failed, not the first written", n, w.b.Len())
		}
	}
}

// cancelOnFirst is a StdoutTo that cancels the run's context once it has
// been given its first bytes, which it keeps.
type cancelOnFirst struct {
	cancel context.CancelFunc
	got    []byte
}

func (c *cancelOnFirst) Write(p []byte) (int, error) {
	c.got = append(c.got, p...)
	c.cancel()
	return len(p), nil
}

// TestStreamBeforeEnd: StdoutTo is given stdout as the stage writes it,
// while the stage is still running: here its first bytes end the run,
// which would otherwise sleep for a minute.
func TestStreamBeforeEnd(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelOnFirst{cancel: cancel}
	c := &Cmd{Argv: [][]string{{"sh", "-c", "echo hi; exec sleep 60"}}, Paths: []string{"/bin/sh"}, StdoutTo: w}
	res, err := c.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Canceled || string(w.got) != "hi\n" {
		t.Fatalf("cancelled %v, stdout %q: want a run ended by its stdout's first bytes, hi", res.Canceled, w.got)
	}
}
