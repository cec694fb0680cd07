package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

// streamAnswers are the answers a stream's rest is tried with: every
// field a run's answer may have.
var streamAnswers = []Response{
	{ID: "i", Status: StatusOK, Stages: []StageResult{{}}, Version: "v"},
	{ID: "550e8400-e29b-41d4-a716-446655440000", Status: StatusOK, Version: "v0.1.0",
		Stages:          []StageResult{{ExitCode: 0, Stderr: []byte("warn\n")}, {ExitCode: 137, Signal: "SIGKILL", Stderr: []byte{0xff, 0, 1}, StderrTruncated: true}},
		StdoutTruncated: true,
		Usage:           &Usage{CPUUsec: 3, UserUsec: 2, SystemUsec: 1, MemoryPeak: new(int64(4096))},
		DecidedBy:       &DecidedBy{By: DecidedByPolicy, Rule: "allow any <&>", Source: "/etc/rootgate/policy:1"}},
	{ID: "id \"quoted\" \u2028", Status: StatusTimeout, Code: CodeRunTimeout, Message: "run exceeded its time limit of 5s", Version: "v",
		Stages:    []StageResult{{ExitCode: 143, Signal: "SIGTERM", StderrChunks: [][]byte{[]byte("a"), []byte("bc")}}},
		DecidedBy: &DecidedBy{By: DecidedByPerson, Approver: "root (uid 0) on pts/3", Via: "remote"}},
	{ID: "k", Status: StatusError, Code: CodeKilledStopping, Message: ErrKilledStopping.Error(), Version: "v",
		Stages: []StageResult{{ExitCode: 137, Signal: "SIGKILL"}}, StdoutTruncated: true},
}

// streamed writes out through a StdoutStream in pieces of the lengths
// cuts gives (cycled; 0 is an empty write), then finishes it with r. It
// returns the line, and what had been written before Finish.
func streamed(t testing.TB, r *Response, out, cuts []byte) (line, early []byte) {
	t.Helper()
	var b bytes.Buffer
	s := NewStdoutStream(&b, r.ID)
	if bytes.Count(cuts, []byte{0}) == len(cuts) {
		cuts = nil // no cut but empty ones: one write
	}
	for i, p := 0, out; len(p) > 0; i++ {
		n := len(p)
		if len(cuts) > 0 {
			n = min(int(cuts[i%len(cuts)]), len(p))
		}
		if k, err := s.Write(p[:n]); k != n || err != nil {
			t.Fatalf("Write of %d bytes: %d, %v", n, k, err)
		}
		p = p[n:]
	}
	early = bytes.Clone(b.Bytes())
	if err := s.Finish(r); err != nil {
		t.Fatal(err)
	}
	return b.Bytes(), early
}

// decoded is line decoded as a client decodes it, with an empty stdout or
// stderr made nil: json.Marshal leaves an empty stdout out, and the
// daemon's lines write it "".
func decoded(t testing.TB, line []byte) Response {
	t.Helper()
	var r Response
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("%q: %v", line, err)
	}
	if len(r.Stdout) == 0 {
		r.Stdout = nil
	}
	for i := range r.Stages {
		if len(r.Stages[i].Stderr) == 0 {
			r.Stages[i].Stderr = nil
		}
	}
	return r
}

// checkStreamed: the line a stream writes of out and r is one line that
// decodes to what json.Marshal of the whole answer (out as its stdout)
// decodes to, and to what WriteResponse's line does; stdout began to be
// written before Finish when there were three bytes or more to encode.
func checkStreamed(t *testing.T, r *Response, out, cuts []byte) {
	t.Helper()
	line, early := streamed(t, r, out, cuts)
	if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
		t.Fatalf("not one line: %q", line)
	}
	old := *r
	old.Stages = make([]StageResult, len(r.Stages))
	for i, st := range r.Stages {
		old.Stages[i] = st
		old.Stages[i].Stderr = append(bytes.Clone(st.Stderr), bytes.Join(st.StderrChunks, nil)...)
		old.Stages[i].StderrChunks = nil
	}
	old.Stdout = out
	marshalled, err := json.Marshal(&old)
	if err != nil {
		t.Fatal(err)
	}
	var written bytes.Buffer
	if err := WriteResponse(&written, &old); err != nil {
		t.Fatal(err)
	}
	got, want := decoded(t, line), decoded(t, marshalled)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("streamed line decodes to\n%+v\nwant (json.Marshal's)\n%+v\nline %q", got, want, line)
	}
	if w := decoded(t, written.Bytes()); !reflect.DeepEqual(got, w) {
		t.Fatalf("streamed line decodes to\n%+v\nWriteResponse's to\n%+v", got, w)
	}
	head := `{"id":` + string(mustJSON(t, r.ID)) + `,"stdout":"`
	switch {
	case len(out) < 3 && len(early) != 0:
		t.Fatalf("%d bytes of stdout wrote %q before Finish; want nothing", len(out), early)
	case len(out) < 3 && !bytes.Equal(line, written.Bytes()):
		t.Fatalf("%d bytes of stdout: line %q, want WriteResponse's %q", len(out), line, written.Bytes())
	case len(out) >= 3 && !bytes.HasPrefix(early, []byte(head)):
		t.Fatalf("%d bytes of stdout wrote %q before Finish; want the head %s and stdout", len(out), early, head)
	case len(out) >= 3 && len(early) != len(head)+len(out)/3*4:
		t.Fatalf("%d bytes of stdout wrote %d bytes before Finish; want the head and %d", len(out), len(early), len(out)/3*4)
	case !bytes.HasPrefix(line, early):
		t.Fatal("the line does not begin with what was written before Finish")
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStdoutStream(t *testing.T) {
	big := make([]byte, 300<<10)
	for i := range big {
		big[i] = byte(i*7 + i>>9)
	}
	for _, out := range [][]byte{nil, {0}, {1, 2}, {1, 2, 3}, []byte("hi\n"), []byte("hello"), []byte("\"\\\n\x00<>&\u2028"), big[:64<<10], big} {
		for _, cuts := range [][]byte{nil, {1}, {2}, {3}, {0, 1, 0, 5}, {255, 4}, {2, 1, 7}} {
			for i := range streamAnswers {
				checkStreamed(t, &streamAnswers[i], out, cuts)
			}
		}
	}
}

// TestStdoutStreamFinishWritesStdout: a Finish given stdout of its own
// writes it after the bytes streamed.
func TestStdoutStreamFinishWritesStdout(t *testing.T) {
	r := streamAnswers[1]
	r.Stdout, r.StdoutChunks = []byte("de"), [][]byte{[]byte("f"), nil, []byte("ghij")}
	for _, first := range []string{"", "a", "abc"} {
		var b bytes.Buffer
		s := NewStdoutStream(&b, r.ID)
		s.Write([]byte(first))
		if err := s.Finish(&r); err != nil {
			t.Fatal(err)
		}
		if got := decoded(t, b.Bytes()); string(got.Stdout) != first+"defghij" {
			t.Errorf("stdout %q, want %q", got.Stdout, first+"defghij")
		}
	}
}

func FuzzStdoutStream(f *testing.F) {
	f.Add([]byte("hi\n"), []byte{}, uint8(0))
	f.Add([]byte{0xff, 0xfe, 0, 1, 2}, []byte{1, 0, 2}, uint8(1))
	f.Add([]byte(strings.Repeat("abc", 100)), []byte{7, 1}, uint8(2))
	f.Fuzz(func(t *testing.T, out, cuts []byte, which uint8) {
		checkStreamed(t, &streamAnswers[int(which)%len(streamAnswers)], out, cuts)
	})
}

// failWriter takes ok bytes, then fails every write.
type failWriter struct {
	bytes.Buffer
	ok int
}

var errBroken = errors.New("broken pipe")

func (w *failWriter) Write(p []byte) (int, error) {
	if w.Len()+len(p) > w.ok {
		n, _ := w.Buffer.Write(p[:w.ok-w.Len()])
		return n, errBroken
	}
	return w.Buffer.Write(p)
}

// TestStdoutStreamWriteFails: once a write fails, the stream writes
// nothing more, and says so from then on.
func TestStdoutStreamWriteFails(t *testing.T) {
	w := &failWriter{ok: 100}
	s := NewStdoutStream(w, "x")
	if _, err := s.Write(bytes.Repeat([]byte{'a'}, 60)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Write(bytes.Repeat([]byte{'a'}, 60)); !errors.Is(err, errBroken) {
		t.Fatalf("write past what the writer takes: %v", err)
	}
	n := w.Len()
	if _, err := s.Write([]byte("abc")); !errors.Is(err, errBroken) {
		t.Fatalf("write after the failure: %v", err)
	}
	if err := s.Finish(&streamAnswers[0]); !errors.Is(err, errBroken) {
		t.Fatalf("Finish after the failure: %v", err)
	}
	if w.Len() != n || !s.Begun() {
		t.Fatalf("%d bytes written after the failure", w.Len()-n)
	}
}

// TestStdoutStreamMemory: streaming 16 MiB of stdout into an answer
// allocates a buffer or two, not the output.
func TestStdoutStreamMemory(t *testing.T) {
	chunk := bytes.Repeat([]byte{'x'}, 64<<10+1) // reads of a pipe's worth, 3-byte groups split
	r := runResponse(1 << 20)
	r.StdoutChunks = nil
	var n countWriter
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := NewStdoutStream(&n, r.ID)
	for range 256 {
		if _, err := s.Write(chunk); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Finish(r); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d-byte answer, 16 MiB of it streamed, written with %d bytes allocated", n, allocated)
	if allocated > 256<<10 {
		t.Errorf("streaming 16 MiB of stdout allocated %d bytes; want at most 256 KiB", allocated)
	}
}
