package audit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// TestUnfinished: the runs a gone daemon started and never ended are
// listed, once each, from its opened record on; a live daemon's runs, the
// caller's own, and those before the gone daemon's start are not. A
// daemon is told by its pid, boot id and start time together: one whose
// pid another process holds now (pid reuse, as a requester can arrange)
// is gone, and a run is its daemon's, not that of a later daemon that got
// the same pid.
func TestUnfinished(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const boot = "a1b2c3d4-0000-4000-8000-000000000001"
	var (
		older  = Daemon{PID: 101, BootID: boot, Start: 10}
		gone   = Daemon{PID: 102, BootID: boot, Start: 20} // its pid now another process's
		live   = Daemon{PID: 103, BootID: boot, Start: 30}
		self   = Daemon{PID: 104, BootID: boot, Start: 40}
		first  = Daemon{PID: 108, BootID: boot, Start: 60} // gone; pid taken by second
		second = Daemon{PID: 108, BootID: boot, Start: 70}
	)
	// The processes running now: pid to start time.
	procs := map[int]uint64{102: 99, 103: 30, 104: 40, 108: 70}
	alive := func(d Daemon) bool {
		start, ok := procs[d.PID]
		return ok && d.BootID == boot && start == d.Start
	}
	add := func(r *Record) {
		t.Helper()
		if err := l.AppendLater(r); err != nil {
			t.Fatal(err)
		}
	}
	opened := func(d Daemon) { add(&Record{Kind: KindOpened, Daemon: &d}) }
	started := func(id string, d Daemon) { add(&Record{Kind: KindStarted, ID: id, Run: &Run{DaemonPID: d.PID}}) }
	opened(older)
	started("before-gone", older) // the gone daemon's start looked at it
	opened(live)
	opened(first)
	opened(gone)
	started("ended", gone)
	started("live", live)
	started("lost-1", gone)
	add(&Record{Kind: KindFinished, ID: "ended"})
	started("lost-first", first)
	opened(second) // while gone still ran
	started("second", second)
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
	got, err := Unfinished(path, self, alive)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"lost-1", "lost-first", "lost-2"}; !slices.Equal(got, want) {
		t.Fatalf("Unfinished: %q, want %q", got, want)
	}
}

// TestUnfinishedAcrossBoot: after a reboot, a daemon of the boot before
// is gone even when the starting daemon has its pid and start time (early
// services start alike on every boot); an opened record from before boot
// ids were recorded is decided by its pid alone, as it always was.
func TestUnfinishedAcrossBoot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	before := Daemon{PID: 300, BootID: "boot-before", Start: 50}
	self := Daemon{PID: 300, BootID: "boot-now", Start: 50}
	alive := func(d Daemon) bool {
		if d.BootID == "" { // pid alone: 300 (self) and 301 run
			return d.PID == 300 || d.PID == 301
		}
		return same(d, self)
	}
	for _, r := range []*Record{
		{Kind: KindOpened, Daemon: &Daemon{PID: 301}},
		{Kind: KindOpened, Daemon: &Daemon{PID: 302}},
		{Kind: KindOpened, Daemon: &before},
		{Kind: KindStarted, ID: "old-format-live", Run: &Run{DaemonPID: 301}},
		{Kind: KindStarted, ID: "old-format-gone", Run: &Run{DaemonPID: 302}},
		{Kind: KindStarted, ID: "lost-at-reboot", Run: &Run{DaemonPID: 300}},
		{Kind: KindOpened, Daemon: &self},
	} {
		if err := l.AppendLater(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Commit(); err != nil {
		t.Fatal(err)
	}
	got, err := Unfinished(path, self, alive)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"old-format-gone", "lost-at-reboot"}; !slices.Equal(got, want) {
		t.Fatalf("Unfinished: %q, want %q", got, want)
	}
}

// TestRunning: Running against this machine's real processes: this one
// (as ThisDaemon names it) runs; the same pid with another start time or
// boot id, or a pid no process holds, does not; a daemon named by its pid
// alone runs while that pid does.
func TestRunning(t *testing.T) {
	me := *ThisDaemon("test")
	if me.BootID == "" || me.Start == 0 || me.PID != os.Getpid() {
		t.Fatalf("ThisDaemon: %+v", me)
	}
	if !Running(me) {
		t.Errorf("Running(%+v): false for this process", me)
	}
	if !Running(Daemon{PID: me.PID}) {
		t.Errorf("Running by pid alone: false for this process")
	}
	later := me
	later.Start++
	other := me
	other.BootID = "00000000-0000-0000-0000-000000000000"
	for _, d := range []Daemon{later, other} {
		if Running(d) {
			t.Errorf("Running(%+v): true, but this process is not it", d)
		}
	}
	// A child that has been waited for: its pid is free (for now).
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := Daemon{PID: cmd.Process.Pid, BootID: me.BootID, Start: me.Start}
	if Running(dead) {
		t.Errorf("Running(%+v): true for a process waited for", dead)
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
	testutil.WaitFor(t, "the pending commit to sync", 10*time.Second, func() bool { return !pending() })
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
