package pipeline

import (
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// DefaultCap is how many bytes a run keeps of its last stage's stdout, and
// of all its stages' stderr together, when [Cmd].Cap is 0.
const DefaultCap = 16 << 20

// budget is how many more bytes the captures sharing it may allocate. A
// run has two: one for its stdout, one that all its stages' stderr
// captures draw on, so that what a run holds does not grow with its number
// of stages. It only ever shrinks: a capture that found it spent keeps
// nothing more, so what each keeps is a prefix of its stream.
type budget struct{ left atomic.Int64 }

// take reserves up to n bytes of b and returns how many it got, 0 once b
// is spent.
func (b *budget) take(n int) int {
	for {
		left := b.left.Load()
		if left <= 0 {
			return 0
		}
		got := min(left, int64(n))
		if b.left.CompareAndSwap(left, left-got) {
			return int(got)
		}
	}
}

// Capture is the start of a captured output stream. The kept bytes are
// held as a list of chunks, each allocated when the one before is full and
// the stream has another byte for it, and read into straight from the
// pipe: they are copied once, from the kernel, and never again to grow
// (the first byte of each chunk alone is read first on its own, see
// drain). Read them with [Capture.WriteTo] or
// [Capture.Chunks]; [Capture.Bytes] joins them into a new slice.
//
// A stdout written to [Cmd].StdoutTo as it is read holds no bytes: its
// Len, Total and Truncated say what was kept as for any capture, and its
// SHA256 is that of the kept bytes, which went to the writer.
type Capture struct {
	Truncated bool  // not every byte written was kept
	Total     int64 // bytes written in all
	// SHA256, for a stdout written to [Cmd].StdoutTo, is the SHA-256 of
	// its kept bytes, hashed as they were read; nil for a capture that
	// holds them (hash its Chunks).
	SHA256 []byte

	chunks [][]byte // the kept bytes in order; all but the last are full
	n      int      // kept bytes, the chunks' lengths summed
}

// Len is how many bytes were kept: all of them, or those written before
// the stream's budget was spent (see [Cmd].Cap).
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

// drain reads f to its end into c, keeping what b lets it allocate. While
// b lasts it reads straight into c's last chunk, so kept output is copied
// once, from the kernel (but for the first byte of each chunk: see
// probe). Once b is spent it drops the rest without copying it: splice(2)
// moves it from the pipe to /dev/null (or, where that fails, it is read
// into a scratch buffer). When f's deadline passes it takes what is left
// in the pipe and returns.
func drain(f *os.File, c *Capture, b *budget) {
	for {
		var err error
		if buf := c.free(); len(buf) > 0 {
			var n int
			n, err = f.Read(buf)
			c.kept(n)
			c.count(n)
		} else {
			var keep bool
			if keep, err = c.probe(f, b); err == nil && !keep {
				c.dropRest(f, nil)
				return
			}
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				drainBuffered(f, c, b, make([]byte, discardBuf))
			}
			return
		}
	}
}

// dropRest counts what is left of f, once c keeps nothing more, and
// throws it away without copying it where it can: splice(2) moves it to
// /dev/null (see discard), else it is read into buf (or a buffer made
// for it). When f's deadline passes it takes what is left in the pipe
// and returns.
func (c *Capture) dropRest(f *os.File, buf []byte) {
	scratch := func() []byte {
		if len(buf) < discardBuf {
			buf = make([]byte, discardBuf)
		}
		return buf
	}
	err := c.discard(f)
	if errors.Is(err, errNoSplice) {
		for err = nil; err == nil; {
			var n int
			n, err = f.Read(scratch())
			c.count(n)
		}
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		readBuffered(f, scratch(), func(p []byte) { c.count(len(p)) })
	}
}

// probe waits for the next byte of f and keeps it as the first of a new
// chunk, if b has room for one: a chunk is charged to b whole, so it is
// taken only once there is a byte to put in it, and a quiet stream costs
// nothing. It reports false once b is spent: the byte is then counted but
// not kept, and c keeps nothing more. Its error is f.Read's.
func (c *Capture) probe(f *os.File, b *budget) (keep bool, err error) {
	var first [1]byte
	n, err := f.Read(first[:])
	if n == 0 {
		return true, err
	}
	room := c.grow(b)
	if len(room) > 0 {
		room[0] = first[0]
		c.kept(1)
	}
	c.count(1)
	return len(room) > 0, err
}

// errNoSplice: discard could not splice, and read nothing.
var errNoSplice = errors.New("splice to /dev/null not possible")

// discard moves what is written to the pipe f to /dev/null with
// splice(2), counting it, until the writers close it (nil) or f's read
// deadline passes (os.ErrDeadlineExceeded). The bytes never reach this
// process. It returns errNoSplice, having read nothing, when splice cannot
// be used here.
func (c *Capture) discard(f *os.File) error {
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
		c.count(int(n))
	}
}

// Capture chunk sizes: the first chunk, how much bigger each next one is
// until they reach captureChunk, and the scratch buffer output past the
// cap is read into where splice cannot be used. A full chunk is never
// copied and no chunk goes past the limit, so a quiet stream costs
// captureStart bytes and a stream that reaches the cap has allocated the
// cap and nothing more, which bounds a capturing run's memory
// (docs/performance.md): a chunk is charged to the budget whole when it
// is allocated, so the captures sharing a budget allocate no more than it
// together. The fourfold steps keep a short output's unused
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
func drainBuffered(f *os.File, c *Capture, b *budget, buf []byte) {
	readBuffered(f, buf, func(p []byte) { c.write(p, b) })
}

// readBuffered reads at most one pipe's worth of what f's pipe holds, into
// buf, without waiting for more, and hands each read to got.
func readBuffered(f *os.File, buf []byte, got func([]byte)) {
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
			got(buf[:n])
			left -= n
		}
	})
}

// write records p as written to the stream, keeping what b allows.
func (c *Capture) write(p []byte, b *budget) {
	written := len(p)
	for len(p) > 0 {
		room := c.room(b)
		if len(room) == 0 {
			break
		}
		n := copy(room, p)
		c.kept(n)
		p = p[n:]
	}
	c.count(written)
}

// count records n more bytes written to the stream.
func (c *Capture) count(n int) {
	c.Total += int64(n)
	if c.Total > int64(c.n) {
		c.Truncated = true
	}
}

// room returns the free space at the end of the last chunk, first adding
// a chunk (see grow) when the last one is full; nothing once b is spent.
// Bytes read into the space are recorded with kept.
func (c *Capture) room(b *budget) []byte {
	if buf := c.free(); len(buf) > 0 {
		return buf
	}
	return c.grow(b)
}

// free returns the free space at the end of the last chunk.
func (c *Capture) free() []byte {
	if k := len(c.chunks); k > 0 {
		last := c.chunks[k-1]
		return last[len(last):cap(last)]
	}
	return nil
}

// grow adds a chunk and returns it, empty: captureStart bytes, then
// captureGrow times the one before up to captureChunk, never more than b
// has left, which it takes from b. It returns nil once b is spent.
func (c *Capture) grow(b *budget) []byte {
	size := captureStart
	if k := len(c.chunks); k > 0 {
		size = min(captureGrow*cap(c.chunks[k-1]), captureChunk)
	}
	size = b.take(size)
	if size == 0 {
		return nil
	}
	chunk := make([]byte, size)
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

// streamBuf is the most a stream written to [Cmd].StdoutTo reads at once:
// a pipe's default capacity. Its buffer starts at captureStart bytes and
// grows captureGrow times each time a read fills it, so a short output
// costs a small buffer and a long one a few reads per pipe's worth.
const streamBuf = 64 << 10

// stream reads f to its end as drain does, but writes each kept byte to
// w as it is read, in order, instead of keeping it in c: c counts what is
// kept and hashes it into c.SHA256. What passes b is dropped as drain
// drops it. A write to w that fails is its last: the kept bytes after it
// are still read, counted and hashed, so a writer that failed never holds
// the run back; but one whose error wraps [ErrReaderGone] ends the
// stream: f is closed, and the stage writing to it gets what a writer
// gets whose reader is gone (SIGPIPE, EPIPE). w's Write is called from
// this goroutine alone, and blocks the stream (and so, once the pipe is
// full, its writer) while it runs.
func stream(f *os.File, c *Capture, b *budget, w io.Writer) {
	s := streamer{c: c, b: b, w: w, h: sha256.New()}
	defer func() { c.SHA256 = s.h.Sum(nil) }()
	var buf []byte // made once there is a byte for it: a quiet stream allocates nothing
	for {
		if s.gone {
			f.Close()
			return
		}
		left := b.left.Load()
		if left <= 0 {
			break
		}
		var n int
		var err error
		if buf == nil {
			var first [1]byte
			n, err = f.Read(first[:])
			s.keep(first[:n])
			if n > 0 {
				buf = make([]byte, captureStart)
			}
		} else {
			n, err = f.Read(buf[:min(int64(len(buf)), left)])
			s.keep(buf[:n])
			if n == len(buf) && len(buf) < streamBuf {
				buf = make([]byte, min(captureGrow*len(buf), streamBuf))
			}
		}
		if err != nil {
			s.end(f, err, buf)
			return
		}
	}
	// Past the cap. A byte more is waited for alone first: a stream that
	// ends at the cap opens nothing to throw nothing away.
	var one [1]byte
	n, err := f.Read(one[:])
	c.count(n)
	if err != nil {
		s.end(f, err, buf)
		return
	}
	c.dropRest(f, buf)
}

// streamer is what [stream] keeps of a stream: its capture, budget,
// writer and hash.
type streamer struct {
	c *Capture
	b *budget
	w io.Writer // nil once a write to it failed
	h hash.Hash
	// gone: w's reader is gone (ErrReaderGone): read no more.
	gone bool
}

// ErrReaderGone is wrapped by the error a [Cmd].StdoutTo or StderrTo
// writer returns when whoever reads what it is given is gone, as a shell
// pipeline's reader that exited: the stream stops, and the pipe's read
// end is closed, so that the stage's next write fails as it would there.
var ErrReaderGone = errors.New("the output's reader is gone")

// keep records p as read from the stream: what b lets it keep is hashed
// and written to s.w; all of it is counted.
func (s *streamer) keep(p []byte) {
	kept := p[:s.b.take(len(p))]
	if len(kept) > 0 {
		s.h.Write(kept)
		s.c.n += len(kept)
		if s.w != nil {
			if _, err := s.w.Write(kept); err != nil {
				s.w = nil
				s.gone = errors.Is(err, ErrReaderGone)
			}
		}
	}
	s.c.count(len(p))
}

// end finishes a stream whose read returned err: at f's deadline, what is
// left in the pipe is taken (through buf, or a buffer made for it).
func (s *streamer) end(f *os.File, err error, buf []byte) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return
	}
	if len(buf) < discardBuf {
		buf = make([]byte, discardBuf)
	}
	readBuffered(f, buf, s.keep)
}
