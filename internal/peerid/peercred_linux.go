package peerid

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Info is the identity of a connected client, read from the kernel once at
// accept (SO_PEERCRED) and never from the request.
type Info struct {
	UID, GID, PID int
	// Groups are the peer's supplementary groups (SO_PEERGROUPS) as they
	// were when it connected: an unprivileged run gets these, not the
	// group database's, so a process that dropped groups cannot regain
	// them through rootgate.
	Groups []uint32
	// Exe is /proc/PID/exe read at accept while a pidfd held the peer:
	// the pidfd was still live after the read, so Exe is that process's.
	// With SO_PEERPIDFD (Linux 6.5) the pidfd is the peer's own, handed
	// over by the kernel; on older kernels it is pidfd_open(PID) right
	// after accept, which would pin a newcomer had the peer already exited
	// and its pid been reused in between. "" when it could not be read
	// (the peer exited, or its pid is not visible here).
	Exe string
	// ExeOwnNS is set when the peer's mount namespace is not the
	// daemon's, or could not be compared with it: Exe is then a path in a
	// namespace the peer may have made, and names no file of the daemon's.
	ExeOwnNS bool
}

// Of reads the credentials of the process at the other end of c.
func Of(c *net.UnixConn) (Info, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Info{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var groups []uint32
	var credErr, groupsErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		groups, groupsErr = peerGroups(int(fd))
	}); err != nil {
		return Info{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return Info{}, fmt.Errorf("peer credentials: getsockopt SO_PEERCRED: %w", credErr)
	}
	if groupsErr != nil {
		return Info{}, fmt.Errorf("peer credentials: getsockopt SO_PEERGROUPS: %w", groupsErr)
	}
	p := Info{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid), Groups: groups}
	p.Exe, p.ExeOwnNS = pinnedExe(rc, p.PID)
	return p, nil
}

// pinnedExe reads the executable of the peer process pid so that a
// recycled pid cannot lie: it holds a pidfd of the peer (SO_PEERPIDFD, or
// pidfd_open when the kernel lacks it), reads /proc/PID/exe, and keeps the
// answer only if the pidfd still names a live process afterwards. A pid
// is only reused once its process is gone, so a live pidfd proves the
// link was read from the peer itself. It returns "" when that cannot be
// shown. ownNS is set unless the peer was seen, while pinned, in the
// daemon's own mount namespace.
func pinnedExe(rc syscall.RawConn, pid int) (exe string, ownNS bool) {
	if pid <= 0 {
		return "", true // the peer is in a pid namespace we cannot see into
	}
	pidfd, err := pidfdOf(rc, pid)
	if err != nil {
		return "", true
	}
	defer unix.Close(pidfd)
	return exeOf(pidfd, pid)
}

// sameMountNS reports whether the process pid is in this process's mount
// namespace: /proc/PID/ns/mnt and /proc/self/ns/mnt are the same file.
// False when either cannot be read.
func sameMountNS(pid int) bool {
	var mine, theirs unix.Stat_t
	if unix.Stat("/proc/self/ns/mnt", &mine) != nil || unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/mnt", &theirs) != nil {
		return false
	}
	return mine.Dev == theirs.Dev && mine.Ino == theirs.Ino
}

// pidfdOf returns a pidfd of the socket's peer process pid: the
// kernel's (SO_PEERPIDFD), or on older kernels pidfd_open(pid).
func pidfdOf(rc syscall.RawConn, pid int) (int, error) {
	pidfd := -1
	_ = rc.Control(func(fd uintptr) {
		// SO_PEERPIDFD (Linux 6.5): a pidfd of the process that
		// connected, taken by the kernel at connect time.
		if v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD); err == nil {
			pidfd = v
		}
	})
	if pidfd >= 0 {
		return pidfd, nil
	}
	// Older kernel: pin whatever process has pid now. That is the peer
	// unless it exited and its pid was reused since accept, which nothing
	// here can tell (see Info.Exe).
	return unix.PidfdOpen(pid, 0)
}

// exeOf reads /proc/PID/exe of the process pidfd refers to, which must
// have pid, and whether it is in the daemon's mount namespace, and
// returns them only if that process is still alive after the reads;
// else "" and ownNS set.
func exeOf(pidfd, pid int) (exe string, ownNS bool) {
	// The pidfd must be of pid (a dead process's reads -1).
	if pidOfPidfd(pidfd) != pid {
		return "", true
	}
	exe, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
	if err != nil {
		return "", true
	}
	same := sameMountNS(pid)
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return "", true // the peer exited: the link may belong to a newcomer
	}
	return exe, !same
}

// pidOfPidfd reads the pid a pidfd refers to (the "Pid:" line of its
// fdinfo), or -1.
func pidOfPidfd(pidfd int) int {
	// A plain descriptor and one read: the fdinfo of a pidfd is a few
	// short lines, and os.ReadFile would also register the file with the
	// runtime's poller and take it out again.
	fd, err := unix.Open("/proc/self/fdinfo/"+strconv.Itoa(pidfd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	var buf [1024]byte
	n, err := unix.Read(fd, buf[:])
	unix.Close(fd)
	if err != nil || n <= 0 || n == len(buf) {
		return -1
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}

// peerGroups reads the supplementary groups of a Unix socket's peer
// (SO_PEERGROUPS, Linux 4.13). x/sys/unix has the option's number but no
// getsockopt for an array of gids, hence the raw call.
func peerGroups(fd int) ([]uint32, error) {
	n := 64
	for {
		buf := make([]uint32, n)
		size := uint32(4 * n)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&size)), 0)
		switch {
		case errno == unix.ERANGE && int(size)/4 > n:
			n = int(size) / 4 // size now says how much is needed
			continue
		case errno != 0:
			return nil, errno
		}
		return buf[:size/4], nil
	}
}
