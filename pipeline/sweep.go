package pipeline

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// RunEnvKey names the variable every stage of a run gets on top of
// [Cmd].Env: a random tag of that run alone. When the run ends, every
// process whose environment still holds the tag is killed, which finds
// processes that left their stage's process group or session (setsid, a
// double fork) as long as they kept the environment they inherited. A
// process that replaces its environment (exec with a new one, or
// overwriting its own) is not found.
const RunEnvKey = "ROOTGATE_RUN"

// newRunTag makes a run's tag.
func newRunTag() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails on Linux
	return hex.EncodeToString(b[:])
}

// sweepRounds bounds how often sweep rescans /proc: a process still
// forking is killed in the first round or two, so this only stops a
// pathological race from keeping the daemon here.
const sweepRounds = 20

// sweep kills every process whose environment holds RunEnvKey=tag, rescans
// until a scan finds none (or sweepRounds), and returns how many it
// killed.
func sweep(tag string) int {
	entry := []byte(RunEnvKey + "=" + tag)
	killed := 0
	for range sweepRounds {
		found := 0
		for _, pid := range taggedPids(entry) {
			// Pin the process, then check it again: the pid may have
			// been reused between the scan and the pidfd.
			pidfd, err := unix.PidfdOpen(pid, 0)
			if err != nil {
				continue
			}
			if hasEnv(pid, entry) && unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0) == nil {
				found++
			}
			unix.Close(pidfd)
		}
		if found == 0 {
			break
		}
		killed += found
	}
	return killed
}

// taggedPids lists the processes whose environment holds entry.
func taggedPids(entry []byte) []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	self := os.Getpid()
	var pids []int
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid == self {
			continue
		}
		if hasEnv(pid, entry) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// hasEnv reports whether process pid's environment holds entry exactly.
func hasEnv(pid int, entry []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for e := range bytes.SplitSeq(b, []byte{0}) {
		if bytes.Equal(e, entry) {
			return true
		}
	}
	return false
}
