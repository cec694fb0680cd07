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
