// Package testutil holds what the tests of several rootgate packages
// share. Only tests import it.
package testutil

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SyncBuffer is a bytes.Buffer safe for concurrent use, for the output of
// a process or a logger that tests read while it is still written.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// LockGroup holds, until t ends, the lock that serialises the tests that
// create or delete group rootgate (daemon's TestSocketGroup, and
// packaging's, which installs the .deb): test packages run in parallel.
func LockGroup(t testing.TB) {
	t.Helper()
	f, err := os.OpenFile("/run/lock/rootgate-group-test.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
}

// ParseJournal parses one entry of journald's native protocol: NAME=value
// lines, or NAME on its own line, a 64-bit little-endian length, the value
// and a newline.
func ParseJournal(b []byte) (map[string]string, error) {
	m := map[string]string{}
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			return nil, fmt.Errorf("no newline in %q", b)
		}
		line := b[:nl]
		b = b[nl+1:]
		if eq := bytes.IndexByte(line, '='); eq >= 0 {
			m[string(line[:eq])] = string(line[eq+1:])
			continue
		}
		if len(b) < 8 {
			return nil, fmt.Errorf("%s: no length", line)
		}
		size := binary.LittleEndian.Uint64(b)
		b = b[8:]
		if uint64(len(b)) < size+1 || b[size] != '\n' {
			return nil, fmt.Errorf("%s: bad binary field", line)
		}
		m[string(line)] = string(b[:size])
		b = b[size+1:]
	}
	return m, nil
}

// WaitFor polls cond until it holds, failing t once timeout has passed.
// Tests wait for a condition with it, never for a fixed time.
func WaitFor(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !Poll(timeout, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Poll polls cond every 10 ms until it holds, and reports whether it did
// within timeout: WaitFor for callers without a testing.TB (a testscript
// command).
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// ShortDir is a private directory under /tmp, removed when t ends, whose
// path is short enough for the sockets in it: sun_path holds 108 bytes
// and t.TempDir() names can be longer.
func ShortDir(t testing.TB) string {
	t.Helper()
	dir, err := NewShortDir()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// NewShortDir is ShortDir for callers without a testing.TB (a testscript
// setup): they remove the directory themselves.
func NewShortDir() (string, error) { return os.MkdirTemp("/tmp", "rg") }

// LiveThreads counts the threads of process pid that have not exited
// (neither zombies nor dead): a process whose first thread exited alone
// still runs on in the others.
func LiveThreads(pid int) (n int) {
	dir := filepath.Join("/proc", strconv.Itoa(pid), "task")
	tasks, _ := os.ReadDir(dir)
	for _, task := range tasks {
		b, err := os.ReadFile(filepath.Join(dir, task.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		if f := strings.Fields(s[strings.LastIndex(s, ")")+1:]); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
			n++
		}
	}
	return n
}

// ExitedFirstThreadPerl is a perl script that leaves behind a process,
// in its own session, whose first thread has exited (the exit system
// call, not exit_group) while another thread runs on, and prints that
// process's pid once its first thread shows as a zombie: a process that
// /proc lists as dead while it still runs.
const ExitedFirstThreadPerl = `use POSIX; use threads;
pipe(my $r, my $w) or die;
if (fork == 0) { POSIX::setsid(); if (fork == 0) { threads->create(sub { sleep 1 while 1 }); syswrite $w, "$$\n"; syscall(60, 0) } POSIX::_exit(0) }
close $w; my $g = <$r>; chomp $g;
for (;;) { open my $f, "<", "/proc/$g/stat" or die; my $s = <$f>; last if $s =~ /\) Z /; select(undef, undef, undef, 0.005) }
print "$g\n"`
