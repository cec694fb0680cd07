package progid

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"syscall"
)

// listedForTest lists sh and every name starting with python, as
// approval's list would.
func listedForTest(name string) bool { return name == "sh" || strings.HasPrefix(name, "python") }

// binDir is a directory of listed programs, root's alone (the tests run
// as root), holding the given files.
func binDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "bin")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		write(t, filepath.Join(dir, name), body)
	}
	return dir
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// fileOf is the file at path as Is is asked about it, hashed when Is
// asks; hashed counts how often.
func fileOf(t *testing.T, path string, hashed *int) File {
	t.Helper()
	f, err := PathFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := f.SHA256
	f.SHA256 = func() (string, error) {
		*hashed++
		return sum()
	}
	return f
}

// TestIs: a listed program is known by what its file is: a hard link to
// it by its inode, unhashed; a copy under another name by its size and
// SHA-256; a link to it in another directory by the file it leads to. A
// file of another size is not hashed, and one of the same size with
// other bytes is not it.
func TestIs(t *testing.T) {
	const py = "#!python interpreter, pretend\n"
	dir := binDir(t, map[string]string{"python3.12": py, "sh": "a shell\n", "ls": "not listed\n"})
	if err := os.Symlink("python3.12", filepath.Join(dir, "python3")); err != nil {
		t.Fatal(err)
	}
	x := New([]string{dir, "/nonexistent/dir"}, listedForTest)
	if n := x.Len(); n != 3 {
		t.Fatalf("Len = %d, want 3 (python3.12, python3, sh)", n)
	}
	elsewhere := t.TempDir()
	cp := filepath.Join(elsewhere, "mytool")
	write(t, cp, py)
	hard := filepath.Join(elsewhere, "hard")
	if err := os.Link(filepath.Join(dir, "sh"), hard); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(elsewhere, "link")
	if err := os.Symlink(filepath.Join(dir, "python3"), link); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(elsewhere, "other")
	write(t, other, "something else entirely, longer\n")
	same := filepath.Join(elsewhere, "samesize")
	write(t, same, strings.Repeat("x", len(py)-1)+"\n")
	lsCopy := filepath.Join(elsewhere, "lscopy")
	write(t, lsCopy, "not listed\n")
	for _, c := range []struct {
		path, want string
		hashes     int
	}{
		{cp, "python", 1},
		{hard, filepath.Join(dir, "sh"), 0},
		{link, "python", 0},
		{other, "", 0},
		{same, "", 1},
		{lsCopy, "", 0},
	} {
		hashed := 0
		got := x.Is(fileOf(t, c.path, &hashed))
		if c.want == "" && got != "" || c.want != "" && !strings.HasPrefix(filepath.Base(got), filepath.Base(c.want)) {
			t.Errorf("%s: Is = %q, want %q", filepath.Base(c.path), got, c.want)
		}
		if hashed != c.hashes {
			t.Errorf("%s: hashed %d times, want %d", filepath.Base(c.path), hashed, c.hashes)
		}
	}
}

// TestIsSeesChanges: a listed program added to a directory is known at
// once (the directory changed), and one rewritten in place is known by
// its new bytes, not its old: at once when its size stays (its hash is
// kept by its times), after RecheckEvery when only the file changed size.
func TestIsSeesChanges(t *testing.T) {
	dir := binDir(t, map[string]string{"sh": "shell one\n"})
	x := New([]string{dir}, listedForTest)
	now := time.Unix(1e9, 0)
	x.now = func() time.Time { return now }
	elsewhere := t.TempDir()
	cp := filepath.Join(elsewhere, "tool")
	write(t, cp, "python two\n")
	var n int
	if got := x.Is(fileOf(t, cp, &n)); got != "" {
		t.Fatalf("before python is there: Is = %q", got)
	}
	write(t, filepath.Join(dir, "python3"), "python two\n")
	if got := x.Is(fileOf(t, cp, &n)); got != filepath.Join(dir, "python3") {
		t.Fatalf("python added: Is = %q", got)
	}
	// sh rewritten in place, same size: the old bytes are no longer sh.
	old := filepath.Join(elsewhere, "oldsh")
	write(t, old, "shell one\n")
	if got := x.Is(fileOf(t, old, &n)); got != filepath.Join(dir, "sh") {
		t.Fatalf("a copy of sh: Is = %q", got)
	}
	write(t, filepath.Join(dir, "sh"), "shell two\n")
	if got := x.Is(fileOf(t, old, &n)); got != "" {
		t.Errorf("the old sh after sh was rewritten: Is = %q, want none", got)
	}
	newer := filepath.Join(elsewhere, "newsh")
	write(t, newer, "shell two\n")
	if got := x.Is(fileOf(t, newer, &n)); got != filepath.Join(dir, "sh") {
		t.Errorf("a copy of the new sh: Is = %q", got)
	}
	// Rewritten in place to another size: seen at the next recheck.
	write(t, filepath.Join(dir, "sh"), "shell three, longer\n")
	third := filepath.Join(elsewhere, "third")
	write(t, third, "shell three, longer\n")
	now = now.Add(RecheckEvery)
	if got := x.Is(fileOf(t, third, &n)); got != filepath.Join(dir, "sh") {
		t.Errorf("a copy of sh rewritten to another size: Is = %q", got)
	}
}

// TestIsLeavesOutOthersDirs: a directory others may write is not the
// system's programs: a file named python there makes nothing python.
func TestIsLeavesOutOthersDirs(t *testing.T) {
	dir := binDir(t, map[string]string{"python3": "requester's\n"})
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	x := New([]string{dir}, listedForTest)
	cp := filepath.Join(t.TempDir(), "tool")
	write(t, cp, "requester's\n")
	var n int
	if got := x.Is(fileOf(t, cp, &n)); got != "" || x.Len() != 0 {
		t.Fatalf("Is = %q, Len = %d: a writable directory was indexed", got, x.Len())
	}
}

// TestIsConcurrent: many look-ups at once, as concurrent requests make
// them, hash a listed file once and agree (run with -race).
func TestIsConcurrent(t *testing.T) {
	body := strings.Repeat("interpreter bytes ", 1<<12)
	dir := binDir(t, map[string]string{"python3": body})
	x := New([]string{dir}, listedForTest)
	cp := filepath.Join(t.TempDir(), "tool")
	write(t, cp, body)
	var wg sync.WaitGroup
	got := make([]string, 16)
	for i := range got {
		wg.Go(func() {
			f, err := PathFile(cp)
			if err != nil {
				t.Error(err)
				return
			}
			got[i] = x.Is(f)
		})
	}
	wg.Wait()
	for i, g := range got {
		if g != filepath.Join(dir, "python3") {
			t.Errorf("look-up %d: Is = %q", i, g)
		}
	}
	sum := sha256.Sum256([]byte(body))
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.sums) != 1 || len(x.hashing) != 0 {
		t.Errorf("sums %v, hashing %v: want the one hash kept", x.sums, x.hashing)
	}
	for _, s := range x.sums {
		if s != hex.EncodeToString(sum[:]) {
			t.Errorf("kept hash %s", s)
		}
	}
}

// TestPathFileSwappedForFIFO: the path of a requester's #! interpreter,
// found a regular file, swapped for a FIFO before it is hashed: the hash
// fails at once instead of blocking the daemon's thread on an open no
// writer will ever complete.
func TestPathFileSwappedForFIFO(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "interp")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := PathFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := f.SHA256()
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO in the file's place was hashed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("hashing the path blocked on the FIFO put in the file's place")
	}
}
