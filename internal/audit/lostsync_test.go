package audit

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// failingDisk mounts an ext2 file system on a loop device whose 64 MiB
// image lives on an 8 MiB tmpfs, and returns the mount point and a
// function that fills the tmpfs and one that frees it again. With the
// tmpfs full, writes to the ext2 still succeed (they go to the page cache,
// and ext2 believes it has room) but writing them back fails: fsync(2)
// reports the error, as it does on a failing disk.
func failingDisk(t *testing.T) (mnt string, fill, free func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a loop device")
	}
	dir := t.TempDir()
	back, mnt := filepath.Join(dir, "back"), filepath.Join(dir, "mnt")
	for _, d := range []string{back, mnt} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := syscall.Mount("tmpfs", back, "tmpfs", 0, "size=8m,mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(back, 0); err != nil {
			t.Errorf("unmount %s: %v", back, err)
		}
	})
	img := filepath.Join(back, "img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext2", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext2: %v\n%s", err, out)
	}
	// mount(8) sets up the loop device, and frees it at the unmount.
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		if _, serr := os.Stat("/dev/loop-control"); serr != nil {
			// A machine without loop devices (a container) cannot
			// make fsync fail for real: not a pass, a skip that says so.
			t.Skipf("no loop device on this machine (%v): mount: %v\n%s", serr, err, out)
		}
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	filler := filepath.Join(back, "filler")
	fill = func() {
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		chunk := make([]byte, 64<<10)
		for {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				return
			}
		}
	}
	free = func() {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	}
	return mnt, fill, free
}

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

// logOnFailingDisk opens a Log on failingDisk's file system, with one
// record synced there, closed when the test ends.
func logOnFailingDisk(t *testing.T) (l *Log, path string, fill, free func()) {
	t.Helper()
	mnt, fill, free := failingDisk(t)
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
