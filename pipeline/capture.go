package pipeline

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// DefaultCap is how many bytes of each captured stream a run keeps when
// [Cmd].Cap is 0.
const DefaultCap = 16 << 20

// Capture is the start of a captured output stream. The kept bytes are
// held as a list of chunks, each allocated when the one before is full and
// read into straight from the pipe: they are copied once, from the kernel,
// and never again to grow. Read them with [Capture.WriteTo] or
// [Capture.Chunks]; [Capture.Bytes] joins them into a new slice.
type Capture struct {
	Truncated bool  // more than Cap bytes were written
	Total     int64 // bytes written in all

	chunks [][]byte // the kept bytes in order; all but the last are full
	n      int      // kept bytes, the chunks' lengths summed
}

// Len is how many bytes were kept: the first Cap bytes, or all of them.
func (c *Capture) Len() int { return c.n }

// Chunks returns the kept bytes in order, as the capture holds them (not
// copies): the caller must not modify them.
func (c *Capture) Chunks() [][]byte { return c.chunks }

// Bytes returns the kept bytes joined into one new slice (nil when there
// are none). It copies them all: for small captures and tests; a big one
// is read with WriteTo or Chunks.
func (c *Capture) Bytes() []byte {
	if c.n == 0 {
		return nil
	}
	b := make([]byte, 0, c.n)
	for _, ch := range c.chunks {
		b = append(b, ch...)
	}
	return b
}

// WriteTo writes the kept bytes to w, chunk by chunk.
func (c *Capture) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, ch := range c.chunks {
		m, err := w.Write(ch)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// drain reads f to its end into c, keeping the first limit bytes. While
// under the limit it reads straight into c's last chunk, so kept output is
// copied once, from the kernel. Past the limit it drops the rest without
// copying it: splice(2) moves it from the pipe to /dev/null (or, where
// that fails, it is read into a scratch buffer). When f's deadline passes
// it takes what is left in the pipe and returns.
func drain(f *os.File, c *Capture, limit int) {
	var scratch []byte // allocated only if splice cannot be used
	spliceOK := true
	for {
		var buf []byte
		switch {
		case c.n < limit:
			buf = c.room(limit)
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
		if c.n < limit {
			c.kept(n)
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

// Capture chunk sizes: the first chunk, how much bigger each next one is
// until they reach captureChunk, and the scratch buffer output past the
// cap is read into where splice cannot be used. A full chunk is never
// copied and no chunk goes past the limit, so a quiet stream costs
// captureStart bytes and a stream that reaches the cap has allocated the
// cap and nothing more, which bounds a capturing run's memory
// (docs/performance.md). The fourfold steps keep a short output's unused
// room under three quarters of its last chunk; the 1 MiB ones keep a
// full capture's allocations few (20 at a 16 MiB cap).
const (
	captureStart = 4 << 10
	captureGrow  = 4
	captureChunk = 1 << 20
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
	written := len(p)
	for keep := min(len(p), limit-c.n); keep > 0; keep = min(len(p), limit-c.n) {
		n := copy(c.room(limit), p[:keep])
		c.kept(n)
		p = p[n:]
	}
	c.count(written, limit)
}

// count records n more bytes written to the stream.
func (c *Capture) count(n, limit int) {
	c.Total += int64(n)
	if c.Total > int64(limit) {
		c.Truncated = true
	}
}

// room returns the free space at the end of the last chunk, first adding
// a chunk when the last one is full: captureStart bytes, then captureGrow
// times the one before up to captureChunk, never past limit. c.n must be
// under limit. Bytes read into the space are recorded with kept.
func (c *Capture) room(limit int) []byte {
	k := len(c.chunks)
	if k > 0 {
		if last := c.chunks[k-1]; len(last) < cap(last) {
			return last[len(last):cap(last)]
		}
	}
	size := captureStart
	if k > 0 {
		size = min(captureGrow*cap(c.chunks[k-1]), captureChunk)
	}
	chunk := make([]byte, min(size, limit-c.n))
	c.chunks = append(c.chunks, chunk[:0])
	return chunk
}

// kept records that n bytes were read into the space room returned.
func (c *Capture) kept(n int) {
	if n <= 0 {
		return
	}
	last := &c.chunks[len(c.chunks)-1]
	*last = (*last)[:len(*last)+n]
	c.n += n
}
