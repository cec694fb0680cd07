package daemon

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Peer is the identity of a connected client, read from the kernel once at
// accept (SO_PEERCRED) and never from the request.
type Peer struct {
	UID, GID, PID int
	Exe           string // /proc/PID/exe at accept; "" when unreadable
}

// peerOf reads the credentials of the process at the other end of c.
func peerOf(c *net.UnixConn) (Peer, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, fmt.Errorf("peer credentials: %w", err)
	}
	if credErr != nil {
		return Peer{}, fmt.Errorf("peer credentials: getsockopt SO_PEERCRED: %w", credErr)
	}
	p := Peer{UID: int(cred.Uid), GID: int(cred.Gid), PID: int(cred.Pid)}
	p.Exe, _ = os.Readlink("/proc/" + strconv.Itoa(p.PID) + "/exe")
	return p, nil
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
