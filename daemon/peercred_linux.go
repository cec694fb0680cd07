package daemon

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Peer is the identity of a connected client, read from the kernel once at
// accept (SO_PEERCRED) and never from the request.
type Peer struct {
	UID, GID, PID int
	// Groups are the peer's supplementary groups (SO_PEERGROUPS) as they
	// were when it connected: an unprivileged run gets these, not the
	// group database's, so a process that dropped groups cannot regain
	// them through rootgate.
	Groups []uint32
	Exe    string // /proc/PID/exe at accept; "" when unreadable
}

// peerOf reads the credentials of the process at the other end of c.
func peerOf(c *net.UnixConn) (Peer, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var groups []uint32
	var credErr, groupsErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
		groups, groupsErr = peerGroups(int(fd))
	}); err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return Peer{}, fmt.Errorf("peer credentials: getsockopt SO_PEERCRED: %w", credErr)
	}
	if groupsErr != nil {
		return Peer{}, fmt.Errorf("peer credentials: getsockopt SO_PEERGROUPS: %w", groupsErr)
	}
	p := Peer{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid), Groups: groups}
	p.Exe, _ = os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/exe")
	return p, nil
}

// soPeerGroups is SO_PEERGROUPS (Linux 4.13), the same number on every
// architecture but missing from x/sys/unix for some.
const soPeerGroups = 0x3b

// peerGroups reads the supplementary groups of a Unix socket's peer.
func peerGroups(fd int) ([]uint32, error) {
	n := 64
	for {
		buf := make([]uint32, n)
		size := uint32(4 * n)
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, soPeerGroups,
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

// watchHangup returns a channel closed when the peer fully closes its end
// of c (POLLHUP; a half-close only raises POLLRDHUP and is ignored), and a
// stop function that ends the watch. The watch never reads from c, so the
// bytes of the request line and anything after it stay untouched.
func watchHangup(c *net.UnixConn) (hup <-chan struct{}, stop func()) {
	ch := make(chan struct{})
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		// Without an eventfd the watch could not be stopped; a request is
		// then only cancelled by its own limits.
		return ch, func() {}
	}
	rc, err := c.SyscallConn()
	if err != nil {
		unix.Close(efd)
		return ch, func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = rc.Control(func(fd uintptr) {
			fds := []unix.PollFd{{Fd: int32(fd)}, {Fd: int32(efd), Events: unix.POLLIN}}
			for {
				_, err := unix.Poll(fds, -1)
				if err == unix.EINTR {
					continue
				}
				if err != nil || fds[1].Revents != 0 {
					return
				}
				if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
					close(ch)
					return
				}
			}
		})
	}()
	return ch, func() {
		var one = []byte{1, 0, 0, 0, 0, 0, 0, 0}
		_, _ = unix.Write(efd, one)
		<-done
		unix.Close(efd)
	}
}
