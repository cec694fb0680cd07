// Package client sends one request to a rootgated socket and reads its
// answer. Cancelling the context closes the connection, which makes the
// daemon withdraw the prompt or kill the run. Requests sent with [Do] say
// eof_withdraws, so this holds through a forwarded socket too (ssh -L),
// where the close reaches the daemon only as the end of the stream.
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

func dial(ctx context.Context, socket string) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		ce := &ConnectError{Socket: socket, Err: err}
		switch {
		case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
			ce.Hint = "is rootgated running? start it with: sudo rootgated --tty"
		case errors.Is(err, os.ErrPermission):
			ce.Hint = "only root and members of group rootgate may connect: sudo usermod -aG rootgate $USER, then log in again"
		}
		return nil, ce
	}
	return c.(*net.UnixConn), nil
}

// RoundTrip writes line (which must end in '\n') to the daemon at socket
// and returns its raw answer line, newline included. The answer is read
// even when the daemon closed before reading the request (it answers
// "server busy" that way).
func RoundTrip(ctx context.Context, socket string, line []byte) ([]byte, error) {
	return roundTrip(ctx, socket, line, true, nil)
}

// roundTrip is RoundTrip; halfClose says whether to end the stream after
// the line. A request saying eof_withdraws must not: its end withdraws it.
// Progress lines before the answer go to onProgress (when not nil).
func roundTrip(ctx context.Context, socket string, line []byte, halfClose bool, onProgress func(phase string)) ([]byte, error) {
	c, err := dial(ctx, socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_, werr := c.Write(line)
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
			if werr != nil {
				return nil, fmt.Errorf("send request: %w", werr)
			}
			if errors.Is(err, io.EOF) && len(resp) == 0 {
				return nil, errors.New("daemon closed the connection without an answer")
			}
			return nil, fmt.Errorf("read answer: %w", err)
		}
		if onProgress != nil {
			if phase, ok := wire.ParseProgress(resp); ok {
				onProgress(phase)
				continue
			}
		}
		return resp, nil
	}
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

// DoProgress is [Do]; when onProgress is not nil, the request asks for
// progress lines (docs/protocol.md) and onProgress gets each phase
// ([wire.ProgressApproval], [wire.ProgressRunning]) as the daemon reports
// it. A daemon that does not know the extension refuses the request with
// an unknown-field error.
func DoProgress(ctx context.Context, socket string, req *wire.Outgoing, onProgress func(phase string)) (*wire.Response, error) {
	out := *req
	out.EOFWithdraws = true
	out.Progress = onProgress != nil
	line, err := json.Marshal(&out)
	if err != nil {
		return nil, fmt.Errorf("encode request: %w", err)
	}
	raw, err := roundTrip(ctx, socket, append(line, '\n'), false, onProgress)
	if err != nil {
		return nil, err
	}
	var resp wire.Response
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNotResponse, err)
	}
	return &resp, nil
}
