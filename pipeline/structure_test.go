package pipeline

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"testing"
)

// Structural performance tests (docs/performance.md): no clock, only the
// properties that make a run cheap.

// TestStagesShareKernelPipes: the stages of a run are joined by the pipes
// themselves, handed to each child as its stdout and the next one's stdin.
// os/exec starts no copying goroutine for an *os.File, and the runner keeps
// no end of those pipes for itself, so it cannot read what goes through.
func TestStagesShareKernelPipes(t *testing.T) {
	c := &Cmd{Argv: [][]string{{"a"}, {"b"}, {"c"}}, Paths: []string{"/bin/true", "/bin/true", "/bin/true"}}
	r, err := c.prepare()
	if err != nil {
		t.Fatal(err)
	}
	defer closeAll(r.childEnds)
	defer closeAll(r.parentEnds())
	for i := 1; i < len(r.stages); i++ {
		in, ok := r.stages[i].cmd.Stdin.(*os.File)
		if !ok {
			t.Fatalf("stage %d: stdin is a %T, not a pipe handed to the child", i+1, r.stages[i].cmd.Stdin)
		}
		if _, ok := r.stages[i-1].cmd.Stdout.(*os.File); !ok {
			t.Fatalf("stage %d: stdout is a %T, not a pipe handed to the child", i, r.stages[i-1].cmd.Stdout)
		}
		if !slices.Contains(r.childEnds, in) || slices.Contains(r.parentEnds(), in) {
			t.Errorf("stage %d: its stdin pipe is not the children's alone", i+1)
		}
	}
}

// TestCaptureMemory: two streams of 64 MiB captured at a 16 MiB cap
// allocate the two caps and little more (captureOverhead: the run's own
// bookkeeping), whatever the output size: the capture reads in place into
// chunks it never outgrows, and the rest never reaches the process.
// captureOverhead is what a run capturing two streams may allocate besides
// the kept bytes: 36 KiB on 2026-11-24.
const captureOverhead = 256 << 10

func TestCaptureMemory(t *testing.T) {
	const size, limit = 64 << 20, 16 << 20
	c := helperCmd([]string{"write", "1", "67108864"}, []string{"pass-stderr", "67108864"})
	c.Cap = limit
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := run(t, c)
	runtime.ReadMemStats(&after)
	checkCapture(t, "stdout", res.Stdout, size, limit)
	checkCapture(t, "stderr", res.Stages[1].Stderr, size, limit)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("captured 2 × %d bytes at a %d-byte cap with %d bytes allocated", size, limit, allocated)
	if budget := uint64(2*limit + captureOverhead); allocated > budget {
		t.Errorf("capturing 2 streams at a %d-byte cap allocated %d bytes; want at most %d", limit, allocated, budget)
	}
}

// TestStreamMemory: a run whose 64 MiB of stdout go to StdoutTo
// allocates the stderr's cap and a few buffers, not a cap for stdout.
func TestStreamMemory(t *testing.T) {
	const size, limit = 64 << 20, 16 << 20
	var w countingWriter
	c := helperCmd([]string{"write", "1", fmt.Sprint(size)}, []string{"pass-stderr", fmt.Sprint(size)})
	c.Cap, c.StdoutTo = limit, &w
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res := run(t, c)
	runtime.ReadMemStats(&after)
	checkCapture(t, "stderr", res.Stages[1].Stderr, size, limit)
	if w != limit || res.Stdout.Len() != limit || res.Stdout.Total != size {
		t.Fatalf("stdout: %d bytes streamed, %d kept of %d; want %d of %d", w, res.Stdout.Len(), res.Stdout.Total, limit, size)
	}
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("streamed %d bytes of stdout and captured %d of stderr with %d bytes allocated", limit, limit, allocated)
	if budget := uint64(limit + captureOverhead); allocated > budget {
		t.Errorf("streaming stdout and capturing stderr at a %d-byte cap allocated %d bytes; want at most %d", limit, allocated, budget)
	}
}

type countingWriter int

func (w *countingWriter) Write(p []byte) (int, error) {
	*w += countingWriter(len(p))
	return len(p), nil
}
