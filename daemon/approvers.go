package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/wire"
)

// Approver connection timing: the daemon pings every pingEvery and drops an
// approver it has heard nothing from for silentFor; the hello must come
// within helloWithin of connecting.
const (
	pingEvery   = 15 * time.Second
	silentFor   = 45 * time.Second
	helloWithin = 10 * time.Second
	writeWithin = 10 * time.Second
	// maxRefused is how many refused decisions an approver may send
	// within refusedWithin before it is disconnected: a client gone wrong
	// (or an attacker at an admitted uid) must not keep the daemon busy
	// refusing a flood.
	maxRefused    = 32
	refusedWithin = time.Minute
)

// Admission says who may attach as an approver besides root.
type Admission struct {
	UIDs []int
	GIDs []int
}

// ParseApprover turns a --approver value (USER, or @GROUP) into uids/gids.
func (a *Admission) ParseApprover(v string) error {
	if g, ok := strings.CutPrefix(v, "@"); ok && g != "" {
		grp, err := user.LookupGroup(g)
		if err != nil {
			return fmt.Errorf("--approver %s: no such group", v)
		}
		gid, _ := strconv.Atoi(grp.Gid)
		a.GIDs = append(a.GIDs, gid)
		return nil
	}
	u, err := user.Lookup(v)
	if err != nil {
		return fmt.Errorf("--approver %s: no such user", v)
	}
	uid, _ := strconv.Atoi(u.Uid)
	a.UIDs = append(a.UIDs, uid)
	return nil
}

// Open reports whether anyone besides root is admitted.
func (a Admission) Open() bool { return len(a.UIDs)+len(a.GIDs) > 0 }

// admits reports whether peer may attach.
func (a Admission) admits(p peerInfo) bool {
	if p.UID == 0 || slices.Contains(a.UIDs, p.UID) {
		return true
	}
	for _, g := range a.GIDs {
		if p.GID == g || slices.Contains(p.Groups, uint32(g)) {
			return true
		}
	}
	return false
}

// ServeApprovers accepts approver clients on ln until ctx ends, attaching
// each admitted one to the server's broker. It returns ErrServerClosed
// after ctx ended.
func (s *Server) ServeApprovers(ctx context.Context, ln *net.UnixListener) error {
	if s.cfg.Broker == nil {
		return errors.New("daemon: ServeApprovers needs Config.Broker")
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return ErrServerClosed
			}
			if isTemporary(err) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return fmt.Errorf("daemon: accept approver: %w", err)
		}
		end := s.act.begin(s.cfg.Now)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer end()
			s.serveApprover(ctx, c)
		}()
	}
}

// remote is an attached approver client: a broker member whose Approve
// sends a prompt over its connection and waits for the decision.
type remote struct {
	c     *net.UnixConn
	peer  peerInfo
	name  string // "USER on WHERE"
	agent string // the SSH agent socket it offers, or ""

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex // guards pending
	pending map[string]*pendingPrompt

	timeout time.Duration
	done    chan struct{} // closed when the connection is over
}

type pendingPrompt struct {
	hash   string
	answer chan remoteAnswer
}

// remoteAnswer is a decision as an approver client sent it.
type remoteAnswer struct {
	approve bool
	note    string // a deny note, sanitised
}

var _ approval.Approver = (*remote)(nil)

func (r *remote) send(m *approval.Message) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_ = r.c.SetWriteDeadline(time.Now().Add(writeWithin))
	return approval.WriteMessage(r.c, m)
}

// sendLine writes one encoded message line.
func (r *remote) sendLine(line []byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_ = r.c.SetWriteDeadline(time.Now().Add(writeWithin))
	_, err := r.c.Write(line)
	return err
}

// Approve implements [approval.Approver].
func (r *remote) Approve(ctx context.Context, p *approval.Prompt) approval.Decision {
	by := "approver " + r.name
	pp := &pendingPrompt{hash: approval.RequestHash(p), answer: make(chan remoteAnswer, 1)}
	r.mu.Lock()
	if r.pending == nil {
		r.mu.Unlock()
		return approval.Decision{Verdict: approval.Unavailable, Message: "approver " + r.name + " disconnected", By: by}
	}
	r.pending[p.ID] = pp
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		if r.pending != nil {
			delete(r.pending, p.ID)
		}
		r.mu.Unlock()
	}()
	line, err := approval.PromptLine(p, time.Now().Add(r.timeout))
	if err != nil { // decide checks this first: a request so large never gets here
		return approval.Decision{Verdict: approval.Unavailable, Message: err.Error(), By: by}
	}
	if err := r.sendLine(line); err != nil {
		return approval.Decision{Verdict: approval.Unavailable, Message: "approver " + r.name + " unreachable", By: by}
	}
	select {
	case a := <-pp.answer:
		if a.approve {
			d := approval.Decision{Verdict: approval.Allow, By: by, After: r}
			if r.agent != "" {
				d.Agent = &approval.AgentOffer{Socket: r.agent, UID: uint32(r.peer.UID), GID: uint32(r.peer.GID), Groups: r.peer.Groups}
			}
			return d
		}
		return approval.Decision{Verdict: approval.Deny, Message: "denied by operator " + r.name, By: by, Note: a.note}
	case <-r.done:
		return approval.Decision{Verdict: approval.Unavailable, Message: "approver " + r.name + " disconnected", By: by}
	case <-ctx.Done():
		reason := "request withdrawn"
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			reason = c.Error()
		}
		_ = r.send(&approval.Message{Type: approval.MsgWithdraw, ID: p.ID, Reason: reason})
		return approval.Decision{Verdict: approval.Withdrawn, Message: "request withdrawn", By: by}
	}
}

// Outcome implements [approval.Outcomer]: the approver that approved a
// request is told how it ended.
func (r *remote) Outcome(id, line string) {
	_ = r.send(&approval.Message{Type: approval.MsgResult, ID: id, Outcome: line})
}

// refuse tells an approver why and closes.
func refuse(c *net.UnixConn, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_ = approval.WriteMessage(c, &approval.Message{Type: approval.MsgError, Message: msg})
}

// serveApprover runs one approver connection.
func (s *Server) serveApprover(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	peer, err := peerOf(c)
	if err != nil {
		refuse(c, wire.ApproverPeerCredentials)
		return
	}
	user := userNameOf(peer.UID)
	log := s.cfg.Log.With("approver_uid", peer.UID, "approver_pid", peer.PID)
	if !s.cfg.Admission.admits(peer) {
		log.Warn("approver refused: not admitted")
		refuse(c, wire.ApproverNotAdmitted(peer.UID, user))
		return
	}
	controllers, err := peerControllers(c, peer.PID)
	if err != nil {
		log.Warn("approver refused: controller set unknown", "err", err)
		refuse(c, wire.ApproverControllers(err))
		return
	}
	br := bufio.NewReaderSize(c, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(helloWithin))
	hello, err := approval.ReadMessage(br, approval.MaxApproverLine)
	if err != nil {
		refuse(c, wire.ApproverNoHello(err))
		return
	}
	switch {
	case hello.Type != approval.MsgHello:
		refuse(c, wire.ApproverNotHello(hello.Type))
		return
	case hello.Version != approval.ProtoVersion:
		refuse(c, wire.ApproverVersion(hello.Version, approval.ProtoVersion))
		return
	case utf8.RuneCountInString(hello.Name) > 64 || !wire.Displayable(hello.Name, false):
		refuse(c, wire.ApproverHelloName)
		return
	case hello.AgentSocket != "" && (!filepath.IsAbs(hello.AgentSocket) || len(hello.AgentSocket) > 107):
		refuse(c, wire.ApproverHelloAgent)
		return
	}
	where := hello.Name
	if where == "" {
		where = "an approver client"
	}
	r := &remote{
		c: c, peer: peer, name: user + " on " + where, agent: hello.AgentSocket,
		pending: map[string]*pendingPrompt{}, timeout: s.cfg.Broker.Timeout, done: make(chan struct{}),
	}
	// Attach before the welcome: an approver told it is attached must be
	// asked about the very next request (a client may act on the welcome
	// at once, as tests and scripts do). Holding the write lock meanwhile
	// keeps a prompt for such a request from going out before the welcome.
	r.wmu.Lock()
	detach := s.cfg.Broker.Attach(&approval.Member{UID: peer.UID, Name: r.name, Approver: r, Agent: r.agent, Controllers: controllers})
	_ = r.c.SetWriteDeadline(time.Now().Add(writeWithin))
	err = approval.WriteMessage(r.c, &approval.Message{Type: approval.MsgWelcome, Version: approval.ProtoVersion, Daemon: s.cfg.Version,
		PromptTimeout: s.cfg.Broker.Timeout.Seconds(), NotAsked: notAsked(controllers), SelfApproval: s.cfg.Broker.UnsafeSelfApproval})
	r.wmu.Unlock()
	if err != nil {
		detach()
		return
	}
	log.Info("approver attached", "name", r.name, "agent", r.agent != "", "controllers", controllers)
	defer func() {
		detach()
		r.mu.Lock()
		r.pending = nil
		r.mu.Unlock()
		close(r.done)
		log.Info("approver detached", "name", r.name)
	}()

	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		t := time.NewTicker(pingEvery)
		defer t.Stop()
		for {
			select {
			case <-connCtx.Done():
				c.Close() // ends the read loop
				return
			case <-t.C:
				if r.send(&approval.Message{Type: approval.MsgPing}) != nil {
					c.Close()
					return
				}
			}
		}
	}()
	var refused []time.Time // when the decisions of the last refusedWithin were refused
	for {
		_ = c.SetReadDeadline(time.Now().Add(silentFor))
		m, err := approval.ReadMessage(br, approval.MaxApproverLine)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				var ne net.Error
				if !errors.As(err, &ne) {
					refuse(c, err.Error())
				}
			}
			return
		}
		switch m.Type {
		case approval.MsgPong:
		case approval.MsgDecision:
			msg := r.deliver(m)
			if msg == "" {
				continue
			}
			log.Warn("decision refused", "id", m.ID, "why", msg)
			now := time.Now()
			refused = append(slices.DeleteFunc(refused, func(t time.Time) bool { return now.Sub(t) >= refusedWithin }), now)
			if len(refused) > maxRefused {
				log.Warn("approver dropped: too many refused decisions")
				refuse(c, wire.ApproverTooManyRefused(maxRefused))
				return
			}
			if r.send(&approval.Message{Type: approval.MsgError, ID: m.ID, Message: msg}) != nil {
				return // it does not read what it is told: drop it
			}
		default:
			refuse(c, wire.ApproverUnknownType(m.Type))
			return
		}
	}
}

// deliver hands a decision to its waiting prompt; it returns why it was
// refused, or "".
func (r *remote) deliver(m *approval.Message) string {
	if m.Approve == nil {
		return wire.ApproverNoVerdict
	}
	r.mu.Lock()
	pp := r.pending[m.ID]
	if pp != nil && pp.hash == m.Hash {
		delete(r.pending, m.ID)
	}
	r.mu.Unlock()
	switch {
	case pp == nil:
		return wire.ApproverNoPrompt(m.ID)
	case pp.hash != m.Hash:
		return wire.ApproverHashMismatch(m.ID)
	}
	a := remoteAnswer{approve: *m.Approve}
	if !a.approve {
		a.note = wire.SanitizeNote(m.Note)
	}
	pp.answer <- a
	return ""
}

// notAsked lists the uids (without root, whose requests anyone may
// approve) an approver with these controllers is not asked about.
func notAsked(controllers []int) []int {
	var out []int
	for _, u := range controllers {
		if u != 0 {
			out = append(out, u)
		}
	}
	return out
}
