package pipeline

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// RunEnvKey names the variable every stage of a run gets on top of
// [Cmd].Env: a random tag of that run alone. When the run ends, every
// process whose environment still holds the tag is killed, which finds
// processes that left their stage's process group or session (setsid, a
// double fork) as long as they kept the environment they inherited. A
// process that replaces its environment (exec with a new one, or
// overwriting its own) is not found.
//
// Escaped processes are looked for among the calling process's own
// children, which is where they are once [Subreaper] was called: without
// it an orphan goes to init and is not found.
const RunEnvKey = "ROOTGATE_RUN"

// Subreaper makes the calling process the reaper of its orphaned
// descendants (PR_SET_CHILD_SUBREAPER): a process that leaves its stage's
// process group and outlives its parent becomes the caller's child instead
// of init's, and the end of its run finds it there by its tag, kills it and
// reaps it. Call it once, before the first Run.
//
// From then on Run also reaps orphans that exited by themselves (zombies
// in a process group other than the caller's, not started by this
// package), so the caller must start its other children in its own
// process group, as os/exec does unless told otherwise.
func Subreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// reaper knows which children this package is waiting for, so that a
// sweep never reaps another run's stage. A stage holds starting for reading
// from before its start until it is registered, so a sweep, which holds it
// for writing while it looks, never sees a new stage unregistered; stages
// still start in parallel.
var reaper = struct {
	starting sync.RWMutex
	mu       sync.Mutex   // guards stages
	stages   map[int]bool // pids of started stages not yet reaped by Run
}{stages: map[int]bool{}}

func registered(pid int) bool {
	reaper.mu.Lock()
	defer reaper.mu.Unlock()
	return reaper.stages[pid]
}

// NewRunTag makes a run's tag (see [Cmd].Tag).
func NewRunTag() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return hex.EncodeToString(b[:])
}

// sweepRounds bounds how often sweep looks again: killing an escaped
// process hands its own children to the reaper, found in the next round.
const sweepRounds = 20

// sweep kills every child of this process whose environment holds
// RunEnvKey=tag, reaps it and the orphans that exited meanwhile, and looks
// again until a round kills no new process (or sweepRounds). The kills and
// the waits for them happen outside the lock: a process holding this run's
// tag is no other run's stage.
func sweep(tag string) {
	entry := []byte(RunEnvKey + "=" + tag)
	own := ownGroup()
	killed := map[int]bool{}
	pause := time.Millisecond
	for range sweepRounds {
		var tagged, exiting []int
		unsure := false
		reaper.starting.Lock()
		for _, pid := range children() {
			if registered(pid) {
				continue
			}
			// Looked at for the tag first: a process whose first
			// thread has exited shows as a zombie while its other
			// threads run on.
			state, grp, flags, ok := procStatFlags(pid)
			if !ok {
				continue
			}
			has, env := hasEnv(pid, entry)
			switch {
			case has:
				tagged = append(tagged, pid)
			case state == 'Z' && grp != own: // an orphan that ended by itself
				reap(pid)
			case flags&pfExiting != 0 && grp != own:
				// Killed with its group, or ending by itself, and its
				// environment already gone: a zombie in a moment.
				exiting = append(exiting, pid)
			case !env && grp != own:
				// No environment to read: in the middle of an exec
				// (a setsid exec'ing its command shows none from the
				// switch to the new image until that image's
				// environment is set up), or one that emptied its
				// own. Looked at again shortly.
				unsure = true
			}
		}
		reaper.starting.Unlock()
		for _, pid := range exiting {
			reapExiting(pid)
		}
		found := 0
		for _, pid := range tagged {
			if killAndReap(pid, entry) && !killed[pid] {
				killed[pid] = true
				found++
			}
		}
		if found == 0 {
			if !unsure || pause > maxUnsurePause {
				return
			}
			time.Sleep(pause)
			pause *= 2
		}
	}
}

// maxUnsurePause bounds the pauses sweep makes for a child with no
// environment to read, 1 ms doubling up to it (31 ms in all): an exec
// sets the new image's up well within that, and a process that emptied
// its own environment, which the sweep cannot tell from others', costs
// each later run's end no more.
const maxUnsurePause = 16 * time.Millisecond

// killAndReap kills pid if it still holds entry, checked again through a
// pidfd so a reused pid is never hit, waits for it to die and reaps it.
// A process that no longer shows entry because it has ended or is ending
// (killed with its group since it was listed: its memory, and so its
// environment, goes first) is waited for and reaped all the same.
func killAndReap(pid int, entry []byte) bool {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(pidfd)
	if has, _ := hasEnv(pid, entry); !has {
		if state, _, flags, ok := procStatFlags(pid); !ok || state != 'Z' && flags&pfExiting == 0 {
			return false
		}
	} else if unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0) != nil {
		return false
	}
	waitExit(pidfd)
	reap(pid)
	return true
}

// waitExit waits, up to a second, until the process of pidfd has exited:
// by then its own children have been handed to this process.
func waitExit(pidfd int) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, 1000); err != unix.EINTR {
			return
		}
	}
}

// reapExiting waits for pid, a child on its way out that is none of the
// stages, to exit, and reaps it. The pidfd names the process found,
// whatever happens to its pid meanwhile; no stage is started with a pid
// of a child not yet reaped, so it is no stage.
func reapExiting(pid int) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(pidfd)
	waitExit(pidfd)
	reap(pid)
}

// reap collects a child that has exited, without blocking.
func reap(pid int) {
	var ws unix.WaitStatus
	_, _ = unix.Wait4(pid, &ws, unix.WNOHANG, nil)
}

// children lists this process's children: those of every thread, since
// the kernel hands orphans over to the first live thread of the reaper,
// and a stage's clone with CLONE_PARENT makes its child one of the thread
// that started the stage. Where the kernel has no children files
// (CONFIG_PROC_CHILDREN), it lists every process instead.
func children() []int {
	// Read with plain system calls into buffers on the stack: the
	// fallback sweeps after every run, and a daemon has a dozen threads.
	dir, err := unix.Open("/proc/self/task", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return allPids()
	}
	defer unix.Close(dir)
	var dents [4096]byte
	var buf [4096]byte
	var pids []int
	for {
		n, err := unix.Getdents(dir, dents[:])
		if err != nil {
			return allPids()
		}
		if n == 0 {
			return pids
		}
		// struct linux_dirent64: d_ino, d_off (8 bytes each), d_reclen
		// (2), d_type (1), then the name, NUL-terminated.
		for off := 0; off < n; {
			reclen := int(binary.NativeEndian.Uint16(dents[off+16:]))
			name, _, _ := bytes.Cut(dents[off+19:off+reclen], []byte{0})
			off += reclen
			if len(name) == 0 || name[0] == '.' {
				continue
			}
			fd, err := unix.Openat(dir, string(name)+"/children", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == unix.ENOENT { // a thread that ended meanwhile
				continue
			}
			if err != nil {
				return allPids()
			}
			pid := -1
			for {
				m, err := unix.Read(fd, buf[:])
				if err == unix.EINTR {
					continue
				}
				if err != nil || m <= 0 {
					break
				}
				// Pids separated by spaces; one may span two reads.
				for _, c := range buf[:m] {
					switch {
					case '0' <= c && c <= '9':
						pid = max(pid, 0)*10 + int(c-'0')
					case pid >= 0:
						pids, pid = append(pids, pid), -1
					}
				}
			}
			if pid >= 0 {
				pids = append(pids, pid)
			}
			unix.Close(fd)
		}
	}
}

// reapStrays reaps the children of this process that have exited and are
// none of its stages, as sweep does, for a run in a cgroup, which has no
// sweep: a stage can make its children this process's own (clone with
// CLONE_PARENT), and nothing else waits for them, so each would stay a
// zombie, holding its pid, as long as the daemon runs. Zombies of this
// process's own process group are left alone, as sweep leaves them:
// children this process started otherwise are there (every stage leads a
// group of its own).
func reapStrays() {
	// Most runs leave none: one call says whether any child has exited.
	var info unix.Siginfo
	if err := unix.Waitid(unix.P_ALL, 0, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil); err != nil || info.Signo == 0 {
		return
	}
	own := ownGroup()
	reaper.starting.Lock()
	defer reaper.starting.Unlock()
	for _, pid := range children() {
		if state, grp, ok := procStat(pid); ok && state == 'Z' && grp != own && !registered(pid) {
			reap(pid)
		}
	}
}

// allPids lists every process but this one.
func allPids() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	self := os.Getpid()
	var pids []int
	for _, name := range names {
		if pid, err := strconv.Atoi(name); err == nil && pid != self {
			pids = append(pids, pid)
		}
	}
	return pids
}

// group is a process's session and process group ids.
type group struct{ sid, pgid int }

// ownGroup is this process's session and process group. A zombie child in
// it is one this process started other than through this package (which
// puts every stage in a group of its own), waited for elsewhere; one in
// any other group, even of this session (a root stage's background
// process orphaned to the subreaper, or its clone with CLONE_PARENT), is
// a run's and nothing else waits for it.
func ownGroup() group {
	sid, _ := unix.Getsid(0)
	return group{sid, unix.Getpgrp()}
}

// procStat reads pid's state letter, session and process group from
// /proc/PID/stat.
func procStat(pid int) (state byte, g group, ok bool) {
	state, g, _, ok = procStatFlags(pid)
	return state, g, ok
}

// pfExiting is the kernel's PF_EXITING, in /proc/PID/stat's flags: the
// process is on its way out (its memory, and so its environment, may
// already be gone) and is not a zombie yet.
const pfExiting = 0x4

// procStatFlags is procStat with the process's flags (PF_*).
func procStatFlags(pid int) (state byte, g group, flags uint64, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, g, 0, false
	}
	// "pid (comm) state ppid pgrp session tty_nr tpgid flags ...": comm
	// may hold anything, so split after its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, g, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 7 || len(f[0]) != 1 {
		return 0, g, 0, false
	}
	pgid, err1 := strconv.Atoi(f[2])
	sid, err2 := strconv.Atoi(f[3])
	flags, err3 := strconv.ParseUint(f[6], 10, 64)
	return f[0][0], group{sid, pgid}, flags, err1 == nil && err2 == nil && err3 == nil
}

// hasEnv reports whether process pid's environment holds entry exactly,
// and whether it had an environment to read at all (none: it could not
// be read, or was empty).
// /proc/PID/environ of a process whose first thread has exited (the exit
// system call, not exit_group) cannot be read while its other threads run
// on with that environment: then it is read through those.
func hasEnv(pid int, entry []byte) (has, env bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(dir + "/environ")
	if err != nil {
		// Every live thread has the same: the first one read will do.
		tasks, _ := os.ReadDir(dir + "/task")
		for _, task := range tasks {
			if b, err = os.ReadFile(dir + "/task/" + task.Name() + "/environ"); err == nil {
				break
			}
		}
		if err != nil {
			return false, false
		}
	}
	for e := range bytes.SplitSeq(b, []byte{0}) {
		if bytes.Equal(e, entry) {
			return true, true
		}
	}
	return false, len(b) > 0
}

// tagEntries is how many entries the run's tag adds at the end of its
// environment: one, unless the run has none (it runs in a cgroup).
func tagEntries(tag string) int {
	if tag == "" {
		return 0
	}
	return 1
}
