package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Cgroup is a cgroup v2 directory that holds one run: with pipeline's
// Cmd.Cgroup set, every stage is created inside it (clone3 with
// CLONE_INTO_CGROUP through [Cgroup.FD], so no process of the run ever
// runs outside it), and the end of the run kills everything in it
// through cgroup.kill ([Cgroup.Kill]), whatever the processes did to
// their sessions, process groups or environment. Make one with [New] or
// [Open]; [Cgroup.Remove] ends it.
type Cgroup struct {
	// Path is the cgroup's directory in the cgroup2 file system.
	Path string
	dir  *os.File // the directory, held for CLONE_INTO_CGROUP
}

// Limits bound one run's cgroup; a zero field sets no limit. Each needs
// its controller enabled in the parent's cgroup.subtree_control.
type Limits struct {
	Memory int64 // memory.max, in bytes (memory controller)
	Tasks  int64 // pids.max, processes and threads (pids controller)
}

// IsZero reports whether l sets no limit.
func (l Limits) IsZero() bool { return l == Limits{} }

// String lists l's limits as "memory 512M, tasks 100", or "none".
func (l Limits) String() string {
	var parts []string
	if l.Memory > 0 {
		parts = append(parts, "memory "+FormatSize(l.Memory))
	}
	if l.Tasks > 0 {
		parts = append(parts, "tasks "+strconv.FormatInt(l.Tasks, 10))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// FormatSize writes n bytes as the largest of G, M or K that divides it,
// else as a number of bytes.
func FormatSize(n int64) string {
	for _, u := range []struct {
		s string
		v int64
	}{{"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}} {
		if n >= u.v && n%u.v == 0 {
			return strconv.FormatInt(n/u.v, 10) + u.s
		}
	}
	return strconv.FormatInt(n, 10)
}

// Usage is what a run's cgroup counted: CPU time from cpu.stat (present
// without any controller) and, where the memory controller is enabled,
// the peak memory from memory.peak.
type Usage struct {
	CPU    time.Duration // usage_usec: user and system
	User   time.Duration // user_usec
	System time.Duration // system_usec
	// MemoryPeak is memory.peak in bytes; -1 when the cgroup has no
	// memory controller.
	MemoryPeak int64
}

// New makes the cgroup name in parent, writes lim into it (see
// [WriteLimits]) before anything runs there, and opens it. The error
// wraps fs.ErrExist when the name is taken.
func New(parent, name string, lim Limits) (*Cgroup, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, fmt.Errorf("cgroup name %q is not a directory name", name)
	}
	path := filepath.Join(parent, name)
	if err := os.Mkdir(path, 0o755); err != nil {
		return nil, fmt.Errorf("make cgroup: %w", err)
	}
	if err := WriteLimits(path, lim); err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	c, err := Open(path)
	if err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	return c, nil
}

// Open opens the cgroup at path, which must exist.
func Open(path string) (*Cgroup, error) {
	// Opened as a plain descriptor: os.OpenFile would try the runtime's
	// poller, which refuses a directory, with five system calls.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open cgroup: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	return &Cgroup{Path: path, dir: os.NewFile(uintptr(fd), path)}, nil
}

// WriteLimits writes lim's limits into the files of the cgroup at dir:
// memory.max, and memory.swap.max set to 0 where that file exists (so the
// memory limit is not spilled into swap), and pids.max. It writes nothing
// for a zero field. It is the whole of the limit setting: the files must
// exist, as they do once the controller is enabled in the parent.
func WriteLimits(dir string, lim Limits) error {
	write := func(file, v string) error {
		f, err := os.OpenFile(filepath.Join(dir, file), os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return fmt.Errorf("set cgroup limit: %w", err)
		}
		_, err = f.WriteString(v)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("set cgroup limit %s: %w", file, err)
		}
		return nil
	}
	if lim.Memory > 0 {
		if err := write("memory.max", strconv.FormatInt(lim.Memory, 10)); err != nil {
			return err
		}
		if _, err := os.Stat(filepath.Join(dir, "memory.swap.max")); err == nil {
			if err := write("memory.swap.max", "0"); err != nil {
				return err
			}
		}
	}
	if lim.Tasks > 0 {
		if err := write("pids.max", strconv.FormatInt(lim.Tasks, 10)); err != nil {
			return err
		}
	}
	return nil
}

// FD is the descriptor of the cgroup's directory, which stages are
// created in (CLONE_INTO_CGROUP); it stays c's, open until
// [Cgroup.Remove].
func (c *Cgroup) FD() int { return int(c.dir.Fd()) }

// killWait bounds how long Kill waits for the killed processes to be
// gone: SIGKILL cannot be caught, but a process in uninterruptible sleep
// (a hung NFS read) dies only when it wakes.
const killWait = 10 * time.Second

// Kill kills every process in the cgroup and in the cgroups below it
// (cgroup.kill) and waits until none is left (cgroup.events says
// "populated 0"), for at most 10 seconds.
func (c *Cgroup) Kill() error {
	// A run's end most often finds its cgroup empty already: then there
	// is nothing to kill (no process can enter an empty cgroup but one
	// created in it through this Cgroup's descriptor, or moved in by a
	// root process from outside the run).
	var buf [512]byte
	if b, err := c.readFile("cgroup.events", buf[:]); err == nil {
		if full, err := populated(b); err == nil && !full {
			return nil
		}
	}
	if err := c.KillNoWait(); err != nil {
		return err
	}
	return c.waitEmpty(time.Now().Add(killWait))
}

// KillNoWait is [Cgroup.Kill] without the wait: it writes cgroup.kill,
// SIGKILL to every process in the cgroup and below it. The kernel
// signals each process there through its first thread, which a process
// whose first thread has exited (the exit system call, not exit_group)
// while others run on never acts on: each such process still listed is
// then killed as a whole (killListed).
func (c *Cgroup) KillNoWait() error {
	fd, err := c.openFile("cgroup.kill", unix.O_WRONLY)
	if err != nil {
		return fmt.Errorf("kill cgroup: %w", err)
	}
	_, err = unix.Write(fd, []byte("1"))
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("kill cgroup: %w", &fs.PathError{Op: "write", Path: filepath.Join(c.Path, "cgroup.kill"), Err: err})
	}
	killListed(c.FD(), c.Path)
	return nil
}

// killListed sends SIGKILL to every process listed in the cgroup.procs of
// the cgroup whose directory dirfd holds (at path, for nothing but
// names) and of those below it whose first thread has exited (those
// cgroup.kill missed), through a pidfd opened before the list is read
// again: only a process still listed then is signalled, so a pid reused
// meanwhile by a process outside is never hit. At most 256 pidfds are
// open at once. Every file is opened relative to the held directory, the
// cgroups below it each through its own descriptor: no path is walked
// again, so what is mounted over the path meanwhile (cgroup v2 refuses a
// rename) cannot make it read another cgroup's list.
func killListed(dirfd int, path string) {
	list := func() []string {
		return strings.Fields(string(readAt(dirfd, "cgroup.procs")))
	}
	var left []int
	for _, pid := range list() {
		if n, err := strconv.Atoi(pid); err == nil {
			if zombie(n) {
				left = append(left, n)
			}
		}
	}
	for len(left) > 0 {
		pidfds := map[string]int{}
		for _, pid := range left[:min(len(left), 256)] {
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				pidfds[strconv.Itoa(pid)] = fd
			}
		}
		left = left[min(len(left), 256):]
		for _, pid := range list() {
			if fd, ok := pidfds[pid]; ok {
				_ = unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			}
		}
		for _, fd := range pidfds {
			unix.Close(fd)
		}
	}
	// A fresh descriptor of the directory to list it: reading entries
	// moves the offset of the descriptor they are read through.
	lfd, err := unix.Openat(dirfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	ld := os.NewFile(uintptr(lfd), path) // blocking: never in the poller
	entries, _ := ld.ReadDir(-1)
	ld.Close()
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		sub, err := unix.Openat(dirfd, e.Name(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		killListed(sub, filepath.Join(path, e.Name()))
		unix.Close(sub)
	}
}

// readAt reads the whole of the file name in the directory dirfd holds;
// nil if it cannot.
func readAt(dirfd int, name string) []byte {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	f := os.NewFile(uintptr(fd), name) // blocking: never in the poller
	defer f.Close()
	b, _ := io.ReadAll(f)
	return b
}

// zombie reports whether process pid is a zombie (state Z in
// /proc/PID/stat): for a process listed in a cgroup.procs, one whose
// first thread has exited while others run on.
func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state ...": comm may hold anything, so the state is
	// the first field after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return false
	}
	f := strings.Fields(string(b[i+1:]))
	return len(f) > 0 && f[0] == "Z"
}

// openFile opens the file name of the cgroup through its held directory:
// a plain descriptor, which the runtime's poller never sees (kernfs files
// can be polled, and os.Open would register each one there and take it
// out again on Close), and no walk of the path.
func (c *Cgroup) openFile(name string, mode int) (int, error) {
	for {
		fd, err := unix.Openat(c.FD(), name, mode|unix.O_CLOEXEC, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: filepath.Join(c.Path, name), Err: err}
		}
		return fd, nil
	}
}

// readFile reads the cgroup's file name (at most len(buf) bytes; the
// files read here are short) into buf.
func (c *Cgroup) readFile(name string, buf []byte) ([]byte, error) {
	fd, err := c.openFile(name, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n, err := unix.Pread(fd, buf, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: filepath.Join(c.Path, name), Err: err}
	}
	return buf[:n], nil
}

// Populated reports whether a process is left in the cgroup or below it.
func (c *Cgroup) Populated() (bool, error) {
	var buf [512]byte
	b, err := c.readFile("cgroup.events", buf[:])
	if err != nil {
		return false, fmt.Errorf("read cgroup.events: %w", err)
	}
	return populated(b)
}

// populated reads the populated line of cgroup.events's content b.
func populated(b []byte) (bool, error) {
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && k == "populated" {
			return v != "0", nil
		}
	}
	return false, errors.New("cgroup.events has no populated line")
}

// waitEmpty waits until the cgroup is no longer populated. The kernel
// wakes a poll for POLLPRI on cgroup.events when the file changes (an
// inotify watch would do too, but closing one costs milliseconds).
func (c *Cgroup) waitEmpty(deadline time.Time) error {
	fd, err := c.openFile("cgroup.events", unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("wait for cgroup: %w", err)
	}
	defer unix.Close(fd)
	var buf [512]byte
	for {
		n, err := unix.Pread(fd, buf[:], 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return fmt.Errorf("read cgroup.events: %w", err)
		}
		full, err := populated(buf[:n])
		if err != nil {
			return err
		}
		if !full {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("cgroup %s: processes left after SIGKILL", c.Path)
		}
		// A change between the read above and this poll still wakes it
		// (the file's event count moved on); the read is repeated at
		// least every 100ms anyway.
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
		if _, err := unix.Poll(fds, int(min(left, 100*time.Millisecond)/time.Millisecond)+1); err != nil && err != unix.EINTR {
			return fmt.Errorf("wait for cgroup: %w", err)
		}
	}
}

// Usage reads the CPU time (cpu.stat) and peak memory (memory.peak) the
// cgroup counted; fields it cannot read stay zero (MemoryPeak -1).
func (c *Cgroup) Usage() Usage {
	u := Usage{MemoryPeak: -1}
	var buf [4096]byte
	if b, err := c.readFile("cpu.stat", buf[:]); err == nil {
		for line := range strings.Lines(string(b)) {
			k, v, _ := strings.Cut(strings.TrimSpace(line), " ")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			d := time.Duration(n) * time.Microsecond
			switch k {
			case "usage_usec":
				u.CPU = d
			case "user_usec":
				u.User = d
			case "system_usec":
				u.System = d
			}
		}
	}
	if b, err := c.readFile("memory.peak", buf[:]); err == nil {
		if n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64); err == nil {
			u.MemoryPeak = n
		}
	}
	return u
}

// Remove kills what is left in the cgroup, waits for it, and removes the
// cgroup and any cgroup a process of the run (running as root) made
// below it. It closes c's descriptor either way.
func (c *Cgroup) Remove() error {
	defer c.dir.Close()
	// Most often the run's end emptied it (Kill) and nothing made a
	// cgroup below it: then one rmdir does. The kernel refuses to remove
	// a cgroup that holds a process or a cgroup (EBUSY), so nothing is
	// skipped that the longer way would do.
	switch err := unix.Rmdir(c.Path); err {
	case nil, unix.ENOENT:
		return nil
	}
	if err := c.Kill(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return removeTree(c.Path)
}

// removeTree removes the cgroup at path, its children first.
func removeTree(path string) error {
	entries, err := os.ReadDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("remove cgroup: %w", err)
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(path, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(path); err != nil && err != unix.ENOENT {
		return fmt.Errorf("remove cgroup %s: %w", path, err)
	}
	return nil
}

// ErrNotMounted means no cgroup2 file system is mounted where this
// process can see it, or the process is in no cgroup of it.
var ErrNotMounted = errors.New("no cgroup2 file system mounted")

// Own returns the directory of the calling process's cgroup v2 in the
// cgroup2 file system mounted in its mount namespace (on a system whose
// controllers are on cgroup v1, the v2 tree is often at
// /sys/fs/cgroup/unified), and whether that cgroup is the root of the
// tree. The error wraps [ErrNotMounted] when there is none.
func Own() (dir string, root bool, err error) {
	return of("/proc/self")
}

// Of returns the directory of process pid's cgroup v2 in the cgroup2
// file system mounted in the caller's mount namespace, as [Own] does for
// the calling process.
func Of(pid int) (string, error) {
	dir, _, err := of("/proc/" + strconv.Itoa(pid))
	return dir, err
}

// of is [Own] for the process whose /proc directory is proc.
func of(proc string) (dir string, root bool, err error) {
	b, err := os.ReadFile(proc + "/cgroup")
	if err != nil {
		return "", false, err
	}
	rel := ""
	found := false
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimRight(line, "\n"), "0::"); ok {
			rel, found = p, true
		}
	}
	if !found {
		return "", false, fmt.Errorf("%w: %s/cgroup has no 0:: line", ErrNotMounted, proc)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	for line := range strings.Lines(string(mi)) {
		// "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS...] - FSTYPE SOURCE SUPEROPTS"
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if sep < 5 || sep+1 >= len(f) || f[sep+1] != "cgroup2" {
			continue
		}
		mroot, mpoint := unescapeMount(f[3]), unescapeMount(f[4])
		sub, ok := strings.CutPrefix(rel, strings.TrimSuffix(mroot, "/"))
		if !ok || (sub != "" && !strings.HasPrefix(sub, "/")) {
			continue
		}
		return filepath.Join(mpoint, sub), sub == "" || sub == "/", nil
	}
	return "", false, fmt.Errorf("%w: none in /proc/self/mountinfo", ErrNotMounted)
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Controllers lists the controllers the cgroup at dir offers its children
// (cgroup.controllers).
func Controllers(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}
