package audit

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"
)

// TestUnfinished: the runs a gone daemon started and never ended are
// listed, once each, from its opened record on; a live daemon's runs, the
// caller's own, and those before the gone daemon's start are not.
func TestUnfinished(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const older, gone, live, self = 101, 102, 103, 104
	add := func(r *Record) {
		t.Helper()
		if err := l.AppendLater(r); err != nil {
			t.Fatal(err)
		}
	}
	opened := func(pid int) { add(&Record{Kind: KindOpened, Daemon: &Daemon{PID: pid}}) }
	started := func(id string, pid int) { add(&Record{Kind: KindStarted, ID: id, Run: &Run{DaemonPID: pid}}) }
	opened(older)
	started("before-gone", older) // the gone daemon's start looked at it
	opened(live)
	opened(gone)
	started("ended", gone)
	started("live", live)
	started("lost-1", gone)
	add(&Record{Kind: KindFinished, ID: "ended"})
	// Enough records that the file's end is read in more than one window.
	for i := range 3000 {
		add(&Record{Kind: KindReceived, ID: fmt.Sprint("filler-", i)})
	}
	started("lost-2", gone)
	started("orphaned", gone)
	opened(self)
	add(&Record{Kind: KindOrphaned, ID: "orphaned"})
	started("mine", self)
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	alive := func(pid int) bool { return pid == live || pid == self }
	got, err := Unfinished(path, self, alive)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"lost-1", "lost-2"}; !slices.Equal(got, want) {
		t.Fatalf("Unfinished: %q, want %q", got, want)
	}
}

// TestCommitConcurrent: Commit from many goroutines at once, with appends
// in between, returns for each with every record in a file that verifies.
func TestCommitConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, Options{MaxSize: 8192})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 25 {
				if err := l.AppendLater(&Record{Kind: KindFinished, ID: fmt.Sprint(g, "-", i)}); err != nil {
					t.Error(err)
					return
				}
				if err := l.Commit(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	sum, err := verifyPath(t, path)
	if err != nil {
		t.Fatal(err)
	}
	if sum.LastSeq < 200 {
		t.Fatalf("summary %+v: want the 200 records", sum)
	}
}

// TestCommitWithin: a record appended for later is synced by the pending
// commit on its own, or by a durable Append before it, or by Close.
func TestCommitWithin(t *testing.T) {
	l, err := Open(filepath.Join(t.TempDir(), "audit.jsonl"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	pending := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.synced < l.written
	}
	if err := l.AppendLater(&Record{Kind: KindFinished, ID: "a"}); err != nil {
		t.Fatal(err)
	}
	if !pending() {
		t.Fatal("a record appended for later is synced already")
	}
	l.CommitWithin(time.Millisecond, func(err error) { t.Error(err) })
	deadline := time.Now().Add(10 * time.Second)
	for pending() {
		if time.Now().After(deadline) {
			t.Fatal("the pending commit never synced")
		}
		time.Sleep(time.Millisecond)
	}
	if err := l.AppendLater(&Record{Kind: KindFinished, ID: "b"}); err != nil {
		t.Fatal(err)
	}
	l.CommitWithin(time.Hour, func(err error) { t.Error(err) })
	if err := l.Append(&Record{Kind: KindStarted, ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if pending() {
		t.Fatal("a durable Append left an earlier record unsynced")
	}
	if err := l.AppendLater(&Record{Kind: KindFinished, ID: "c"}); err != nil {
		t.Fatal(err)
	}
	l.CommitWithin(time.Hour, func(err error) { t.Error(err) })
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if pending() {
		t.Fatal("Close left a record unsynced")
	}
}
