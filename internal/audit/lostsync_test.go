package audit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil"
)

// TestLostRecordsReportedAtReopen: records appended for later to a file
// another process then rotates away are synced when the Log moves to the
// new file; when that sync fails (a real fsync(2) error, from a disk that
// cannot write them back), the append that moved fails with the error,
// the Commit that was to cover them fails too, and the next request's
// durable append, its own record safe on disk, is not blamed for them.
func TestLostRecordsReportedAtReopen(t *testing.T) {
	l, path, fill, free := logOnFailingDisk(t)

	fill()
	// 64 KiB: blocks of the file's that the image has never held, which
	// the full tmpfs cannot take.
	lost := &Record{Kind: KindFinished, ID: "lost", Error: strings.Repeat("x", 64<<10)}
	if err := l.AppendLater(lost); err != nil {
		t.Fatal(err) // in the page cache: no error yet
	}
	// Another daemon on the same file rotates it away.
	if err := os.Rename(path, path+".00000000000000000001"); err != nil {
		t.Fatal(err)
	}
	// The append that notices, and closes the old file, says the records
	// in it were lost.
	err := l.AppendLater(&Record{Kind: KindReceived, ID: "notices"})
	if err == nil || !strings.Contains(err.Error(), "records lost") {
		t.Fatalf("append after the rotated-away file failed to sync: %v, want records lost", err)
	}
	t.Logf("reopening append: %v", err)
	// So does the Commit that was to make them durable.
	if err := l.Commit(); err == nil || !strings.Contains(err.Error(), "records lost") {
		t.Fatalf("commit covering the lost records: %v, want records lost", err)
	}

	free()
	// The next request's record is written and synced: no error of the
	// earlier loss comes back to it.
	if err := l.Append(&Record{Kind: KindReceived, ID: "next"}); err != nil {
		t.Fatalf("the next durable append is blamed for the earlier loss: %v", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"id":"next"`) {
		t.Fatalf("the next record is not in the new file:\n%s", b)
	}
}

// TestLostRecordReportedToItsAppend: an Append's record is written, then
// another append finds the file rotated away and its records lost, and a
// third writes into the new file, all before the first Append's commit
// runs (they share the log, not its lock, meanwhile). That commit must
// report the loss of its own record: a commit up to the latest record
// synced the new file and said all was safe, and its caller (a run's
// started record) went on.
func TestLostRecordReportedToItsAppend(t *testing.T) {
	l, path, fill, free := logOnFailingDisk(t)
	fill()
	// Append's first half: the record is written, not yet committed.
	n, err := l.append(&Record{Kind: KindStarted, ID: "lost", Error: strings.Repeat("x", 64<<10)})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(path, path+".00000000000000000001"); err != nil {
		t.Fatal(err)
	}
	if err := l.AppendLater(&Record{Kind: KindReceived, ID: "notices"}); err == nil || !strings.Contains(err.Error(), "records lost") {
		t.Fatalf("append after the rotated-away file failed to sync: %v, want records lost", err)
	}
	free()
	if err := l.AppendLater(&Record{Kind: KindReceived, ID: "later"}); err != nil {
		t.Fatal(err)
	}
	// Append's second half.
	if err := l.commitTo(n); err == nil || !strings.Contains(err.Error(), "records lost") {
		t.Fatalf("the commit of the lost record: %v, want records lost", err)
	}
	// A commit of what came later is safe.
	if err := l.Commit(); err != nil {
		t.Fatalf("commit of the records since: %v", err)
	}
}

// logOnFailingDisk opens a Log on testutil.FailingDisk's file system, with one
// record synced there, closed when the test ends.
func logOnFailingDisk(t *testing.T) (l *Log, path string, fill, free func()) {
	t.Helper()
	mnt, fill, free := testutil.FailingDisk(t)
	path = filepath.Join(mnt, "audit.jsonl")
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.Append(&Record{Kind: KindReceived, ID: "safe"}); err != nil {
		t.Fatal(err)
	}
	return l, path, fill, free
}
