package e2e

import (
	"path/filepath"
	"testing"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/internal/daemon"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
)

// The benchmarks below serve requests in-process, from a real socket to a
// real run, with the audit log written and synced as in production and,
// where this machine has a writable cgroup v2, a cgroup per run, so that a
// regression of the request path shows in go test -bench, and a profile
// of it is one flag away (docs/performance.md):
//
//	go test -run '^$' -bench Request -cpuprofile cpu.out ./daemon/
//	go tool pprof -top daemon.test cpu.out

// benchServer is an in-process server as rootgated runs it: an audit log
// in the test's directory, and a cgroup per run where one can be made.
func benchServer(b *testing.B) string {
	b.Helper()
	dir := b.TempDir()
	log, err := audit.Open(filepath.Join(dir, "audit.jsonl"), audit.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { log.Close() })
	cfg := daemon.Config{Audit: log}
	if parent := rgtest.CgroupParent(b); parent != "" {
		cg, err := cgroup.SetupRuns(parent)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cg.Close() })
		cfg.Cgroups = cg
	} else {
		b.Log("no writable cgroup v2 here: runs are contained the fallback way")
	}
	return startServer(b, "allow any\n", cfg).sock
}

// BenchmarkRequestTrue is a ["true"] request: connect, the checks, the
// plan, the audit records, the run, the answer.
func BenchmarkRequestTrue(b *testing.B) {
	sock := benchServer(b)
	tru := [][]string{{"true"}}
	for b.Loop() {
		if r := ask(b, sock, &wire.Outgoing{Pipeline: tru}); r.Status != wire.StatusOK {
			b.Fatalf("answer %+v", r)
		}
	}
}

// BenchmarkRequestPing is a ping: every check, the received record
// synced, and no run.
func BenchmarkRequestPing(b *testing.B) {
	sock := benchServer(b)
	for b.Loop() {
		if r := ask(b, sock, &wire.Outgoing{Action: wire.ActionPing}); r.Status != wire.StatusOK {
			b.Fatalf("answer %+v", r)
		}
	}
}

// BenchmarkRequestParallel is ["true"] from 16 clients at once.
func BenchmarkRequestParallel(b *testing.B) {
	sock := benchServer(b)
	tru := [][]string{{"true"}}
	b.SetParallelism(8) // 16 clients on 2 CPUs
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r := ask(b, sock, &wire.Outgoing{Pipeline: tru}); r.Status != wire.StatusOK {
				b.Errorf("answer %+v", r)
				return
			}
		}
	})
}
