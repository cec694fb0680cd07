package daemon

import (
	"os"
	"testing"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// BenchmarkPlan is check 9 for a privileged ["true"]: the run-as account,
// the cwd held open, the executable resolved and pinned, the environment
// (docs/performance.md).
func BenchmarkPlan(b *testing.B) {
	s, err := New(Config{RuntimeDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	line := []byte(`{"id":"550e8400-e29b-41d4-a716-446655440000","time":"` + time.Now().UTC().Format(time.RFC3339) + `","pipeline":[["true"]],"cwd":"/"}`)
	req, err := wire.Decode(line)
	if err != nil {
		b.Fatal(err)
	}
	peer := peerInfo{UID: os.Getuid(), GID: os.Getgid(), PID: os.Getpid()}
	b.ReportAllocs()
	for b.Loop() {
		p, err := s.plan(req, peer)
		if err != nil {
			b.Fatal(err)
		}
		p.close()
	}
}
