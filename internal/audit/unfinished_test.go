package audit

import (
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
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
