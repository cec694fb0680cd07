package audit

import (
	"path/filepath"
	"testing"
)

// benchRecord is a started record of a one-stage run, as the daemon
// writes one per run.
func benchRecord() *Record {
	return &Record{Kind: KindStarted, ID: "550e8400-e29b-41d4-a716-446655440000", Run: &Run{
		RunAsUser: "root", Groups: []uint32{0}, Stages: []Stage{{Path: "/usr/bin/true"}}, Cwd: "/", Timeout: "5m0s", DaemonPID: 1,
	}}
}

// BenchmarkAppend is one durable record: encoded, chained, written and
// synced (the started record before a run).
func BenchmarkAppend(b *testing.B) { benchAppend(b, (*Log).Append) }

// BenchmarkAppendLater is one record written without waiting for the
// disk (received, decided, and a run's end).
func BenchmarkAppendLater(b *testing.B) { benchAppend(b, (*Log).AppendLater) }

// BenchmarkAppendAsync is BenchmarkAppend through AppendAsync, waited
// for at once: what the sync in a goroutine of its own adds to a durable
// append (the daemon does other work before it waits, see
// docs/performance.md).
func BenchmarkAppendAsync(b *testing.B) {
	benchAppend(b, func(l *Log, r *Record) error {
		wait, err := l.AppendAsync(r)
		if err != nil {
			return err
		}
		return wait()
	})
}

// benchAppend appends a record with add to a fresh log, b.N times.
func benchAppend(b *testing.B, add func(*Log, *Record) error) {
	l, err := Open(filepath.Join(b.TempDir(), "audit.jsonl"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := add(l, benchRecord()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendParallel is synced records appended by 16 goroutines at
// once, as concurrent runs append their started records: they share
// syncs, so a record costs less than BenchmarkAppend's.
func BenchmarkAppendParallel(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "audit.jsonl"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	b.ReportAllocs()
	b.SetParallelism(8) // 16 goroutines on 2 CPUs
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := l.Append(benchRecord()); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
