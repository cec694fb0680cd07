package daemon

import (
	"net"
	"time"

	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sys/unix"
)

// streamEnded reports whether the peer has ended its stream (half-closed
// or closed) by now, without waiting or reading.
func streamEnded(c *net.UnixConn) bool {
	rc, err := c.SyscallConn()
	if err != nil {
		return false
	}
	ended := false
	_ = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP}}
		for {
			_, err := unix.Poll(fds, 0)
			if err == unix.EINTR {
				continue
			}
			ended = err == nil && fds[0].Revents&(unix.POLLRDHUP|unix.POLLHUP) != 0
			return
		}
	})
	return ended
}

// watchHangup calls eof when the peer ends its stream (POLLRDHUP: a
// half-close, or a full close), then hup if the peer fully closes its end
// of c (POLLHUP), each at most once and from the watching goroutine; stop
// ends the watch. What a half-close means is the caller's business: it
// withdraws only a request that said so (eof_withdraws). The watch never
// reads from c, so the bytes of the request line and anything after it
// stay untouched; it looks (MSG_PEEK) at what the peer sent after its
// line, and calls closed once, when that begins with the stream's
// control line wire.CloseStdout.
func watchHangup(c *net.UnixConn, eof, hup, closed func()) (stop func()) {
	rc, err := c.SyscallConn()
	if err != nil {
		return func() {}
	}
	// The runtime's poller watches the socket (edge-triggered, for
	// readability and for the peer's hangup), so no thread waits in
	// poll(2) for each request: the goroutine sleeps until the socket's
	// state changes, then looks without waiting. stop ends the wait with
	// a read deadline in the past; nothing else reads c after its line.
	done := make(chan struct{})
	go func() {
		defer close(done)
		eofSeen, closeSeen := false, false
		var peek [len(wire.CloseStdout)]byte
		_ = rc.Read(func(fd uintptr) bool {
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLRDHUP | unix.POLLIN}}
			for {
				_, err := unix.Poll(fds, 0)
				if err == unix.EINTR {
					continue
				}
				if err != nil {
					return true // cannot watch: a request is then only cancelled by its own limits
				}
				break
			}
			ev := fds[0].Revents
			if ev&unix.POLLIN != 0 && !closeSeen {
				n, _, err := unix.Recvfrom(int(fd), peek[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
				if err == nil && n == len(peek) && string(peek[:]) == wire.CloseStdout {
					closeSeen = true
					closed()
				}
			}
			if ev&(unix.POLLRDHUP|unix.POLLHUP) != 0 && !eofSeen {
				eofSeen = true
				eof()
			}
			if ev&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
				hup()
				return true
			}
			return false // wait for the socket's next change
		})
	}()
	return func() {
		_ = c.SetReadDeadline(time.Unix(1, 0))
		<-done
	}
}
