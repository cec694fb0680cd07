package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rootgate/rootgate/pipeline"

	"github.com/rootgate/rootgate/wire"
)

// answerLine is the one way a connection's lines are written once its
// request is read: its progress lines, then its answer. The answer of a
// run begins as the run's stdout comes (wire.StdoutStream, written by the
// goroutine that reads the stdout), so that the daemon never holds that
// stdout (docs/performance.md, "Daemon peak RSS"), and completes once the
// run is over; progress lines come from other goroutines. answerLine
// lets one write at a time, and none of a progress line once the answer
// has begun, so no line is ever written into another.
type answerLine struct {
	w io.Writer // the connection, through its stallGuard
	// hold, when set, returns the connection as a streamed run's frames
	// are written to it (output): through a runGuard, which waits for a
	// client that reads them slowly, or not for a while, until the run's
	// end, not only the stall guard's 10 s. Without it, they go to w.
	hold func(ctx context.Context, until time.Time) io.Writer
	// beforeStdout, when set, is called once, before the run's stdout is
	// first written: it writes a progress line still held (progressLines),
	// so that the client has it, and its within, before the answer's line
	// begins, which may then take the whole run to complete.
	beforeStdout func()
	first        sync.Once // of beforeStdout
	// stdoutGone is set when the client said the reader of the run's
	// stdout is gone (wire.CloseStdout): its frames end, and so does the
	// run's stdout pipe.
	stdoutGone atomic.Bool

	mu     sync.Mutex
	stream *wire.StdoutStream // the run's stdout, once there is a run
	frames *wire.FrameWriter  // or, for a request that said "stream", its output's frames
	done   bool               // the answer was written, or given up
}

// errAnswerBegun: a progress line that came after the answer's first byte,
// and was not written.
var errAnswerBegun = errors.New("the answer has begun")

// progress returns the writer of the connection's progress lines: each
// Write is one line, written whole, or not at all once the answer has
// begun (errAnswerBegun).
func (a *answerLine) progress() io.Writer { return progressWriter{a} }

type progressWriter struct{ a *answerLine }

func (p progressWriter) Write(b []byte) (int, error) {
	a := p.a
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done || a.begun() {
		return 0, errAnswerBegun
	}
	return a.w.Write(b)
}

// begun reports whether the run's output began the answer: the line its
// stdout began, or its first frame. The caller holds a.mu.
func (a *answerLine) begun() bool {
	return a.stream != nil && a.stream.Begun() || a.frames != nil && a.frames.Begun()
}

// output returns where the stdout and each stage's stderr of a run go
// that asked for them as frames ("stream": 1, docs/protocol.md, "Streamed
// output"): every byte, each write one frame line, as it is read; the
// answer line follows them once the run is over (finish). A client that
// reads slowly, or stops reading for a while, slows the run's output
// (its pipes fill); until is the latest the run may end, and ctx its
// request's: a client that has read nothing by until, or once ctx ended,
// fails the frames, after which the run goes on to its end without it
// and no answer is written (see runGuard).
func (a *answerLine) output(ctx context.Context, until time.Time) (stdout io.Writer, stderr func(int) io.Writer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	lock := func() func() {
		a.mu.Lock()
		return a.mu.Unlock
	}
	w := a.w
	if a.hold != nil {
		w = a.hold(ctx, until)
	}
	a.frames = wire.NewFrameWriter(frameGate{a, w}, a.beforeStdout, lock)
	return readerGate{a, a.frames.Stdout()}, a.frames.Stderr
}

// readerGate is the run's stdout as its frames take it, until the client
// says its reader is gone: then a write fails with pipeline.ErrReaderGone,
// and the run's stdout ends as a pipe whose reader exited.
type readerGate struct {
	a *answerLine
	w io.Writer
}

func (g readerGate) Write(b []byte) (int, error) {
	if g.a.stdoutGone.Load() {
		return 0, fmt.Errorf("stdout: %w", pipeline.ErrReaderGone)
	}
	return g.w.Write(b)
}

// frameGate is the connection as the frames see it, w: nothing is
// written once the answer was written or given up. Its Write is called
// under a.mu.
type frameGate struct {
	a *answerLine
	w io.Writer
}

func (g frameGate) Write(b []byte) (int, error) {
	if g.a.done {
		return 0, errAnswerBegun
	}
	return g.w.Write(b)
}

// runGuard writes a streamed run's frames to its connection with one
// deadline, the run's latest end (its time limit, its kill grace and the
// stall timeout after it), so that a client that reads them slowly, or
// stops for a while (a pager), holds the run's output as a shell's
// reader would, and never longer than the run may last. Once ctx ends
// (the client went away, the daemon stops and kills the run), the
// deadline of a write waiting, and of every write after, is the stall
// timeout from then, as for any answer: a client that still reads gets
// the rest (and a stopping daemon's answer), and a run being killed is
// not held longer by its output.
type runGuard struct {
	c     *net.UnixConn
	until time.Time
	stall time.Duration

	mu  sync.Mutex // guards cut, and orders the deadline's setting with ctx's end
	cut time.Time  // set once ctx ended: until, moved closer
}

// newRunGuard returns c's runGuard for a run that may last until until,
// of request ctx.
func newRunGuard(ctx context.Context, c *net.UnixConn, until time.Time, stall time.Duration) *runGuard {
	g := &runGuard{c: c, until: until, stall: stall}
	context.AfterFunc(ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.cut = time.Now().Add(stall)
		_ = c.SetWriteDeadline(g.cut)
	})
	return g
}

func (g *runGuard) Write(p []byte) (int, error) {
	g.mu.Lock()
	deadline := g.until
	if !g.cut.IsZero() && g.cut.Before(deadline) {
		deadline = g.cut
	}
	_ = g.c.SetWriteDeadline(deadline)
	g.mu.Unlock()
	return g.c.Write(p)
}

// stdout returns where the stdout of request id's run goes: into its
// answer line, as it comes (pipeline.Cmd.StdoutTo). A client that reads
// slowly slows the run's stdout; one that stops reading fails the stream
// at the stall guard's deadline, after which the run goes on without it
// and the line is never completed.
func (a *answerLine) stdout(id string) io.Writer {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stream = wire.NewStdoutStream(a.w, id)
	return stdoutWriter{a}
}

type stdoutWriter struct{ a *answerLine }

func (s stdoutWriter) Write(b []byte) (int, error) {
	a := s.a
	if a.beforeStdout != nil {
		a.first.Do(a.beforeStdout) // not under mu: it writes through progress
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return 0, errAnswerBegun
	}
	return a.stream.Write(b)
}

// finish writes r, the answer: the rest of the line that the run's
// stdout began, or the whole line. When writing the stdout failed, it
// writes nothing and returns that error: the connection is then closed
// with its line unfinished. Nothing is written after it.
func (a *answerLine) finish(r *wire.Response) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.done = true
	if a.stream != nil {
		return a.stream.Finish(r)
	}
	if a.frames != nil {
		if err := a.frames.Err(); err != nil {
			return err // a frame is unfinished, or missing: no answer
		}
	}
	return wire.WriteResponse(a.w, r)
}

// abandon writes r, the answer of a request abandoned half-way, unless
// the answer has begun: nothing that follows could complete that line.
// Nothing is written after it.
func (a *answerLine) abandon(r *wire.Response) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.done {
		return errAnswerBegun
	}
	a.done = true
	if a.begun() {
		return errAnswerBegun
	}
	return wire.WriteResponse(a.w, r)
}
