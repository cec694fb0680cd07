// Package client sends one request to a rootgated socket and reads its
// answer. Cancelling the context closes the connection, which makes the
// daemon withdraw the prompt or kill the run. Requests sent with [Do] say
// eof_withdraws, so this holds through a forwarded socket too (ssh -L),
// where the close reaches the daemon only as the end of the stream.
//
// No call waits without a bound (docs/operations.md, "Client deadlines"):
// the daemon must say something within [AnswerWithin] of the connection
// (a ping's or a check's answer, or a run's first progress line); each
// progress line then says how long the rest may take, and the call waits
// that long plus [Margin]. A request without progress lines waits
// [RunWithin]. Past its deadline a call closes the connection (which
// withdraws the request) and returns a [*NoAnswerError].
package client

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/internal/version"
	"github.com/rootgate/rootgate/wire"
)

// The request socket and the approver socket: where a client finds each
// when no flag names it, first from the environment, then by default.
const (
	SocketEnv             = "ROOTGATE_SOCKET"
	DefaultSocket         = "/run/rootgate/rootgate.sock"
	ApproverSocketEnv     = "ROOTGATE_APPROVER_SOCKET"
	DefaultApproverSocket = "/run/rootgate/approve.sock"
)

// Socket returns the request socket to use: flag (if set), else
// $ROOTGATE_SOCKET, else DefaultSocket.
func Socket(flag string) string { return cmp.Or(flag, os.Getenv(SocketEnv), DefaultSocket) }

// ApproverSocket returns the approver socket to use: flag (if set), else
// $ROOTGATE_APPROVER_SOCKET, else DefaultApproverSocket.
func ApproverSocket(flag string) string {
	return cmp.Or(flag, os.Getenv(ApproverSocketEnv), DefaultApproverSocket)
}

// Deadlines (docs/operations.md, "Client deadlines").
const (
	// DefaultAnswerWithin is how long a client waits for the daemon's
	// first line: the answer to a ping or a check, the first progress
	// line of a run. $ROOTGATE_ANSWER_WITHIN (a Go duration) sets another.
	DefaultAnswerWithin = 10 * time.Second
	AnswerWithinEnv     = "ROOTGATE_ANSWER_WITHIN"
	// Margin is added to what a progress line says the rest may take.
	Margin = 10 * time.Second
	// defaultPrompt, defaultRun and defaultGrace are rootgated's default
	// --prompt-timeout, --exec-timeout and --kill-grace: what a client
	// that is told nothing assumes.
	defaultPrompt = 60 * time.Second
	defaultRun    = 300 * time.Second
	defaultGrace  = 5 * time.Second
)

// NoAnswerHint says what to check when the daemon does not answer.
const NoAnswerHint = "is the service failed? systemctl status rootgate; journalctl -u rootgate -p err"

// AnswerWithin is how long to wait for the daemon's first line:
// $ROOTGATE_ANSWER_WITHIN when it holds a positive duration, else
// DefaultAnswerWithin.
func AnswerWithin() time.Duration {
	if d, err := time.ParseDuration(os.Getenv(AnswerWithinEnv)); err == nil && d > 0 {
		return d
	}
	return DefaultAnswerWithin
}

// RunWithin is how long a run request that gets no progress lines may
// take, as a client assumes when it is told nothing: rootgated's default
// prompt timeout, the run's time limit (timeout seconds when positive,
// else the default --exec-timeout), its kill grace, and Margin.
func RunWithin(timeout float64) time.Duration {
	run := defaultRun
	if timeout > 0 && timeout < defaultRun.Seconds() {
		run = time.Duration(timeout * float64(time.Second))
	}
	return defaultPrompt + run + defaultGrace + Margin
}

// NoAnswerError is a daemon that did not answer in time: it took the
// connection (or systemd did, for a daemon that is not running) and said
// nothing more within Within. Phase is the last progress line's phase,
// "" when there was none.
type NoAnswerError struct {
	Socket string
	Within time.Duration
	Phase  string
}

func (e *NoAnswerError) Error() string {
	after := ""
	switch e.Phase {
	case "":
	case wire.ProgressRunning:
		after = " of the run's start"
	default:
		after = " of its " + e.Phase + " line"
	}
	return fmt.Sprintf("rootgated did not answer within %s%s (%s); the request was withdrawn", e.Within, after, e.Socket)
}

// ConnectError is a failure to reach the daemon, with a hint saying what
// to do about it.
type ConnectError struct {
	Socket string
	Err    error
	Hint   string
}

func (e *ConnectError) Error() string {
	return fmt.Sprintf("cannot connect to %s: %v", e.Socket, e.Err)
}

func (e *ConnectError) Unwrap() error { return e.Err }

// ClosedError is a connection that ended before the daemon's answer:
// systemd resets the connections it holds for a service that fails to
// start (a configuration error; its sockets fail with it), and a daemon
// that crashes or is killed drops its own. The hint is [NoAnswerHint].
type ClosedError struct {
	Socket string
	Err    error // what reading the answer returned
}

func (e *ClosedError) Error() string {
	return fmt.Sprintf("rootgated closed the connection without an answer (%s): %v", e.Socket, e.Err)
}

func (e *ClosedError) Unwrap() error { return e.Err }

// StoppedHint says what to do when nothing listens on the socket: start
// the sockets, and, if the service failed, see why first.
const StoppedHint = "is rootgated running? as a service: sudo systemctl start rootgate.socket rootgate-approve.socket; " +
	"if it failed: systemctl status rootgate; journalctl -u rootgate -p err; after the fix, sudo systemctl reset-failed rootgate.service first; " +
	"by hand: sudo rootgated --tty"

func dial(ctx context.Context, socket string) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		ce := &ConnectError{Socket: socket, Err: err}
		switch {
		case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
			ce.Hint = StoppedHint
		case errors.Is(err, os.ErrPermission):
			ce.Hint = PermissionHint(socket)
		}
		return nil, ce
	}
	return c.(*net.UnixConn), nil
}

// RoundTrip writes line (which must end in '\n') to the daemon at socket
// and returns its raw answer line, newline included. The answer is read
// even when the daemon closed before reading the request (it answers
// "server busy" that way).
//
// It waits AnswerWithin for a line that is a ping or a check, else (it may
// be a run) RunWithin of the line's timeout.
func RoundTrip(ctx context.Context, socket string, line []byte) ([]byte, error) {
	var v struct {
		Action  string  `json:"action"`
		Check   bool    `json:"check"`
		Timeout float64 `json:"timeout"`
	}
	_ = json.Unmarshal(line, &v) // a line it cannot read gets the run's bound
	first := RunWithin(v.Timeout)
	if v.Action == wire.ActionPing || v.Check {
		first = AnswerWithin()
	}
	return roundTrip(ctx, socket, line, true, first, nil, nil)
}

// roundTrip is RoundTrip; halfClose says whether to end the stream after
// the line. A request saying eof_withdraws must not: its end withdraws it.
// The first line must come within first; a progress line moves the
// deadline to what it says plus Margin (RunWithin(0) when it says
// nothing) and goes to onProgress, unless it is wire.ProgressReceived,
// which only says the daemon is alive. With onProgress nil, progress
// lines are not looked for: the first line is the answer. With onFrame
// set, output frames (a request that said "stream") go to it as they
// come; an error it returns ends the call, and with it the connection,
// which ends the run.
func roundTrip(ctx context.Context, socket string, line []byte, halfClose bool, first time.Duration, onProgress func(phase string), onFrame func(wire.Frame) error) ([]byte, error) {
	c, err := dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	// A connection systemd holds for a daemon that is not running takes
	// a request as large as its buffer, then blocks the write.
	within, phase := first, ""
	_ = c.SetDeadline(time.Now().Add(within))
	noAnswer := func(err error) error {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return &NoAnswerError{Socket: socket, Within: within, Phase: phase}
		}
		return nil
	}
	_, werr := c.Write(line)
	if err := noAnswer(werr); err != nil {
		return nil, err
	}
	if werr == nil && halfClose {
		// A half-close tells the daemon the request is complete (so a line
		// without its newline is reported as such) and cancels nothing.
		werr = c.CloseWrite()
	}
	br := bufio.NewReader(c)
	for {
		resp, err := br.ReadBytes('\n')
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			if err := noAnswer(err); err != nil {
				return nil, err
			}
			return nil, readError(socket, resp, err, werr)
		}
		if p, w, ok := wire.ParseProgress(resp); ok && onProgress != nil {
			phase, within = p, w+Margin
			if w == 0 {
				within = RunWithin(0)
			}
			_ = c.SetReadDeadline(time.Now().Add(within))
			if p != wire.ProgressReceived {
				onProgress(p)
			}
			continue
		}
		if onFrame != nil {
			framed, err := takeFrame(c, resp, onFrame)
			if err != nil {
				return nil, err
			}
			if framed {
				continue
			}
		}
		return resp, nil
	}
}

// readError is roundTrip's error when reading the answer failed with err
// (other than its deadline) after resp, the part of a line read; werr is
// how sending the request failed, if it did.
func readError(socket string, resp []byte, err, werr error) error {
	if errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) && len(resp) == 0 {
		return &ClosedError{Socket: socket, Err: err}
	}
	if werr != nil {
		return fmt.Errorf("send request: %w", werr)
	}
	return fmt.Errorf("read answer: %w", err)
}

// takeFrame gives resp to onFrame when it is an output frame, and says
// whether it was one. onFrame's ErrStdoutGone is told to the daemon on c
// (wire.CloseStdout) rather than returned; any other error of onFrame's,
// or of that write, is returned, and ends the call.
func takeFrame(c *net.UnixConn, resp []byte, onFrame func(wire.Frame) error) (bool, error) {
	f, ok, err := wire.ParseFrame(resp)
	if err != nil {
		return false, fmt.Errorf("%w: %w", ErrNotResponse, err)
	}
	if !ok {
		return false, nil
	}
	err = onFrame(f)
	if errors.Is(err, ErrStdoutGone) {
		// As a pipe's reader that exited: the run's stdout ends, and the
		// rest comes as ever.
		_, err = c.Write([]byte(wire.CloseStdout))
	}
	return true, err
}

// NewRequest returns a request with the fields every client request has:
// a fresh id, this machine's host name, session, the current time in whole
// seconds (2026-02-13T14:30:00Z: the form every daemon of the protocol
// accepts) and this client's version.
func NewRequest(session string) *wire.Outgoing {
	host, _ := os.Hostname()
	return &wire.Outgoing{
		ID:      uuid.NewString(),
		Host:    host,
		Session: session,
		Time:    time.Now().UTC().Truncate(time.Second).Format(time.RFC3339),
		Version: version.String(),
	}
}

// ErrNotResponse: the daemon's answer is not a response line.
var ErrNotResponse = errors.New("daemon answered something that is not a rootgate response")

// Do sends req with eof_withdraws set, keeps its side of the connection
// open until the answer is read, and decodes the answer.
func Do(ctx context.Context, socket string, req *wire.Outgoing) (*wire.Response, error) {
	return DoProgress(ctx, socket, req, nil)
}

// DoProgress is [Do]; a request that may run (not a ping, not a check)
// asks for progress lines (docs/protocol.md), whose first one tells that
// the daemon is alive and each how long the rest may take, and
// onProgress, when not nil, gets each phase ([wire.ProgressApproval],
// [wire.ProgressRunning]) as the daemon reports it. A daemon that does
// not know the extension refuses the request with an unknown-field error
// before deciding anything; the request is then sent again without.
func DoProgress(ctx context.Context, socket string, req *wire.Outgoing, onProgress func(phase string)) (*wire.Response, error) {
	out := *req
	out.EOFWithdraws = true
	out.Progress = out.Action != wire.ActionPing && !out.Check
	resp, err := do(ctx, socket, &out, onProgress, nil)
	if err == nil && out.Progress && resp.Code == wire.CodeUnknownField {
		// An older rootgated. (Were another field unknown, the second
		// refusal says so.)
		out.Progress = false
		resp, err = do(ctx, socket, &out, nil, nil)
	}
	return resp, err
}

// DoStream is [DoProgress] for a run whose output is to come as it is
// written, every byte of it: it asks for the stream framing
// (docs/protocol.md, "Streamed output"), and onFrame gets each frame of
// stdout and stderr as it comes; the answer it returns then holds no
// output. An error onFrame returns (its writer's: a closed pipe, a full
// disk) ends the call with that error and closes the connection, which
// kills the run. A daemon that does not know the framing refuses the
// request with an unknown-field error before deciding anything; the
// request is then sent again without (DoProgress), and its answer holds
// the output, cut at the protocol's caps, flagged when it is.
func DoStream(ctx context.Context, socket string, req *wire.Outgoing, onProgress func(phase string), onFrame func(wire.Frame) error) (*wire.Response, error) {
	out := *req
	out.EOFWithdraws = true
	out.Progress = true
	out.Stream = wire.StreamVersion
	if onProgress == nil {
		onProgress = func(string) {}
	}
	resp, err := do(ctx, socket, &out, onProgress, onFrame)
	if err == nil && resp.Code == wire.CodeUnknownField {
		// An older rootgated.
		out.Stream = 0
		return DoProgress(ctx, socket, &out, onProgress)
	}
	return resp, err
}

// WriteFrames returns an onFrame for DoStream that writes stdout's frames
// to stdout and every stage's stderr frames to stderr. Once a write to
// stdout fails with EPIPE (its reader is gone: the caller ignores or
// handles SIGPIPE), it returns ErrStdoutGone, once, and drops the stdout
// frames that follow: DoStream then tells the daemon, which ends the
// run's stdout as that reader ended the caller's.
func WriteFrames(stdout, stderr io.Writer) func(wire.Frame) error {
	gone := false
	return func(f wire.Frame) error {
		if f.Stage > 0 {
			_, err := stderr.Write(f.Data)
			return err
		}
		if gone {
			return nil
		}
		_, err := stdout.Write(f.Data)
		if errors.Is(err, syscall.EPIPE) {
			gone = true
			return ErrStdoutGone
		}
		return err
	}
}

// ErrStdoutGone is returned by an onFrame of DoStream when the reader of
// the run's stdout is gone: the call goes on, and the daemon is told
// (wire.CloseStdout).
var ErrStdoutGone = errors.New("stdout's reader is gone")

// do sends out as it is and decodes the answer; frames, when out asks for
// them, go to onFrame.
func do(ctx context.Context, socket string, out *wire.Outgoing, onProgress func(phase string), onFrame func(wire.Frame) error) (*wire.Response, error) {
	line, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	// A ping or a check is answered at once; so is the first progress
	// line of a request that asked for them. A run without them (an
	// older daemon) may take as long as a run.
	first := AnswerWithin()
	if !out.Progress && out.Action != wire.ActionPing && !out.Check {
		first = RunWithin(out.Timeout)
	}
	if out.Progress && onProgress == nil {
		onProgress = func(string) {}
	}
	raw, err := roundTrip(ctx, socket, append(line, '\n'), false, first, onProgress, onFrame)
	if err != nil {
		return nil, err
	}
	var resp wire.Response
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotResponse, err)
	}
	return &resp, nil
}
