package pipeline

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// DefaultCap is how many bytes of each captured stream a run keeps when
// [Cmd].Cap is 0.
const DefaultCap = 16 << 20

// Capture is the start of a captured output stream.
type Capture struct {
	Data      []byte // the first Cap bytes
	Truncated bool   // more than Cap bytes were written
	Total     int64  // bytes written in all
}

// drain reads f to its end into c, keeping the first limit bytes. While
// under the limit it reads straight into c.Data, so kept output is copied
// once, from the kernel. Past the limit it drops the rest without copying
// it: splice(2) moves it from the pipe to /dev/null (or, where that fails,
// it is read into a scratch buffer). When f's deadline passes it takes
// what is left in the pipe and returns.
func drain(f *os.File, c *Capture, limit int) {
	var scratch []byte // allocated only if splice cannot be used
	spliceOK := true
	for {
		var buf []byte
		switch {
		case len(c.Data) < limit:
			c.grow(len(c.Data)+1, limit)
			buf = c.Data[len(c.Data):cap(c.Data)]
		case spliceOK:
			err := c.discard(f, limit)
			if errors.Is(err, errNoSplice) {
				spliceOK = false
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				drainBuffered(f, c, limit, make([]byte, discardBuf))
			}
			return
		default:
			if scratch == nil {
				scratch = make([]byte, discardBuf)
			}
			buf = scratch
		}
		n, err := f.Read(buf)
		if len(c.Data) < limit {
			c.Data = c.Data[:len(c.Data)+n]
		}
		c.count(n, limit)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if scratch == nil {
				scratch = make([]byte, discardBuf)
			}
			drainBuffered(f, c, limit, scratch)
		}
		return
	}
}

// errNoSplice: discard could not splice, and read nothing.
var errNoSplice = errors.New("splice to /dev/null not possible")

// discard moves what is written to the pipe f to /dev/null with
// splice(2), counting it, until the writers close it (nil) or f's read
// deadline passes (os.ErrDeadlineExceeded). The bytes never reach this
// process. It returns errNoSplice, having read nothing, when splice cannot
// be used here.
func (c *Capture) discard(f *os.File, limit int) error {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return errNoSplice
	}
	defer null.Close()
	nfd := int(null.Fd())
	rc, err := f.SyscallConn()
	if err != nil {
		return errNoSplice
	}
	spliced := false
	for {
		var n int64
		var serr error
		err := rc.Read(func(fd uintptr) bool {
			n, serr = unix.Splice(int(fd), nil, nfd, nil, 1<<20, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			return serr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return err
		case serr == unix.EINTR:
			continue
		case serr != nil && !spliced:
			return errNoSplice
		case serr != nil:
			return serr
		case n == 0:
			return nil // end of file
		}
		spliced = true
		c.count(int(n), limit)
	}
}

// Capture buffer sizes: the first allocation, the growth factor, and the
// scratch buffer output past the cap is read into. A quiet stream costs
// captureStart bytes; a stream that reaches the cap has allocated about
// 4/3 of it in all, and holds at most 5/4 of it while growing the last
// time, which bounds a capturing run's memory (docs/performance.md).
const (
	captureStart = 4 << 10
	captureGrow  = 4
	discardBuf   = 64 << 10
)

// drainBuffered reads what f's pipe holds without waiting for more: Read
// returns nothing once the deadline has passed, even when data is there.
func drainBuffered(f *os.File, c *Capture, limit int, buf []byte) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		// Read at most one pipe's worth, so a writer cannot keep us here.
		left, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
		if err != nil {
			return
		}
		for left > 0 {
			n, err := unix.Read(int(fd), buf[:min(left, len(buf))])
			if err == unix.EINTR {
				continue
			}
			if n <= 0 {
				return
			}
			c.write(buf[:n], limit)
			left -= n
		}
	})
}

// write records p as written to the stream, keeping the first limit bytes.
func (c *Capture) write(p []byte, limit int) {
	if keep := min(len(p), limit-len(c.Data)); keep > 0 {
		c.grow(len(c.Data)+keep, limit)
		c.Data = append(c.Data, p[:keep]...)
	}
	c.count(len(p), limit)
}

// count records n more bytes written to the stream.
func (c *Capture) count(n, limit int) {
	c.Total += int64(n)
	if c.Total > int64(limit) {
		c.Truncated = true
	}
}

// grow makes Data's capacity at least need bytes (need is at most limit):
// captureGrow times the current capacity, at least captureStart, never
// beyond limit.
func (c *Capture) grow(need, limit int) {
	if need <= cap(c.Data) {
		return
	}
	size := min(max(captureGrow*cap(c.Data), captureStart, need), limit)
	grown := make([]byte, len(c.Data), size)
	copy(grown, c.Data)
	c.Data = grown
}
