package wire

import (
	"bytes"
	"io"
	"runtime"
	"testing"
	"time"
)

// These tests hold the request path's cost in memory to its shape, not to
// a clock: a fixed number of allocations per request line and per answer,
// and an answer's memory independent of how much output it carries.

// Allocation budgets, with room over what the code needs today (decode
// 179, answer 17): a change that goes past one has added work to every
// request.
const (
	// Decode + CheckTime + EnvPolicy.Check of the protocol's example. The
	// line is read twice (CheckKeys, then the decoder), each time token by
	// token, which is most of the count.
	decodeAllocBudget   = 400
	responseAllocBudget = 40 // WriteResponse of a finished run, whatever its output size
)

func TestRequestAllocs(t *testing.T) {
	line, err := readGolden("request.json")
	if err != nil {
		t.Fatal(err)
	}
	now, _ := time.Parse(time.RFC3339, exampleTime)
	allocs := testing.AllocsPerRun(200, func() {
		r, err := Decode(line)
		if err == nil {
			err = r.CheckTime(now, time.Minute)
		}
		if err == nil {
			err = EnvPolicy(defaultEnvAllow).Check(r.Env)
		}
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%.0f allocations per request line", allocs)
	if allocs > decodeAllocBudget {
		t.Errorf("decoding and checking a request line takes %.0f allocations; the budget is %d", allocs, decodeAllocBudget)
	}
}

// runResponse is the answer to a 3-stage run whose stdout and stderrs are
// size bytes each, held in 1 MiB chunks as the daemon's captures hold
// them.
func runResponse(size int) *Response {
	var out [][]byte
	for left := size; left > 0; left -= 1 << 20 {
		out = append(out, bytes.Repeat([]byte{'x'}, min(left, 1<<20)))
	}
	return &Response{
		ID: "550e8400-e29b-41d4-a716-446655440000", Status: StatusOK, Version: "1.0",
		Stages:       []StageResult{{StderrChunks: out}, {ExitCode: 1, StderrChunks: out, StderrTruncated: true}, {ExitCode: 137, Signal: "SIGKILL", StderrChunks: out}},
		StdoutChunks: out, StdoutTruncated: true,
	}
}

func TestResponseAllocs(t *testing.T) {
	for _, size := range []int{0, 100, 1 << 20, 2<<20 + 1} {
		r := runResponse(size)
		// The count is the same each time: a few runs of the
		// megabyte answers (slow under -race) average as well as 50.
		runs := 50
		if size >= 1<<20 {
			runs = 5
		}
		allocs := testing.AllocsPerRun(runs, func() {
			if err := WriteResponse(io.Discard, r); err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%d-byte streams: %.0f allocations per answer", size, allocs)
		if allocs > responseAllocBudget {
			t.Errorf("%d-byte streams: WriteResponse takes %.0f allocations; the budget is %d", size, allocs, responseAllocBudget)
		}
	}
}

// TestResponseStreams: an answer carrying 4 × 16 MiB of output is encoded
// as it is written, in a buffer of at most 64 KiB, never as one string.
func TestResponseStreams(t *testing.T) {
	r := runResponse(16 << 20)
	var n countWriter
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := WriteResponse(&n, r); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d-byte answer written with %d bytes allocated", n, allocated)
	if n < 4*(16<<20)*4/3 {
		t.Fatalf("answer is %d bytes, shorter than its base64 output", n)
	}
	if allocated > 128<<10 {
		t.Errorf("writing a %d-byte answer allocated %d bytes; want at most 128 KiB (a streaming encoder's buffers)", n, allocated)
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) {
	*c += countWriter(len(p))
	return len(p), nil
}
