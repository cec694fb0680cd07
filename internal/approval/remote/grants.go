package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// NoAnswerError is a daemon that took the connection but did not answer
// within Within: as systemd's socket does while rootgate.service is
// failed.
type NoAnswerError struct {
	Socket string
	Within time.Duration
}

func (e *NoAnswerError) Error() string {
	return fmt.Sprintf("rootgated did not answer within %s (%s)", e.Within, e.Socket)
}

// ListGrants asks the daemon at the approver socket for the standing
// grants this process's user may see, and how many others it holds. The
// daemon admits the caller as it admits an approver.
func ListGrants(ctx context.Context, socket string) ([]GrantInfo, int, error) {
	m, err := oneExchange(ctx, socket, &Message{Type: MsgGrants, Version: ProtoVersion}, MsgGrants)
	if err != nil {
		return nil, 0, err
	}
	return m.Grants, m.Hidden, nil
}

// RevokeGrant asks the daemon at the approver socket to end grant id.
func RevokeGrant(ctx context.Context, socket, id string) error {
	_, err := oneExchange(ctx, socket, &Message{Type: MsgRevoke, Version: ProtoVersion, ID: id}, MsgRevoked)
	return err
}

// oneExchange sends m on a new connection and reads the one answer, of
// type want, within HelloWithin of connecting; an error message becomes a
// [*RefusedError], silence a [*NoAnswerError].
func oneExchange(ctx context.Context, socket string, m *Message, want string) (*Message, error) {
	d := net.Dialer{Timeout: HelloWithin}
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(HelloWithin))
	if err := WriteMessage(c, m); err != nil {
		return nil, err
	}
	ans, err := ReadMessage(bufio.NewReader(c), MaxDaemonLine)
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, &NoAnswerError{Socket: socket, Within: HelloWithin}
	}
	return answerOf(ans, err, want)
}

// answerOf is the daemon's answer ans (read with err) to a message
// wanting one of type want: an error message becomes a [*RefusedError].
func answerOf(ans *Message, err error, want string) (*Message, error) {
	switch {
	case err != nil:
		return nil, fmt.Errorf("no answer from rootgated: %w", err)
	case ans.Type == MsgError:
		return nil, &RefusedError{Message: ans.Message}
	case ans.Type != want:
		return nil, errors.New("unexpected answer from rootgated: " + ans.Type)
	}
	return ans, nil
}
