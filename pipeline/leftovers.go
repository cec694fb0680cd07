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
	entries := make([][]byte, len(tags))
	for i, t := range tags {
		entries[i] = []byte(RunEnvKey + "=" + t)
	}
	ids := map[int]bool{}      // process groups of the leaders
	sessions := map[int]bool{} // sessions of the leaders that lead one
	for _, l := range leaders {
		if l.Pid <= 1 {
			continue
		}
		if t := startTime(l.Pid); t != 0 && t != l.Start {
			continue // the pid is another process's now
		}
		ids[l.Pid] = true
		if l.Session {
			sessions[l.Pid] = true
		}
	}
	self := os.Getpid()
	match := func(pid int) bool {
		f, ok := statFields(pid)
		if !ok || len(f) < 4 || f[0] == "Z" { // gone, or a zombie: dead already
			return false
		}
		pgid, _ := strconv.Atoi(f[2])
		if sid, _ := strconv.Atoi(f[3]); ids[pgid] || sessions[sid] {
			return true
		}
		for _, e := range entries {
			if has, _ := hasEnv(pid, e); has {
				return true
			}
		}
		return false
	}
	killed := 0
	for range leftoverRounds {
		found := 0
		for _, pid := range allPids() {
			if pid == self || pid == 1 || !match(pid) {
				continue
			}
			// Checked again through a pidfd, so that a pid reused
			// meanwhile is never hit.
			pidfd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue
			}
			if match(pid) && unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0) == nil {
				found++
				waitExit(pidfd)
			}
			unix.Close(pidfd)
		}
		killed += found
		if found == 0 {
			break
		}
	}
	return killed
}
