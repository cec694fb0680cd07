package peerid

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/pipeline"
	"golang.org/x/sys/unix"
)

// maxAncestry bounds the walk from a process up to pid 1.
const maxAncestry = 1024

// unsetLoginUID is /proc/PID/loginuid of a process outside any login.
const unsetLoginUID = 4294967295

// Controllers returns the controller set of the live process pid: the
// uids that could drive or write its terminal or session, so must never
// be asked to approve their own requests through it. For pid and every
// ancestor up to pid 1 (a tmux or screen server, su, sudo, sshd included)
// it takes the process's real, effective, saved and filesystem uids, its
// login uid (/proc/PID/loginuid, unless unset), SUDO_UID from its
// environment, the owner of its controlling terminal and the owners of
// the character devices on its fds 0-2. None of these can be forged by a
// process of another uid: a requester can add itself to the set, never
// leave it. The result is sorted and without duplicates.
//
// Each process is held by a pidfd while it is read and the parent is
// confirmed to still be the child's parent afterwards, so a pid reused
// during the walk cannot lend its identity. It fails when pid or an
// ancestor cannot be read or exits during the walk.
func Controllers(pid int) ([]int, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil, fmt.Errorf("controllers of pid %d: pidfd_open: %w", pid, err)
	}
	defer unix.Close(pidfd)
	return controllersPinned(pidfd, pid, nil)
}

// ControllersOf is [Controllers] of the process at the other end of c,
// which SO_PEERCRED said is pid. When run is set, the walk also looks for
// a sign that the process is part of a rootgate run and says which in
// run.why.
func ControllersOf(c *net.UnixConn, pid int, run *RunSigns) ([]int, error) {
	if pid <= 0 {
		return nil, errors.New("the peer's pid is not visible here")
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	pidfd, err := pidfdOf(rc, pid)
	if err != nil {
		return nil, fmt.Errorf("pidfd of pid %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	return controllersPinned(pidfd, pid, run)
}

// RunSigns is what tells a process of a rootgate run, or one descended
// from a run, from any other: the daemon looks for them along an
// approver's ancestry (rootgated's Server.runSigns fills one in).
type RunSigns struct {
	// Cgroups is the directory the runs' cgroups are made in, or "": a
	// process in it or below is in a run. No process of a run can leave
	// it, as a process without root cannot move itself out of a cgroup
	// tree whose common ancestor it may not write.
	Cgroups string
	// Daemon is the daemon's pid when it is the subreaper of its runs'
	// orphans (runs without cgroups), or 0: a run's stages are its
	// children, and their orphans become its children, so a process that
	// has it among its ancestors is part of a run.
	Daemon int
	// Why names the first sign found, or "" when none was (set by
	// ControllersOf).
	Why string
}

// look records in r.Why whether the process pid (the approver itself
// when first) shows a sign of a run, env being its environment.
func (r *RunSigns) look(pid int, first bool, env []byte) {
	if r == nil || r.Why != "" {
		return
	}
	who := "its ancestor pid " + strconv.Itoa(pid)
	if first {
		who = "it"
	}
	if r.Daemon > 0 && pid == r.Daemon && !first {
		r.Why = "it descends from rootgated's own process, which runs only rootgate runs"
		return
	}
	if bytes.HasPrefix(env, []byte(pipeline.RunEnvKey+"=")) || bytes.Contains(env, []byte("\x00"+pipeline.RunEnvKey+"=")) {
		r.Why = who + " has " + pipeline.RunEnvKey + " in its environment"
		return
	}
	if r.Cgroups != "" {
		if dir, err := cgroup.Of(pid); err == nil && (dir == r.Cgroups || strings.HasPrefix(dir, r.Cgroups+"/")) {
			r.Why = who + " is in a run's cgroup, " + dir
		}
	}
}

// controllersPinned is [Controllers] for a process already held by pidfd;
// run, when set, is told each process of the walk (see [RunSigns]).
func controllersPinned(pidfd, pid int, run *RunSigns) ([]int, error) {
	if pidOfPidfd(pidfd) != pid {
		return nil, fmt.Errorf("controllers of pid %d: the process is gone", pid)
	}
	set := map[int]bool{}
	ttys := &ttyOwners{}
	cur, curfd := pid, pidfd
	top := false // reached pid 1 (or the top of our pid namespace)
	for range maxAncestry {
		ppid, err := readProcess(cur, cur == pid, set, ttys, run)
		if err != nil {
			return nil, fmt.Errorf("controllers of pid %d: %w", pid, err)
		}
		if unix.PidfdSendSignal(curfd, 0, nil, 0) != nil {
			return nil, fmt.Errorf("controllers of pid %d: pid %d exited while being read", pid, cur)
		}
		if ppid <= 0 {
			top = true // pid 1, or a parent outside our pid namespace
			break
		}
		pfd, err := unix.PidfdOpen(ppid, 0)
		if err != nil {
			return nil, fmt.Errorf("controllers of pid %d: ancestor %d: pidfd_open: %w", pid, ppid, err)
		}
		// With the parent pinned, the child (still pinned and alive) must
		// still name it: had the parent exited before pidfd_open, the
		// child would have been handed to another.
		again, err := parentOf(cur)
		if err != nil || again != ppid || unix.PidfdSendSignal(curfd, 0, nil, 0) != nil {
			unix.Close(pfd)
			return nil, fmt.Errorf("controllers of pid %d: the ancestry changed while being read", pid)
		}
		if curfd != pidfd {
			unix.Close(curfd)
		}
		cur, curfd = ppid, pfd
	}
	if curfd != pidfd {
		unix.Close(curfd)
	}
	if !top {
		return nil, fmt.Errorf("controllers of pid %d: more than %d ancestors", pid, maxAncestry)
	}
	uids := make([]int, 0, len(set))
	for u := range set {
		uids = append(uids, u)
	}
	slices.Sort(uids)
	return uids, nil
}

// readProcess adds the controllers of the single process pid to set and
// returns its parent's pid (0 for pid 1). first is set for the process
// whose controllers are asked for, as opposed to an ancestor.
func readProcess(pid int, first bool, set map[int]bool, ttys *ttyOwners, run *RunSigns) (ppid int, err error) {
	dir := "/proc/" + strconv.Itoa(pid)
	ppid, ttyNr, err := readStat(dir)
	if err != nil {
		return 0, err
	}
	if err := addStatusUIDs(dir, set); err != nil {
		return 0, err
	}
	if err := addLoginUID(dir, set); err != nil {
		return 0, err
	}
	// The environment is the approver's own to read; an ancestor's may be
	// closed to us (pid 1's in a container), and only adds uids anyway.
	env, err := os.ReadFile(dir + "/environ")
	if err != nil && first {
		return 0, err
	}
	run.look(pid, first, env)
	addSudoUID(env, set)
	if ttyNr != 0 {
		if u, ok := ttys.owner(uint64(ttyNr)); ok {
			set[u] = true
		}
	}
	addStdioOwners(dir, set)
	return ppid, nil
}

// addStatusUIDs adds the real, effective, saved and filesystem uids of
// the process at dir (its DIR/status Uid line) to set.
func addStatusUIDs(dir string, set map[int]bool) error {
	status, err := os.ReadFile(dir + "/status")
	if err != nil {
		return err
	}
	found := false
	for line := range strings.SplitSeq(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			for _, f := range strings.Fields(v) {
				u, err := strconv.Atoi(f)
				if err != nil {
					return fmt.Errorf("%s/status: bad Uid line", dir)
				}
				set[u] = true
			}
			found = true
		}
	}
	if !found {
		return fmt.Errorf("%s/status: no Uid line", dir)
	}
	return nil
}

// addLoginUID adds the login uid of the process at dir to set, unless it
// is unset; none when there is no DIR/loginuid.
func addLoginUID(dir string, set map[int]bool) error {
	b, err := os.ReadFile(dir + "/loginuid")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	if u, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 32); err == nil && u != unsetLoginUID {
		set[int(u)] = true
	}
	return nil
}

// addSudoUID adds each SUDO_UID of the environment env to set.
func addSudoUID(env []byte, set map[int]bool) {
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("SUDO_UID=")); ok {
			if u, err := strconv.ParseUint(string(v), 10, 32); err == nil {
				set[int(u)] = true
			}
		}
	}
}

// addStdioOwners adds to set the owner of each character device (a
// terminal, say) open on fds 0-2 of the process at dir.
func addStdioOwners(dir string, set map[int]bool) {
	for fd := range 3 {
		var st syscall.Stat_t
		if syscall.Stat(dir+"/fd/"+strconv.Itoa(fd), &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFCHR {
			set[int(st.Uid)] = true
		}
	}
}

// readStat reads the parent pid and the controlling terminal (tty_nr) from
// DIR/stat.
func readStat(dir string) (ppid, ttyNr int, err error) {
	b, err := os.ReadFile(dir + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command name in parentheses may hold anything: fields start after
	// the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("%s/stat: malformed", dir)
	}
	f := strings.Fields(string(b[i+1:])) // state ppid pgrp session tty_nr ...
	if len(f) < 5 {
		return 0, 0, fmt.Errorf("%s/stat: malformed", dir)
	}
	ppid, err1 := strconv.Atoi(f[1])
	ttyNr, err2 := strconv.Atoi(f[4])
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("%s/stat: malformed", dir)
	}
	return ppid, ttyNr, nil
}

// parentOf reads the parent pid of pid.
func parentOf(pid int) (int, error) {
	ppid, _, err := readStat("/proc/" + strconv.Itoa(pid))
	return ppid, err
}

// ttyOwners finds the owner of a terminal by its device number, looking
// through /dev/pts and /dev once.
type ttyOwners struct {
	byDev map[uint64]int
}

func (t *ttyOwners) owner(ttyNr uint64) (int, bool) {
	if t.byDev == nil {
		t.byDev = map[uint64]int{}
		for _, dir := range []string{"/dev/pts", "/dev"} {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				var st syscall.Stat_t
				if syscall.Stat(filepath.Join(dir, e.Name()), &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFCHR {
					continue
				}
				if _, seen := t.byDev[st.Rdev]; !seen {
					t.byDev[st.Rdev] = int(st.Uid)
				}
			}
		}
	}
	// tty_nr encodes major and minor as the kernel's new_encode_dev does,
	// which is also how glibc's makedev lays out st_rdev.
	major := uint32((ttyNr >> 8) & 0xfff)
	minor := uint32((ttyNr & 0xff) | ((ttyNr >> 12) & 0xfff00))
	u, ok := t.byDev[unix.Mkdev(major, minor)]
	return u, ok
}
