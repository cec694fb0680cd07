package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

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
// type want; an error message becomes a [*RefusedError].
func oneExchange(ctx context.Context, socket string, m *Message, want string) (*Message, error) {
	var d net.Dialer
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
	case err != nil:
		return nil, fmt.Errorf("no answer from rootgated: %w", err)
	case ans.Type == MsgError:
		return nil, &RefusedError{Message: ans.Message}
	case ans.Type != want:
		return nil, errors.New("unexpected answer from rootgated: " + ans.Type)
	}
	return ans, nil
}
