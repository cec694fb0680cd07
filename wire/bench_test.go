package wire

import (
	"io"
	"testing"
	"time"
)

// BenchmarkDecodeCheck is a request line's decode and checks on the
// daemon's path (docs/performance.md): the protocol's example request.
func BenchmarkDecodeCheck(b *testing.B) {
	line, err := readGolden("request.json")
	if err != nil {
		b.Fatal(err)
	}
	now, _ := time.Parse(time.RFC3339, exampleTime)
	b.ReportAllocs()
	for b.Loop() {
		r, err := Decode(line)
		if err == nil {
			err = r.CheckTime(now, time.Minute)
		}
		if err == nil {
			err = EnvPolicy(defaultEnvAllow).Check(r.Env)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteResponse is the answer of a finished 3-stage run with a
// little output.
func BenchmarkWriteResponse(b *testing.B) {
	r := runResponse(100)
	b.ReportAllocs()
	for b.Loop() {
		if err := WriteResponse(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStdoutStream is a run's 16 MiB of stdout streamed into its
// answer line in reads of a pipe's worth (64 KiB), as the daemon writes
// it (StdoutStream), then the rest of the line.
func BenchmarkStdoutStream(b *testing.B) {
	chunk := make([]byte, 64<<10)
	r := &Response{ID: "550e8400-e29b-41d4-a716-446655440000", Status: StatusOK, Stages: []StageResult{{}}, Version: "v"}
	b.SetBytes(256 * int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		s := NewStdoutStream(io.Discard, r.ID)
		for range 256 {
			if _, err := s.Write(chunk); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Finish(r); err != nil {
			b.Fatal(err)
		}
	}
}
