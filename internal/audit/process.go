package audit

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ThisDaemon is the calling process as its opened record names it: its
// pid, the boot id and its start time. A part that cannot be read (no
// /proc) is left out, and [Running] then decides by the pid alone.
func ThisDaemon(version string) *Daemon {
	d := &Daemon{Version: version, PID: os.Getpid()}
	if boot, err := bootID(); err == nil {
		d.BootID = boot
	}
	if start, err := startTime(d.PID); err == nil {
		d.Start = start
	}
	return d
}

// Running reports whether the daemon d is still running. A daemon named
// with its boot id and start time runs only if the machine has not booted
// since, a process with its pid exists, and that process started when d
// did: a process that took the pid over after d ended (or after a
// reboot) is not d. A daemon named by its pid alone (an opened record
// from before boot_id and start_time were recorded) runs while a process
// with that pid exists.
func Running(d Daemon) bool {
	if d.PID <= 0 {
		return false
	}
	if d.BootID == "" || d.Start == 0 {
		err := unix.Kill(d.PID, 0)
		return err == nil || err == unix.EPERM
	}
	if boot, err := bootID(); err != nil || boot != d.BootID {
		return false
	}
	start, err := startTime(d.PID)
	return err == nil && start == d.Start
}

// same reports whether a and b name the same process: the same pid, boot
// id and start time (a daemon named by its pid alone is no process that
// names itself with all three).
func same(a, b Daemon) bool {
	return a.PID == b.PID && a.BootID == b.BootID && a.Start == b.Start
}

// bootID is this boot's id.
func bootID() (string, error) {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return "", err
	}
	id := string(bytes.TrimSpace(b))
	if id == "" {
		return "", errors.New("empty boot id")
	}
	return id, nil
}

// startTime is the start time of process pid, in clock ticks since boot:
// field 22 of /proc/PID/stat.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// Field 2, the command's name in parentheses, may hold spaces and
	// parentheses itself: the fields after it follow its last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	const field = 22 - 3 // f[0] is field 3
	if len(f) <= field {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	start, err := strconv.ParseUint(f[field], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return start, nil
}
