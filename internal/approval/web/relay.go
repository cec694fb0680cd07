// Package web is the passkey approval page: an HTTPS server that relays the
// prompts of one or more rootgated approver sockets to browsers, and the
// browsers' decisions back, each approval a WebAuthn assertion made in the
// browser over the request (passkey.Challenge).
//
// It holds no power of its own. It attaches as a passkey relay
// (remote.CapPasskey): the daemon verifies every approval's assertion itself
// against its enrolled public keys, so a page process that is compromised
// can show a request late, or deny it, but cannot approve one. It runs as
// an ordinary user; rootgate web is its command.
package web

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/termsafe"
)

// Relay attaches to the approver sockets as a passkey relay and keeps the
// prompts they send. Set the fields before Run.
type Relay struct {
	Sockets []string // approver sockets, one daemon each
	Name    string   // where it prompts, told in the hello ("web")
	Version string   // the client's version, told in the hello
	Log     *slog.Logger

	mu      sync.Mutex // guards the fields that follow
	notices []Notice   // the newest last, at most maxNotices
	prompts map[string]*Waiting
	daemons map[string]*daemonConn // by socket, while attached
	subs    map[chan struct{}]struct{}
}

// Waiting is a prompt waiting for a decision, as the page shows it.
type Waiting struct {
	Key      string // socket and id: unique in the relay
	Socket   string
	Host     string // the daemon's host name
	Prompt   *approval.Prompt
	Hash     string
	Nonce    string
	Deadline time.Time
	Arrived  time.Time
}

// Notice is a change of a daemon's passkeys, as the page shows it.
type Notice struct {
	Host string    `json:"host"`
	Text string    `json:"text"`
	Time time.Time `json:"time"`
}

// maxNotices is how many notices the page keeps.
const maxNotices = 20

// Notices are the changes of the daemons' passkeys since the relay began.
func (r *Relay) Notices() []Notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.notices)
}

// daemonConn is one attached daemon.
type daemonConn struct {
	sock        string
	host        string
	rpID        string
	credentials []string
	wmu         sync.Mutex
	c           *net.UnixConn
	replies     map[string]chan string // id → "" accepted, or the refusal
}

func (r *Relay) log() *slog.Logger {
	if r.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Log
}

// Run attaches to every socket until ctx ends, each attaching again after
// its connection drops (at most every 2 s).
func (r *Relay) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, s := range r.Sockets {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := r.session(ctx, s); err != nil && ctx.Err() == nil {
					r.log().Warn("approver socket", "socket", s, "err", err)
				}
				select {
				case <-ctx.Done():
				case <-time.After(2 * time.Second):
				}
			}
		})
	}
	wg.Wait()
}

// Changed returns a channel signalled when the prompts change, and a
// function to stop it.
func (r *Relay) Changed() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	if r.subs == nil {
		r.subs = map[chan struct{}]struct{}{}
	}
	r.subs[ch] = struct{}{}
	r.mu.Unlock()
	return ch, func() {
		r.mu.Lock()
		delete(r.subs, ch)
		r.mu.Unlock()
	}
}

func (r *Relay) changedLocked() {
	for ch := range r.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Waiting lists the prompts, oldest first, with each one's daemon's RP ID
// and credentials.
func (r *Relay) Waiting() []Waiting {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Waiting, 0, len(r.prompts))
	for _, w := range r.prompts {
		out = append(out, *w)
	}
	slices.SortFunc(out, func(a, b Waiting) int { return a.Arrived.Compare(b.Arrived) })
	return out
}

// Keys is the RP ID and enrolled credential ids a daemon told, for a
// prompt's key.
func (r *Relay) Keys(key string) (rpID string, creds []string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.prompts[key]
	if w == nil {
		return "", nil, false
	}
	d := r.daemons[w.Socket]
	if d == nil {
		return "", nil, false
	}
	return d.rpID, d.credentials, true
}

// ErrGone is returned by [Relay.Challenge] and [Relay.Decide] for a prompt
// no longer waiting.
var ErrGone = errors.New("the request is no longer waiting")

// Challenge is what an approval of prompt key with this grant must sign.
func (r *Relay) Challenge(key string, grant int64, runsAnything bool) ([]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.prompts[key]
	if w == nil {
		return nil, ErrGone
	}
	return passkey.Challenge(w.Hash, w.Nonce, grant, runsAnything), nil
}

// Decision is a browser's decision about a prompt.
type Decision struct {
	Key               string             `json:"key"`
	Approve           bool               `json:"approve"`
	Grant             int64              `json:"grant,omitempty"`
	GrantRunsAnything bool               `json:"grant_runs_anything,omitempty"`
	Assertion         *passkey.Assertion `json:"assertion,omitempty"`
}

// Decide sends d to the prompt's daemon and returns its refusal, if any.
func (r *Relay) Decide(ctx context.Context, d Decision) error {
	r.mu.Lock()
	w := r.prompts[d.Key]
	var dc *daemonConn
	if w != nil {
		dc = r.daemons[w.Socket]
	}
	if dc == nil {
		r.mu.Unlock()
		return ErrGone
	}
	if dc.replies[w.Prompt.ID] != nil {
		// A second decision (a double click, another tab) while the
		// first waits would take its reply.
		r.mu.Unlock()
		return errDeciding
	}
	reply := make(chan string, 1)
	dc.replies[w.Prompt.ID] = reply
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(dc.replies, w.Prompt.ID)
		r.mu.Unlock()
	}()
	approve := d.Approve
	m := &remote.Message{Type: remote.MsgDecision, ID: w.Prompt.ID, Hash: w.Hash, Approve: &approve}
	if d.Approve {
		m.Assertion, m.Grant, m.GrantRunsAnything = d.Assertion, d.Grant, d.GrantRunsAnything
	}
	if err := dc.send(m); err != nil {
		return err
	}
	select {
	case msg := <-reply:
		if msg != "" {
			return errors.New(msg)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *daemonConn) send(m *remote.Message) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	_ = d.c.SetWriteDeadline(time.Now().Add(remote.WriteWithin))
	return remote.WriteMessage(d.c, m)
}

// session is one attachment to sock.
func (r *Relay) session(ctx context.Context, sock string) error {
	var dialer net.Dialer
	conn, err := dialer.DialContext(ctx, "unix", sock)
	if err != nil {
		return err
	}
	c := conn.(*net.UnixConn)
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	dc := &daemonConn{sock: sock, c: c, replies: map[string]chan string{}}
	name := r.Name
	if name == "" {
		name = "web"
	}
	herr := dc.send(&remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Client: r.Version, Name: name,
		Capabilities: []string{remote.CapPasskey, remote.CapGroup}})
	br := bufio.NewReaderSize(c, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(remote.HelloWithin))
	welcome, err := remote.ReadMessage(br, remote.MaxDaemonLine)
	switch {
	case err != nil && herr != nil:
		return herr
	case err != nil:
		return err
	case welcome.Type == remote.MsgError:
		return &remote.RefusedError{Message: welcome.Message}
	case welcome.Type != remote.MsgWelcome:
		return fmt.Errorf("unexpected %q message instead of welcome", welcome.Type)
	}
	dc.host, dc.rpID, dc.credentials = welcome.Hostname, welcome.RPID, welcome.Credentials
	silent := remote.DefaultDaemonSilentFor
	if welcome.PingEvery > 0 {
		silent = time.Duration(min(max(remote.DaemonSilentPings*welcome.PingEvery, 5), 600) * float64(time.Second))
	}
	r.log().Info("attached", "socket", sock, "host", dc.host)
	r.mu.Lock()
	if r.daemons == nil {
		r.daemons = map[string]*daemonConn{}
		r.prompts = map[string]*Waiting{}
	}
	r.daemons[sock] = dc
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.daemons, sock)
		for k, w := range r.prompts {
			if w.Socket == sock {
				delete(r.prompts, k)
			}
		}
		for _, ch := range dc.replies {
			tell(ch, "the daemon went away")
		}
		r.changedLocked()
		r.mu.Unlock()
	}()
	for {
		_ = c.SetReadDeadline(time.Now().Add(silent))
		m, err := remote.ReadMessage(br, remote.MaxDaemonLine)
		if err != nil {
			return err
		}
		r.mu.Lock()
		switch m.Type {
		case remote.MsgPing:
			r.mu.Unlock()
			_ = dc.send(&remote.Message{Type: remote.MsgPong})
			continue
		case remote.MsgPrompt:
			if m.Request != nil && m.Deadline != nil && m.ID == m.Request.ID && m.Hash == remote.RequestHash(m.Request) {
				key := sock + "\x00" + m.ID
				r.prompts[key] = &Waiting{Key: key, Socket: sock, Host: dc.host, Prompt: m.Request, Hash: m.Hash, Nonce: m.Nonce,
					Deadline: *m.Deadline, Arrived: time.Now()}
			}
		case remote.MsgWithdraw:
			delete(r.prompts, sock+"\x00"+m.ID)
		case remote.MsgNonce:
			if w := r.prompts[sock+"\x00"+m.ID]; w != nil {
				w.Nonce = m.Nonce
			}
		case remote.MsgPasskeys:
			dc.rpID, dc.credentials = m.RPID, m.Credentials
			r.notices = append(r.notices, Notice{Host: dc.host, Text: termsafe.Sanitize(m.Reason), Time: time.Now()})
			if len(r.notices) > maxNotices {
				r.notices = r.notices[len(r.notices)-maxNotices:]
			}
		case remote.MsgAccepted:
			delete(r.prompts, sock+"\x00"+m.ID)
			if ch := dc.replies[m.ID]; ch != nil {
				tell(ch, "")
			}
		case remote.MsgError:
			if ch := dc.replies[m.ID]; m.ID != "" && ch != nil {
				tell(ch, termsafe.Sanitize(m.Message))
			} else if m.ID == "" {
				r.mu.Unlock()
				return &remote.RefusedError{Message: m.Message}
			}
		}
		r.changedLocked()
		r.mu.Unlock()
	}
}

// errDeciding refuses a decision on a request while another on it waits
// for the daemon's reply.
var errDeciding = errors.New("a decision on this request is already on its way")

// tell gives a waiting decision its reply without blocking: the reply
// channel holds one, and the relay's lock is held here, so a second
// reply (the daemon's answer, then its going away) must not wait for a
// reader that already has the first.
func tell(ch chan string, reply string) {
	select {
	case ch <- reply:
	default:
	}
}
