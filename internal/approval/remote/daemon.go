package remote

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/wire"
)

// Connection timing. The daemon pings every [Host].PingEvery (default
// DefaultPingEvery) and detaches an approver it has heard nothing from for
// [Host].Silence (default DefaultSilence): an approver cut off without
// a close (a network gone silent under an ssh forward) is detached well
// before a prompt would time out, and its prompt is no longer waiting on
// it. The welcome tells the client the ping interval; the client drops a
// daemon it has heard nothing from for DaemonSilentPings intervals
// (DefaultDaemonSilentFor from a daemon that does not say). The hello
// must come within HelloWithin of connecting, and the client waits as long
// for the welcome. Each line's write must end within WriteWithin.
const (
	DefaultPingEvery       = 5 * time.Second
	DefaultSilence         = 3 * DefaultPingEvery
	DaemonSilentPings      = 4
	DefaultDaemonSilentFor = 60 * time.Second
	HelloWithin            = 10 * time.Second
	WriteWithin            = 10 * time.Second
)

// An approver that sends more than maxRefused refused decisions within
// refusedWithin is disconnected: a client gone wrong (or an attacker at an
// admitted uid) must not keep the daemon busy refusing a flood.
const (
	maxRefused    = 32
	refusedWithin = time.Minute
)

// Peer is an approver client's process as the kernel reported it when it
// connected.
type Peer struct {
	UID, GID, PID int
	Groups        []uint32 // its supplementary groups
	User          string   // the user name of UID, or the number
	// Controllers are the uids that can control the client's terminal or
	// session: their requests are not put to it (see [approval.Member]).
	Controllers []int
}

// Host is the daemon's end of the protocol: it attaches approver clients
// to a broker. Set the fields before the first call to Serve.
type Host struct {
	// Broker is where clients attach; its Timeout is each prompt's.
	Broker *approval.Broker
	// Version is the daemon's version, told in the welcome.
	Version string
	// Log receives attach, detach and refusal lines; nil discards them.
	Log *slog.Logger
	// Grants lists and revokes the daemon's standing grants for a
	// connection that asks (grants, revoke); nil: the daemon keeps none.
	Grants GrantKeeper
	// RuleFile is the policy drop-in a rule saved from a prompt goes to,
	// told in the welcome; "" means rules are not saved, and a decision
	// that carries one is refused.
	RuleFile string
	// Hostname is the daemon's own host name, told in the welcome.
	Hostname string
	// PingEvery is how often an attached client is pinged; 0 means
	// DefaultPingEvery.
	PingEvery time.Duration
	// Silence is how long a client may send nothing (no pong, no
	// decision) before it is detached; 0 means DefaultSilence.
	Silence time.Duration
	// Status, when set, gives what an approver's idle screen shows; it is
	// sent to approvers that offer CapStatus after the welcome and after
	// each [Host.Changed].
	Status StatusSource
	// Passkeys, when set, is the file of enrolled passkeys: a passkey
	// relay (CapPasskey) may attach while one is enrolled, each approval
	// it sends is verified against the file, and root may enrol, remove
	// and import passkeys. nil: none of that.
	Passkeys *passkey.Keeper
	// PasskeyChanged, when set, records a change of the enrolled
	// passkeys once it is saved (the daemon's audit log).
	PasskeyChanged func(PasskeyChange)

	mu     sync.Mutex // guards conns and relays
	conns  map[*remote]struct{}
	relays map[*remote]struct{} // the attached passkey relays
}

// A StatusSource gives the status message for an approver.
type StatusSource interface {
	// Status returns the MsgStatus message for peer: only what concerns
	// requesters it may be asked about.
	Status(peer Peer) *Message
}

// statusEvery is the most often one approver is sent a status: changes
// within it are sent together.
const statusEvery = 200 * time.Millisecond

// Changed tells every attached approver that takes status messages that
// its status changed; each is sent the new one soon, changes close
// together coalesced into one message. It never blocks.
func (h *Host) Changed() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for r := range h.conns {
		select {
		case r.status <- struct{}{}:
		default:
		}
	}
}

// sendStatus sends r its status on each change until done ends.
func (h *Host) sendStatus(r *remote, done <-chan struct{}) {
	for {
		if m := h.Status.Status(r.peer); m != nil {
			m.Type = MsgStatus
			if r.send(m) != nil {
				return
			}
		}
		select {
		case <-done:
			return
		case <-r.status:
		}
		select { // gather the changes that follow close behind
		case <-done:
			return
		case <-time.After(statusEvery):
		}
	}
}

// A GrantKeeper holds the daemon's standing grants.
type GrantKeeper interface {
	// ListGrants returns the grants peer may see (those of requesters it
	// may be asked about) and how many others there are.
	ListGrants(peer Peer) (shown []GrantInfo, hidden int)
	// RevokeGrant ends grant id at peer's word; it returns the refusal's
	// text, or "".
	RevokeGrant(id string, peer Peer) string
}

// remote is an attached approver client: a broker member whose Approve
// sends a prompt over its connection and waits for the decision.
type remote struct {
	c     *net.UnixConn
	peer  Peer
	name  string // "USER on WHERE"
	user  string // USER
	where string // WHERE: the name it gave, e.g. "pts/3"
	by    string // its decisions' By: "approver USER on WHERE", or the daemon's own terminal's "tty WHERE"
	agent string // the SSH agent socket it offers, or ""
	group bool   // it shows a prompt's group count (CapGroup)
	// signed: a passkey relay (CapPasskey); keys verifies its approvals.
	signed bool
	keys   *passkey.Keeper
	// status is signalled when its status changed; nil when it takes no
	// status messages.
	status chan struct{}

	wmu sync.Mutex // serialises writes

	mu      sync.Mutex // guards pending
	pending map[string]*pendingPrompt

	timeout time.Duration
	done    chan struct{} // closed when the connection is over
}

type pendingPrompt struct {
	hash   string
	nonce  string // a passkey relay's: what the approval's challenge holds
	p      *approval.Prompt
	answer chan answer
}

// answer is a decision as an approver client sent it.
type answer struct {
	approve bool
	note    string        // a deny note, sanitised
	grant   time.Duration // a standing grant asked for with an approval
	rule    string        // a policy rule to save, checked, with an approval
	proof   *approval.PasskeyProof
}

var _ approval.Approver = (*remote)(nil)

func (r *remote) send(m *Message) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_ = r.c.SetWriteDeadline(time.Now().Add(WriteWithin))
	return WriteMessage(r.c, m)
}

// sendLine writes one encoded message line.
func (r *remote) sendLine(line []byte) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	_ = r.c.SetWriteDeadline(time.Now().Add(WriteWithin))
	_, err := r.c.Write(line)
	return err
}

// Approve implements [approval.Approver].
func (r *remote) Approve(ctx context.Context, p *approval.Prompt) approval.Decision {
	by := r.by
	if p.Group > 1 && !r.group {
		return approval.Decision{Verdict: approval.Unavailable, Message: wire.ApproverNoGroup(r.name), By: by}
	}
	pp := &pendingPrompt{hash: RequestHash(p), p: p, answer: make(chan answer, 1)}
	if r.signed {
		pp.nonce = passkey.Nonce()
	}
	r.mu.Lock()
	if r.pending == nil {
		r.mu.Unlock()
		return approval.Decision{Verdict: approval.Unavailable, Message: wire.ApproverDisconnected(r.name), By: by}
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
	line, err := PromptLine(p, time.Now().Add(r.timeout), pp.nonce)
	if err != nil { // the daemon checks this first: a request so large never gets here
		return approval.Decision{Verdict: approval.Unavailable, Message: err.Error(), By: by}
	}
	if err := r.sendLine(line); err != nil {
		return approval.Decision{Verdict: approval.Unavailable, Message: wire.ApproverUnreachable(r.name), By: by}
	}
	select {
	case a := <-pp.answer:
		if a.approve {
			d := approval.Decision{Verdict: approval.Allow, By: by, After: r, Grant: a.grant, Rule: a.rule, Passkey: a.proof}
			if a.proof != nil {
				d.By = "passkey " + termsafe.Sanitize(a.proof.Name) + " (" + a.proof.Credential + ") through " + by
			}
			if r.agent != "" {
				d.Agent = &approval.AgentOffer{Socket: r.agent, UID: uint32(r.peer.UID), GID: uint32(r.peer.GID), Groups: r.peer.Groups}
			}
			return d
		}
		return approval.Decision{Verdict: approval.Deny, Message: wire.DeniedByOperatorError(r.user, r.where).Error(), By: by, Note: a.note}
	case <-r.done:
		return approval.Decision{Verdict: approval.Unavailable, Message: wire.ApproverDisconnected(r.name), By: by}
	case <-ctx.Done():
		reason := "request withdrawn"
		if c := context.Cause(ctx); c != nil && !errors.Is(c, context.Canceled) {
			reason = c.Error()
		}
		_ = r.send(&Message{Type: MsgWithdraw, ID: p.ID, Reason: reason})
		return approval.Decision{Verdict: approval.Withdrawn, Message: approval.WithdrawnMessage, By: by}
	}
}

// Outcome implements [approval.Outcomer]: the approver that approved a
// request is told how it ended.
func (r *remote) Outcome(id, line string) {
	_ = r.send(&Message{Type: MsgResult, ID: id, Outcome: line})
}

// Refuse tells an approver client why it is refused; the caller closes c.
func Refuse(c *net.UnixConn, msg string) {
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	_ = WriteMessage(c, &Message{Type: MsgError, Message: msg})
}

// Serve runs one approver connection from peer, whom the caller has
// admitted, until the connection ends or ctx does: it reads the hello,
// attaches the client to the broker, welcomes it, pings it, and hands its
// decisions to the prompts they answer. It closes c.
func (h *Host) Serve(ctx context.Context, c *net.UnixConn, peer Peer) {
	h.serve(ctx, c, peer, "remote", nil)
}

// ServeTerminal is [Host.Serve] for the approver client rootgated --tty
// runs on its own terminal, over c, the daemon's end of a socket pair it
// made for that client: the broker and the daemon's answers name it as the
// daemon's own terminal (via "terminal"), and attached, when set, is
// called once it is attached, before its welcome is sent. peer is who the
// caller found that terminal's approver to be (a socket pair's credentials
// name the process that made it, the daemon).
func (h *Host) ServeTerminal(ctx context.Context, c *net.UnixConn, peer Peer, attached func()) {
	h.serve(ctx, c, peer, "terminal", attached)
}

// serve is Serve, the broker's member reached via via.
func (h *Host) serve(ctx context.Context, c *net.UnixConn, peer Peer, via string, attached func()) {
	defer c.Close()
	log := h.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("approver_uid", peer.UID, "approver_pid", peer.PID)
	br := bufio.NewReaderSize(c, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(HelloWithin))
	hello, err := ReadMessage(br, MaxApproverLine)
	if err != nil {
		Refuse(c, ApproverNoHello(err))
		return
	}
	switch hello.Type {
	case MsgGrants, MsgRevoke:
		h.grants(c, hello, peer, log)
		return
	case MsgEnrol, MsgPasskeyRemove, MsgPasskeyImport:
		h.passkeyChange(c, br, hello, peer, log)
		return
	}
	if msg := checkHello(hello); msg != "" {
		Refuse(c, msg)
		return
	}
	signed := slices.Contains(hello.Capabilities, CapPasskey)
	var keys *passkey.File
	if signed {
		var msg string
		if keys, msg = h.relayKeys(hello, log); msg != "" {
			Refuse(c, msg)
			return
		}
	}
	r := h.newRemote(c, peer, hello, via, signed)
	detach, err := h.attach(r, via, keys, attached)
	if err != nil {
		return
	}
	log.Info("approver attached", "name", r.name, "agent", r.agent != "", "controllers", peer.Controllers, "passkey_relay", signed)
	h.track(r)
	defer func() {
		h.untrack(r)
		detach()
		r.mu.Lock()
		r.pending = nil
		r.mu.Unlock()
		close(r.done)
		log.Info("approver detached", "name", r.name)
	}()

	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go h.ping(connCtx, r)
	h.readDecisions(ctx, r, br, log)
}

// checkHello returns why a hello is refused, or "": the type, the
// protocol's version, the client's name, its agent socket.
func checkHello(hello *Message) string {
	switch {
	case hello.Type != MsgHello:
		return ApproverNotHello(hello.Type)
	case hello.Version != ProtoVersion:
		return ApproverVersion(hello.Version, ProtoVersion)
	case utf8.RuneCountInString(hello.Name) > 64 || !termsafe.String(hello.Name, false):
		return ApproverHelloName
	case hello.AgentSocket != "" && (!filepath.IsAbs(hello.AgentSocket) || len(hello.AgentSocket) > 107):
		return ApproverHelloAgent
	}
	return ""
}

// relayKeys returns the enrolled passkeys a passkey relay (CapPasskey)
// verifies against, or why the relay is refused: it offers an agent, the
// file cannot be read, or no passkey is enrolled.
func (h *Host) relayKeys(hello *Message, log *slog.Logger) (*passkey.File, string) {
	if hello.AgentSocket != "" {
		return nil, ApproverPasskeyAgent
	}
	var keys *passkey.File
	if h.Passkeys != nil {
		var err error
		if keys, err = h.Passkeys.Load(); err != nil {
			log.Error("passkey relay refused: cannot read the passkeys", "err", err)
			return nil, err.Error()
		}
	}
	if keys == nil || len(keys.Passkeys) == 0 {
		return nil, ApproverNoPasskeys
	}
	return keys, ""
}

// newRemote is the approver client on c that sent hello.
func (h *Host) newRemote(c *net.UnixConn, peer Peer, hello *Message, via string, signed bool) *remote {
	where := hello.Name
	if where == "" {
		where = "an approver client"
	}
	r := &remote{
		c: c, peer: peer, name: peer.User + " on " + where, user: peer.User, where: where, by: "approver " + peer.User + " on " + where, agent: hello.AgentSocket,
		pending: map[string]*pendingPrompt{}, timeout: h.Broker.Timeout, done: make(chan struct{}),
		group:  slices.Contains(hello.Capabilities, CapGroup),
		signed: signed, keys: h.Passkeys,
	}
	if via == "terminal" {
		r.by = "tty " + where // as the daemon's own prompt said
	}
	if h.Status != nil && slices.Contains(hello.Capabilities, CapStatus) {
		r.status = make(chan struct{}, 1)
	}
	return r
}

// attach attaches r to the broker, calls attached (when set) and sends r
// its welcome; keys are a passkey relay's. When the welcome cannot be
// written, r is detached again and the error returned; else the returned
// detach ends the membership.
func (h *Host) attach(r *remote, via string, keys *passkey.File, attached func()) (detach func(), err error) {
	// Attach before the welcome: an approver told it is attached must be
	// asked about the very next request (a client may act on the welcome
	// at once, as tests and scripts do). Holding the write lock meanwhile
	// keeps a prompt for such a request from going out before the welcome.
	r.wmu.Lock()
	detach = h.Broker.Attach(&approval.Member{UID: r.peer.UID, Name: r.name, Via: via, Approver: r, Agent: r.agent, Controllers: r.peer.Controllers, Signed: r.signed})
	if attached != nil {
		attached()
	}
	_ = r.c.SetWriteDeadline(time.Now().Add(WriteWithin))
	welcome := &Message{Type: MsgWelcome, Version: ProtoVersion, Daemon: h.Version,
		PromptTimeout: h.Broker.Timeout.Seconds(), NotAsked: notAsked(r.peer.Controllers), SelfApproval: h.Broker.UnsafeSelfApproval,
		StandingGrants: h.Grants != nil, Hostname: h.Hostname, PingEvery: h.pingEvery().Seconds(), RuleFile: h.RuleFile}
	if r.signed {
		welcome.RPID, welcome.Credentials = keys.RPID, keys.IDs()
		welcome.RuleFile = "" // a passkey approval saves no rule
	}
	err = WriteMessage(r.c, welcome)
	r.wmu.Unlock()
	if err != nil {
		detach()
		return nil, err
	}
	return detach, nil
}

func (h *Host) pingEvery() time.Duration { return cmp.Or(h.PingEvery, DefaultPingEvery) }

func (h *Host) silence() time.Duration { return cmp.Or(h.Silence, DefaultSilence) }

// track records r, once attached, among the passkey relays (a signed r)
// and the approvers sent status messages, whose sender it starts.
func (h *Host) track(r *remote) {
	if r.signed {
		h.mu.Lock()
		if h.relays == nil {
			h.relays = map[*remote]struct{}{}
		}
		h.relays[r] = struct{}{}
		h.mu.Unlock()
	}
	if r.status != nil {
		h.mu.Lock()
		if h.conns == nil {
			h.conns = map[*remote]struct{}{}
		}
		h.conns[r] = struct{}{}
		h.mu.Unlock()
		go h.sendStatus(r, r.done)
	}
}

// untrack forgets r, as track recorded it.
func (h *Host) untrack(r *remote) {
	h.mu.Lock()
	delete(h.conns, r)
	delete(h.relays, r)
	h.mu.Unlock()
}

// ping pings r every h.pingEvery until ctx ends or a ping cannot be
// sent, then closes r's connection, which ends its read loop.
func (h *Host) ping(ctx context.Context, r *remote) {
	t := time.NewTicker(h.pingEvery())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			r.c.Close() // ends the read loop
			return
		case <-t.C:
			if r.send(&Message{Type: MsgPing}) != nil {
				r.c.Close()
				return
			}
		}
	}
}

// readDecisions reads r's messages (pongs and decisions) until the
// connection ends, r says something it must not, or ctx ends.
func (h *Host) readDecisions(ctx context.Context, r *remote, br *bufio.Reader, log *slog.Logger) {
	silentFor := h.silence()
	var refused []time.Time // when the decisions of the last refusedWithin were refused
	for {
		_ = r.c.SetReadDeadline(time.Now().Add(silentFor))
		m, err := ReadMessage(br, MaxApproverLine)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
				h.readFailed(r, err, log)
			}
			return
		}
		switch m.Type {
		case MsgPong:
		case MsgDecision:
			if !h.decision(r, m, &refused, log) {
				return
			}
		default:
			Refuse(r.c, ApproverUnknownType(m.Type))
			return
		}
	}
}

// readFailed logs, or tells r, why reading its next message failed: it
// was silent past h.silence, or sent a line that is no message.
func (h *Host) readFailed(r *remote, err error, log *slog.Logger) {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		log.Warn("approver silent: no answer to pings, detaching it", "name", r.name, "silent_for", h.silence().String())
	case !errors.As(err, &ne):
		Refuse(r.c, err.Error())
	}
}

// decision hands m, a decision, to its prompt, or tells r why it was
// refused; refused holds the times of r's refused decisions of the last
// refusedWithin. It returns false when r is to be dropped: too many
// refused, or it cannot be told.
func (h *Host) decision(r *remote, m *Message, refused *[]time.Time, log *slog.Logger) bool {
	msg := r.deliver(m, h.RuleFile)
	if msg == "" {
		if r.signed {
			_ = r.send(&Message{Type: MsgAccepted, ID: m.ID})
		}
		return true
	}
	log.Warn("decision refused", "id", m.ID, "why", msg)
	now := time.Now()
	*refused = append(slices.DeleteFunc(*refused, func(t time.Time) bool { return now.Sub(t) >= refusedWithin }), now)
	if len(*refused) > maxRefused {
		log.Warn("approver dropped: too many refused decisions")
		Refuse(r.c, ApproverTooManyRefused(maxRefused))
		return false
	}
	// One that does not read what it is told is dropped.
	return r.send(&Message{Type: MsgError, ID: m.ID, Message: msg}) == nil
}

// deliver hands a decision to its waiting prompt; it returns why it was
// refused, or "". An approval from a passkey relay is handed on only once
// its assertion verifies; one that does not uses up the prompt's nonce, and
// the relay is sent a new one.
func (r *remote) deliver(m *Message, ruleFile string) string {
	if m.Approve == nil {
		return ApproverNoVerdict
	}
	r.mu.Lock()
	pp := r.pending[m.ID]
	proof, refused, nonce := r.judge(m, pp, ruleFile)
	if refused == "" {
		delete(r.pending, m.ID)
	}
	r.mu.Unlock()
	if nonce != "" {
		_ = r.send(&Message{Type: MsgNonce, ID: m.ID, Nonce: nonce})
	}
	if refused != "" {
		return refused
	}
	a := answer{approve: *m.Approve, proof: proof}
	if !a.approve {
		a.note = wire.SanitizeNote(m.Note)
	}
	a.grant = time.Duration(m.Grant) * time.Second
	a.rule = m.Rule
	pp.answer <- a
	return ""
}

// judge returns why decision m of pp, the prompt it names (nil if none
// waits), is refused, or "" and, for a passkey relay's approval, the
// proof of its assertion. A refused assertion uses up pp's nonce: judge
// makes pp a new one and returns it, to be sent. r.mu is held.
func (r *remote) judge(m *Message, pp *pendingPrompt, ruleFile string) (proof *approval.PasskeyProof, refused, nonce string) {
	if refused = r.unfit(m, pp); refused != "" {
		return nil, refused, ""
	}
	// A refused grant leaves the prompt waiting: the approver may
	// answer it again.
	if refused = checkGrant(m, pp.p); refused == "" {
		refused = checkRule(m, pp.p, ruleFile)
	}
	if refused == "" && r.signed && *m.Approve {
		proof, refused = r.verify(m, pp)
		if refused != "" {
			pp.nonce = passkey.Nonce()
			nonce = pp.nonce
		}
	}
	return proof, refused, nonce
}

// unfit returns why decision m cannot be for pp, or "": no such prompt
// waits, it answers another request, or it has an assertion where none
// belongs or lacks one where one must be.
func (r *remote) unfit(m *Message, pp *pendingPrompt) string {
	switch {
	case pp == nil:
		return ApproverNoPrompt(m.ID)
	case pp.hash != m.Hash:
		return ApproverHashMismatch(m.ID)
	case m.Assertion != nil && (!r.signed || !*m.Approve):
		return ApproverAssertionUnasked
	case r.signed && *m.Approve && (m.Rule != "" || m.RuleRunsAnything):
		return ApproverPasskeyRule
	case r.signed && *m.Approve && m.Assertion == nil:
		return ApproverNoAssertion
	}
	return ""
}

// verify checks the passkey assertion of m, an approval of pp from a
// passkey relay: over pp's request hash, its nonce and the grant m asks
// for (passkey.Challenge), by an enrolled passkey. It returns the proof
// for the audit trail, or why it was refused.
func (r *remote) verify(m *Message, pp *pendingPrompt) (*approval.PasskeyProof, string) {
	if r.keys == nil {
		return nil, ApproverNoPasskeys
	}
	e, err := r.keys.Verify(m.Assertion, passkey.Challenge(pp.hash, pp.nonce, m.Grant, m.GrantRunsAnything))
	if err != nil {
		return nil, ApproverAssertionRefused(m.ID, termsafe.Sanitize(err.Error()))
	}
	a := m.Assertion
	return &approval.PasskeyProof{Credential: e.ID, Name: e.Name, Hash: pp.hash, Nonce: pp.nonce, Grant: m.Grant, GrantRunsAnything: m.GrantRunsAnything,
		AuthenticatorData: a.AuthenticatorData, ClientData: a.ClientData, Signature: a.Signature, UserHandle: a.UserHandle}, ""
}

// checkGrant returns why the grant m asks for is refused, or "".
func checkGrant(m *Message, p *approval.Prompt) string {
	if m.Grant == 0 && !m.GrantRunsAnything {
		return ""
	}
	maxSec := int64(approval.MaxGrant / time.Second)
	switch {
	case !*m.Approve:
		return ApproverGrantOnDeny
	case m.Grant < 1 || m.Grant > maxSec:
		return ApproverGrantDuration(m.Grant, maxSec)
	case p.ForwardAgent:
		return ApproverGrantAgent
	case approval.Grantable(p) != "":
		return ApproverGrantRefused(approval.Grantable(p))
	case len(approval.RunsAnything(p)) > 0 && !m.GrantRunsAnything:
		return ApproverGrantRunsAnything
	}
	return ""
}

// checkRule returns why the policy rule m carries is refused, or "". The
// daemon checks it here as the approver's screen did, and never takes the
// screen's word: one allow rule, naming its command, that matches the
// request shown (its text has no control or invisible character: the
// parser refuses them).
func checkRule(m *Message, p *approval.Prompt, ruleFile string) string {
	if m.Rule == "" && !m.RuleRunsAnything {
		return ""
	}
	switch {
	case !*m.Approve:
		return ApproverRuleOnDeny
	case ruleFile == "":
		return ApproverNoRules
	case m.Grant != 0:
		return ApproverRuleAndGrant
	}
	r, err := approval.CheckRule(p, m.Rule)
	if err != nil {
		return ApproverRuleRefused(err.Error())
	}
	if len(approval.RuleRunsAnything(p, r)) > 0 && !m.RuleRunsAnything {
		return ApproverRuleRunsAnything
	}
	return ""
}

// grants answers a connection that opened with a grants or revoke
// message, then it is closed.
func (h *Host) grants(c *net.UnixConn, m *Message, peer Peer, log *slog.Logger) {
	_ = c.SetWriteDeadline(time.Now().Add(WriteWithin))
	switch {
	case m.Version != ProtoVersion:
		Refuse(c, ApproverVersion(m.Version, ProtoVersion))
	case h.Grants == nil:
		Refuse(c, ApproverNoGrants)
	case m.Type == MsgGrants:
		shown, hidden := h.Grants.ListGrants(peer)
		_ = WriteMessage(c, &Message{Type: MsgGrants, Grants: shown, Hidden: hidden})
	default:
		if msg := h.Grants.RevokeGrant(m.ID, peer); msg != "" {
			Refuse(c, msg)
			return
		}
		log.Info("grant revoked", "grant", m.ID)
		_ = WriteMessage(c, &Message{Type: MsgRevoked, ID: m.ID})
	}
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
