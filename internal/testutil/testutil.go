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

	"golang.org/x/sys/unix"
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
// packaging's, which installs the .deb), and those that need it absent
// (a daemon in a user namespace, where its gid is not mapped): test
// packages run in parallel.
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
// command), or that say themselves what they saw.
func Poll(timeout time.Duration, cond func() bool) bool {
	return PollEvery(10*time.Millisecond, timeout, cond)
}

// PollEvery is Poll checking every interval: for a cond that costs a
// process (a command in a container).
func PollEvery(interval, timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
	}
	return true
}

// Holds checks cond every interval for the span d and reports whether it
// held at every check: for what must not happen within a time the system
// under test is given (a restart after RestartSec=), the one kind of
// wait whose length is the point.
func Holds(interval, d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(interval) {
		if !cond() {
			return false
		}
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

// Escapee is a process a test's run left behind, known by its pid and
// its start time (in clock ticks since boot, /proc/PID/stat's field 22):
// by the time the test looks, the pid may be another process's, or
// another process's thread's, and signalling that one could end anything
// else the machine runs (another test's daemon, say).
type Escapee struct {
	PID   int
	Start uint64
}

// ParseEscapee reads "PID START", as ExitedFirstThreadPerl prints it.
func ParseEscapee(out []byte) (Escapee, error) {
	var e Escapee
	if _, err := fmt.Sscanf(string(out), "%d %d\n", &e.PID, &e.Start); err != nil {
		return e, fmt.Errorf("not a pid and start time: %q", out)
	}
	return e, nil
}

// same reports whether /proc/PID/stat at dir is still e's.
func (e Escapee) same(dir string) bool {
	f := statFields(filepath.Join(dir, "stat"))
	// Field 22 is the 20th after the command's name.
	return len(f) > 19 && f[19] == strconv.FormatUint(e.Start, 10)
}

// statFields is a /proc stat file's fields after the command's name,
// which may hold anything; nil if it cannot be read.
func statFields(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	s := string(b)
	return strings.Fields(s[strings.LastIndex(s, ")")+1:])
}

// LiveThreads counts e's threads that have not exited (neither zombies nor
// dead): a process whose first thread exited alone still runs on in the
// others. Another process on e's pid has none of e's.
func (e Escapee) LiveThreads() (n int) {
	dir := filepath.Join("/proc", strconv.Itoa(e.PID))
	if !e.same(dir) {
		return 0
	}
	tasks, _ := os.ReadDir(filepath.Join(dir, "task"))
	for _, task := range tasks {
		if f := statFields(filepath.Join(dir, "task", task.Name(), "stat")); len(f) > 0 && f[0] != "Z" && f[0] != "X" {
			n++
		}
	}
	// Counted while the pid was e's: it still is if the start time
	// still is.
	if !e.same(dir) {
		return 0
	}
	return n
}

// Kill sends e SIGKILL if the process on its pid is still e, through a
// pidfd opened before the check, so that no other process is hit.
func (e Escapee) Kill() {
	fd, err := unix.PidfdOpen(e.PID, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if e.same(filepath.Join("/proc", strconv.Itoa(e.PID))) {
		_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
	}
}

// ExitedFirstThreadPerl is a perl script that leaves behind a process,
// in its own session, whose first thread has exited (the exit system
// call, not exit_group) while another thread runs on, and prints that
// process's pid and start time (for ParseEscapee) once its first thread
// shows as a zombie: a process that /proc lists as dead while it still
// runs.
const ExitedFirstThreadPerl = `use POSIX; use threads;
pipe(my $r, my $w) or die;
if (fork == 0) { POSIX::setsid(); if (fork == 0) { threads->create(sub { sleep 1 while 1 }); syswrite $w, "$$\n"; syscall(60, 0) } POSIX::_exit(0) }
close $w; my $g = <$r>; chomp $g;
my @f;
for (;;) { open my $f, "<", "/proc/$g/stat" or die; my $s = <$f>; @f = split " ", substr($s, rindex($s, ")") + 1); last if $f[0] eq "Z"; select(undef, undef, undef, 0.005) }
print "$g $f[19]\n"`
