package pipeline

import (
	"bytes"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Leader is a started stage's process: its pid, which is also the id of
// the process group it leads (and of its session, when Session), and its
// start time, in clock ticks after boot as /proc/PID/stat gives it (0
// when it had already ended).
type Leader struct {
	Pid     int    `json:"pid"`
	Start   uint64 `json:"start"`
	Session bool   `json:"session,omitempty"`
}

// startTime is pid's start time, from /proc/PID/stat; 0 when it cannot
// be read.
func startTime(pid int) uint64 {
	f, ok := statFields(pid)
	if !ok || len(f) < 20 {
		return 0
	}
	t, _ := strconv.ParseUint(f[19], 10, 64)
	return t
}

// statFields are the fields of /proc/PID/stat after the command name:
// state first.
func statFields(pid int) ([]string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, false
	}
	return strings.Fields(string(b[i+1:])), true
}

// leftoverRounds bounds how often KillLeftovers looks again: a process
// may fork while it is being looked for.
const leftoverRounds = 50

// KillLeftovers kills, with SIGKILL, every process of the runs of a
// process that died mid-run (a daemon killed or crashed), as far as they
// can be found without a cgroup: every process whose environment holds
// [RunEnvKey] with one of tags, and every process in the process group,
// or the session (Session), of one of leaders. A leader's group or
// session counts only while its id cannot be another's: its leader has
// ended (its id then stays taken as long as one process of the group or
// session lives), or is the very process recorded (same start time).
// It looks again until a round finds nothing, and returns how many
// processes it killed. A process that left its stage's process group and
// session and replaced its environment cannot be found.
func KillLeftovers(tags []string, leaders []Leader) int {
	l := newLeftovers(tags, leaders)
	self := os.Getpid()
	killed := 0
	for range leftoverRounds {
		found := 0
		for _, pid := range allPids() {
			if pid == self || pid == 1 || !l.match(pid) {
				continue
			}
			if l.kill(pid) {
				found++
			}
		}
		killed += found
		if found == 0 {
			break
		}
	}
	return killed
}

// leftovers is what KillLeftovers looks for.
type leftovers struct {
	entries  [][]byte     // RunEnvKey=TAG of each tag
	ids      map[int]bool // process groups of the leaders
	sessions map[int]bool // sessions of the leaders that lead one
}

// newLeftovers makes what KillLeftovers looks for of tags and leaders,
// leaving out each leader whose pid is another process's now.
func newLeftovers(tags []string, leaders []Leader) *leftovers {
	l := &leftovers{entries: make([][]byte, len(tags)), ids: map[int]bool{}, sessions: map[int]bool{}}
	for i, t := range tags {
		l.entries[i] = []byte(RunEnvKey + "=" + t)
	}
	for _, ld := range leaders {
		if ld.Pid <= 1 {
			continue
		}
		if t := startTime(ld.Pid); t != 0 && t != ld.Start {
			continue // the pid is another process's now
		}
		l.ids[ld.Pid] = true
		if ld.Session {
			l.sessions[ld.Pid] = true
		}
	}
	return l
}

// match reports whether pid, alive and not a zombie, is in one of the
// process groups or sessions, or has one of the tags in its environment.
func (l *leftovers) match(pid int) bool {
	f, ok := statFields(pid)
	if !ok || len(f) < 4 || f[0] == "Z" { // gone, or a zombie: dead already
		return false
	}
	pgid, _ := strconv.Atoi(f[2])
	if sid, _ := strconv.Atoi(f[3]); l.ids[pgid] || l.sessions[sid] {
		return true
	}
	for _, e := range l.entries {
		if has, _ := hasEnv(pid, e); has {
			return true
		}
	}
	return false
}

// kill kills pid, matched already, with SIGKILL and waits for it to
// exit, and reports whether it did. It checks it again through a pidfd,
// so that a pid reused meanwhile is never hit.
func (l *leftovers) kill(pid int) bool {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(pidfd)
	if l.match(pid) && unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0) == nil {
		waitExit(pidfd)
		return true
	}
	return false
}
