// Package daemon is rootgated's core: it accepts connections on the request
// socket, reads each peer's identity from the kernel, takes one request
// line, checks it in the protocol's order, asks for approval and runs the
// pipeline, and answers with one line. It wires together the wire,
// approval and pipeline packages; they know nothing of each other.
//
// Create a [Server] with [New], then call [Server.Serve] with a listener
// made by the caller ([Listen], or one handed over by systemd). Cancelling
// Serve's context is the normal way to stop: waiting requests are answered
// "daemon stopping", running pipelines are killed, and Serve returns
// [ErrServerClosed]. [Server.WaitIdle] tells a daemon that may exit when
// unused (socket activation) when it is safe to.
package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/peerid"
	"github.com/rootgate/rootgate/internal/progid"
	"github.com/rootgate/rootgate/policy"
	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"
)

// ErrServerClosed is returned by Serve after its context was cancelled and
// every connection was answered.
var ErrServerClosed = errors.New("daemon: server closed")

// Defaults of Config's zero fields (see [Settings]).
const (
	DefaultExecTimeout      = 300 * time.Second
	DefaultMaxSkew          = 60 * time.Second
	DefaultMaxRuns          = 8
	DefaultMaxConns         = 64
	DefaultFirstByteTimeout = 2 * time.Second
	DefaultReadTimeout      = wire.ReadTimeout
	DefaultStallTimeout     = 10 * time.Second
	DefaultMaxPending       = 4
	DefaultPromptRate       = 20
	// DefaultMaxRequestsPerUID bounds the requests of one uid other than
	// root in the replay window.
	DefaultMaxRequestsPerUID = 20000
	DefaultRuntimeDir        = "/run/rootgate"
	// DefaultAuditMinFree is rootgated's --audit-min-free; a zero
	// Config.AuditMinFree is no guard.
	DefaultAuditMinFree = 32 << 20
)

// Config is a Server's settings. Those rootgated takes as flags are bound
// to their flags, defaults and docs in [Settings], which New gives a zero
// field its default from; their comments here are short.
type Config struct {
	// Version is the daemon's version, sent in every response.
	Version string
	// RuntimeDir holds the replay window's file, and the audit budgets'
	// (auditbudgetfile.go) (--runtime-dir).
	RuntimeDir string
	// Policy holds the operator's rules; nil asks a person for everything.
	// It is the policy in force until [Server.ReloadPolicy] replaces it.
	Policy *policy.Policy
	// LoadPolicy reads the policy again for [Server.ReloadPolicy]; nil
	// means the policy cannot be reloaded.
	LoadPolicy func() (*policy.Policy, error)
	// PolicyFile is the policy's main file. A rule a person saves from the
	// prompt is appended to the drop-in [approval.RuleDropIn] of its
	// directory (policy.Dir) and the policy reloaded with LoadPolicy; ""
	// (or no LoadPolicy) means rules are not saved, and approvers are not
	// offered to.
	PolicyFile string
	// Approver is asked when the policy says ask; nil means nobody can be
	// asked ([approval.Nobody]).
	Approver approval.Approver
	// Broker, when set, is where approver clients attach (ServeApprovers);
	// it should also be the Approver.
	Broker *approval.Broker
	// Admission names who besides root may attach as an approver.
	Admission Admission
	// Passkeys is the file of enrolled passkeys (--passkeys,
	// passkey.DefaultFile): passkey relays attach and are verified against
	// it, and root enrols passkeys into it through the approver socket;
	// "" means none.
	Passkeys string
	// ApproverPing is how often an attached approver client is pinged
	// (--approver-ping).
	ApproverPing time.Duration
	// ApproverSilence is how long an attached approver client may send
	// nothing before it is detached (--approver-silence); its prompts then
	// go on with the other approvers, or fail as when it closes.
	ApproverSilence time.Duration
	// Audit stores every request's lifecycle events; nil means none
	// beyond the log. A request whose records cannot be written does not
	// run (see docs/audit.md).
	Audit AuditLog
	// ExecTimeout bounds a run (--exec-timeout); a request's timeout may
	// only lower it.
	ExecTimeout time.Duration
	// KillGrace is how long a run has between SIGTERM and SIGKILL
	// (--kill-grace).
	KillGrace time.Duration
	// PromptTimeout is how long the approver waits for a person
	// (--prompt-timeout). The daemon only tells clients, in progress
	// lines, how long they may have to wait.
	PromptTimeout time.Duration
	// MaxSkew bounds the distance between a request's time and the clock
	// (--max-skew); the replay window is twice as long.
	MaxSkew time.Duration
	// MaxRuns caps the runs in progress at once (--max-runs).
	MaxRuns int
	// MaxConns caps the connections in flight; past it, "server busy"
	// (--max-conns).
	MaxConns int
	// MaxConnsPerUID caps the connections of one uid other than root in
	// flight (--max-conns-per-uid); 0 means a quarter of MaxConns (at
	// least 1).
	MaxConnsPerUID int
	// MaxRequestsPerUID caps the requests of one uid other than root within
	// the replay window, whose ids it remembers; past it, such a request
	// is refused (--max-requests-per-uid).
	MaxRequestsPerUID int
	// FirstByteTimeout is how long a connection may stay silent before it
	// is answered with an error and closed (--first-byte-timeout).
	FirstByteTimeout time.Duration
	// ReadTimeout is how long a connection has, from connecting, to send
	// its whole request line (--read-timeout).
	ReadTimeout time.Duration
	// StallTimeout is how long a client may leave its answer unread
	// before it is dropped (--stall-timeout).
	StallTimeout time.Duration
	// MaxPending caps the requests of one uid waiting for a person's
	// decision at once; past it, such a request is refused (--max-pending).
	MaxPending int
	// PromptRate caps the requests of one uid put to a person per minute
	// (a sliding minute); past it, such a request is refused
	// (--prompt-rate).
	PromptRate int
	// AuditMinFree is the free-space guard: while the audit log's file
	// system has fewer bytes left, requests are refused before they are
	// received (--audit-min-free); 0 means no guard.
	AuditMinFree int64
	// AuditRejectRate caps the rejected records of one uid other than
	// root written per minute (--audit-reject-rate); past it they are
	// counted, and one dropped record says how many (see docs/audit.md).
	AuditRejectRate int
	// AuditUIDBudget caps the bytes of audit records the requests of one
	// uid other than root add an hour, from its first
	// (--audit-uid-budget); past it, its requests that may run or reach
	// a person are refused (busy) until the hour ends, and its received
	// records are full only within a quarter of it (see docs/audit.md).
	AuditUIDBudget int64
	// EnvAllow is the env allowlist; nil means wire.DefaultEnvAllow.
	EnvAllow wire.EnvPolicy
	// Cgroups, when set, gives every run a cgroup of its own (see
	// [cgroup.SetupRuns]); nil contains runs the fallback way (sessions,
	// process groups, the subreaper and the environment tag). New kills
	// the runs' cgroups it finds left in Cgroups.Parent (those marked as
	// rootgated's: no other) and records each as orphaned.
	Cgroups *cgroup.Runs
	// Log receives the daemon's log; nil discards it.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server serves rootgate requests. Its fields are set by New.
type Server struct {
	cfg            Config
	replay         *replayWindow
	runs           *semaphore.Weighted // a unit per run in progress; waiters served in arrival order
	runShares      *runShares          // per-uid shares of runs, taken before runs
	kept           *keptBudget         // output kept for answers not yet written, taken before runShares
	conns          *semaphore.Weighted // a unit per connection in flight; never waited for
	auditWrites    *semaphore.Weighted // audit writes under way (stuckAudit); never waited for
	fds            *semaphore.Weighted // descriptors a connection or request may open (lacking.go); never waited for
	shares         *connShares         // per-uid shares of conns
	approverShares *connShares         // per-uid caps of approver connections
	act            *activity           // what keeps the server from being idle
	limit          *promptLimit        // per-uid prompt caps
	reject         *rejectLimit        // per-uid caps of rejected records
	auditBudget    *auditBudget        // per-uid hourly budget of audit records
	captures       capturedBudget      // content captured for requests not yet run
	savingLimits   sync.Mutex          // one saveLimits at a time, so the file ends with the latest
	// policy is the policy in force; each request takes it once, when
	// it is received, and decides against that one.
	policy atomic.Pointer[policy.Policy]
	reload sync.Mutex // one ReloadPolicy at a time
	// saving serialises the saving of rules from the prompt; it is taken
	// before reload, never inside it.
	saving sync.Mutex
	// grants are the standing grants people gave, in memory only.
	grants grantStore
	// host attaches approver clients; decisions are the last decisions,
	// for their idle screens.
	host      *remote.Host
	decisions decisionLog
	// programs finds the listed programs' files by what they are, for
	// the prompt (identify).
	programs *progid.Index
}

// New checks cfg, fills in defaults, opens the replay window in
// cfg.RuntimeDir and takes up the audit budgets kept there.
func New(cfg Config) (*Server, error) {
	clidoc.Fill(Settings, &cfg)
	if cfg.MaxConnsPerUID <= 0 {
		cfg.MaxConnsPerUID = max(1, cfg.MaxConns/4)
	}
	if cfg.Approver == nil {
		cfg.Approver = approval.Nobody{}
	}
	if cfg.EnvAllow == nil {
		cfg.EnvAllow = wire.DefaultEnvAllow()
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	rw, err := openReplay(cfg.RuntimeDir, 2*cfg.MaxSkew, cfg.MaxRequestsPerUID, cfg.Now())
	if err != nil {
		return nil, err
	}
	fds, nfds := newFDBudget()
	if need := int64(cfg.MaxConns) * (1 + requestFDs(1)); need > nfds {
		cfg.Log.Warn("the descriptor limit serves fewer connections than --max-conns at once; past it, server busy", "budget", nfds, "max_conns", cfg.MaxConns)
	}
	s := &Server{
		cfg:            cfg,
		replay:         rw,
		runs:           semaphore.NewWeighted(int64(cfg.MaxRuns)),
		runShares:      newRunShares(max(1, cfg.MaxRuns/2)),
		kept:           newKeptBudget(keptTotal(cfg.MaxRuns), keptUIDShare(cfg.MaxRuns)),
		conns:          semaphore.NewWeighted(int64(cfg.MaxConns)),
		fds:            fds,
		auditWrites:    semaphore.NewWeighted(auditPending),
		shares:         newConnShares(cfg.MaxConnsPerUID),
		approverShares: newConnShares(remote.MaxApproverConns),
		act:            newActivity(cfg.Now()),
		limit:          newPromptLimit(cfg.MaxPending, cfg.PromptRate),
		programs:       newPrograms(),
	}
	s.reject = newRejectLimit(cfg.AuditRejectRate, s.dropped)
	s.auditBudget = newAuditBudget(cfg.AuditUIDBudget, func(uid int, limit int64, renews time.Time) {
		cfg.Log.Warn("a uid's requests took their hourly budget of the audit log (--audit-uid-budget); its requests that may run or reach a person are refused until the hour ends",
			"requester_uid", uid, "budget_bytes", limit, "until", renews.UTC().Format(time.RFC3339))
	})
	s.auditBudget.saved = s.saveLimits
	s.loadLimits()
	s.policy.Store(cfg.Policy)
	s.warnLimits(cfg.Policy)
	var killed, swept map[string]bool
	if cfg.Cgroups != nil {
		killed = s.recoverOrphans()
		limit := ownMemoryMax(cfg.MaxRuns)
		// The reason is in the message: journalctl shows only that.
		if f, err := cfg.Cgroups.BoundOwnMemory(limit); err != nil {
			cfg.Log.Info("the daemon's own memory is not bounded by a cgroup: " + err.Error())
		} else {
			cfg.Log.Info(fmt.Sprintf("the daemon's own memory is bounded: memory.max %d in %s", limit, f))
		}
	} else {
		swept = s.recoverLeftovers()
	}
	s.recoverUnfinished(killed, swept)
	if cfg.Broker != nil {
		s.host = &remote.Host{Broker: cfg.Broker, Version: cfg.Version, Log: cfg.Log, Grants: grantKeeper{s}, Status: statusSource{s},
			RuleFile: s.ruleFile(), Hostname: nodename(), PingEvery: cfg.ApproverPing, Silence: cfg.ApproverSilence}
		if cfg.Passkeys != "" {
			s.host.Passkeys, s.host.PasskeyChanged = &passkey.Keeper{Path: cfg.Passkeys}, s.passkeysChanged
		}
		if cfg.Broker.OnChange == nil {
			cfg.Broker.OnChange = s.statusChanged
		}
	}
	return s, nil
}

// Serve accepts connections on ln until ctx ends, then closes ln, answers
// or cancels what is in flight, and returns ErrServerClosed. Any other
// error means ln failed.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	// Each serve loop waits for its own connections: a WaitGroup shared
	// by two loops could see Add while the other Waits at zero.
	var wg sync.WaitGroup
	defer wg.Wait()
	var backoff time.Duration
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.cfg.Log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("daemon: accept: %w", err)
		}
		backoff = 0
		end := s.act.begin(s.cfg.Now)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer end()
			s.admit(ctx, c)
		}()
	}
}

// admit reads the peer's identity, takes a slot of the global cap and one
// of the peer's uid share, and serves the connection; past either, it
// answers "server busy" without reading the request.
func (s *Server) admit(ctx context.Context, c *net.UnixConn) {
	peer, err := peerid.Of(c)
	if err != nil {
		defer c.Close()
		s.cfg.Log.Error("cannot identify peer", "err", err)
		s.respond(c, wire.ErrorResponse("", wire.ErrPeerCredentials))
		return
	}
	release, ok := s.shares.take(peer.UID)
	if !ok {
		s.busy(c, wire.TooManyConnsError(peer.UID, s.cfg.MaxConnsPerUID), "uid", peer.UID, "max_conns_per_uid", s.cfg.MaxConnsPerUID)
		return
	}
	defer release()
	if !s.conns.TryAcquire(1) {
		s.busy(c, wire.ErrServerBusy, "uid", peer.UID, "max_conns", s.cfg.MaxConns)
		return
	}
	defer s.conns.Release(1)
	if !s.fds.TryAcquire(1) {
		s.busy(c, wire.ErrLacking, "uid", peer.UID)
		return
	}
	defer s.fds.Release(1)
	s.serveConn(ctx, c, peer)
}

// isTemporary reports accept errors worth retrying (out of descriptors or
// memory, a connection aborted before accept).
func isTemporary(err error) bool {
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// Close writes the dropped records still due, keeps the audit budgets
// for the next daemon (saveLimits) and releases the replay window's file.
func (s *Server) Close() error {
	s.reject.close()
	s.saveLimits()
	return s.replay.Close()
}

// busy answers a connection over a cap with err without reading its
// request.
func (s *Server) busy(c *net.UnixConn, err error, attrs ...any) {
	defer c.Close()
	_ = c.SetWriteDeadline(time.Now().Add(time.Second))
	r := wire.ErrorResponse("", err)
	r.Version = s.cfg.Version
	_ = wire.WriteResponse(c, r)
	s.cfg.Log.Warn("connection refused: "+err.Error(), attrs...)
	s.drain(c)
}

// Draining: a Unix socket closed with bytes its peer sent still unread
// resets the peer's end, and the peer's next read then fails with
// ECONNRESET, the answer written before it unread. A connection answered
// without its request read (busy), or with the rest of it unread (a line
// too long), is therefore half-closed after its answer, which the peer
// reads to its end, and what the peer sent is read and dropped until it
// closes: at most drainMax bytes, for at most drainFor, and at most
// drainAtOnce connections at once (beyond, or past a bound, the
// connection is closed as it is).
const (
	drainMax    = wire.MaxLine
	drainFor    = time.Second
	drainAtOnce = 16
)

var drainers = semaphore.NewWeighted(drainAtOnce)

// drain half-closes c, answered, and reads what its peer sent, within
// the bounds above, before the caller closes it.
func (s *Server) drain(c *net.UnixConn) {
	if !drainers.TryAcquire(1) {
		return
	}
	defer drainers.Release(1)
	_ = c.CloseWrite()
	_ = c.SetReadDeadline(time.Now().Add(drainFor))
	_, _ = io.CopyN(io.Discard, c, drainMax)
}

// serveConn handles one connection: one request, one answer.
func (s *Server) serveConn(ctx context.Context, c *net.UnixConn, peer peerInfo) {
	// The record of a run's end is synced after the answer (see
	// durable); deferred early, so it runs late.
	defer s.commitAudit()
	// What a request leaves to do after its answer (the run's cgroup to
	// remove) is done once the connection is closed: the client has its
	// answer first.
	r := &request{s: s, peer: peer}
	defer func() {
		for _, f := range r.later {
			f()
		}
	}()
	defer c.Close()
	// Every line written once the request is read goes through ans.
	ans := &answerLine{w: stallGuard{c, s.cfg.StallTimeout}, hold: func(ctx context.Context, until time.Time) io.Writer {
		return newRunGuard(ctx, c, until, s.cfg.StallTimeout)
	}}
	// A bug met by one request must not take the daemon, and every other
	// request and run with it, down: answer this one with an error,
	// unless its answer has begun.
	defer func() {
		if v := recover(); v != nil {
			s.cfg.Log.Error("internal error; request abandoned", "panic", v, "stack", string(debug.Stack()))
			r := wire.ErrorResponse("", wire.ErrInternal)
			r.Version = s.cfg.Version
			_ = ans.abandon(r)
		}
	}()
	log := s.cfg.Log.With("uid", peer.UID, "pid", peer.PID)
	line, err := s.readLine(c)
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = wire.ReadTimeoutError(s.cfg.ReadTimeout)
	case errors.Is(err, io.EOF):
		return // connected and left without a word: nothing to answer
	}
	if err != nil {
		log.Info("request rejected", "err", err)
		s.respond(c, wire.ErrorResponse("", err))
		if errors.Is(err, wire.ErrTooLarge) {
			s.drain(c) // the rest of the line is unread
		}
		return
	}

	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A full close always means the client is gone. The end of its stream
	// alone (a half-close) means so only for a request that said
	// eof_withdraws: a forwarder such as sshd passes a requester's close on
	// as a half-close and keeps its own end open, while plain clients
	// half-close after their line and still wait for the answer. Whichever
	// of the watch and eofWithdraws comes second sees the other's mark.
	var optIn, ended atomic.Bool
	gone := func() { cancel(errClientGone) }
	stopWatch := watchHangup(c, func() {
		ended.Store(true)
		if optIn.Load() {
			gone()
		}
	}, gone, func() { ans.stdoutGone.Store(true) })
	defer stopWatch()
	eofWithdraws := func() {
		optIn.Store(true)
		// A stream that ended already (with the line itself) withdraws
		// the request before anything else is done for it.
		if ended.Load() || streamEnded(c) {
			gone()
		}
	}

	lines := &progressLines{w: ans.progress(), hold: progressHold, log: log}
	defer lines.end()
	ans.beforeStdout = lines.flush
	r.ctx, r.line, r.log, r.eofWithdraws, r.lines, r.out = reqCtx, line, log, eofWithdraws, lines, ans
	resp := r.serve()
	lines.end()
	if resp == nil {
		return
	}
	id, output := resp.ID, outputLen(resp)
	left := endCause(reqCtx) == errClientGone
	if !left {
		resp.Version = s.cfg.Version
		err = ans.finish(resp)
	}
	// The answer is written, or no one is there for it: a run's big
	// output is garbage now, collected at once (collect.go), before the
	// connection's other tail work and the line that says how it ended.
	resp = nil
	collectAfterRun(output)
	switch {
	case left:
		log.Info("client went away; no answer sent", "id", id)
	case err != nil:
		// A run's stdout that could not be written (a client that left,
		// or stopped reading) leaves the line unfinished: it is closed so.
		s.cfg.Log.Info("cannot send response", "id", id, "err", err)
	}
}

// progressHold is how long a progress line other than approval waits to
// be written: a request whose next line (a later phase's, or the answer)
// comes sooner gets none for that phase, so a run a policy rule allows
// that ends within it is answered with one line, and its client is woken
// once. An approval line is written at once: a person is asked.
const progressHold = 5 * time.Millisecond

// progressLines writes a connection's progress lines (docs/protocol.md),
// each but an approval line held for hold (progressHold) and dropped when
// a later line comes first. Progress lines are advisory: a client that
// cannot take one now is told the outcome by the answer line. A line held
// when a run's stdout comes is written then, before the answer begins
// (answerLine), and none after.
type progressLines struct {
	w    io.Writer
	hold time.Duration
	log  *slog.Logger

	mu    sync.Mutex // guards what follows; held while a line is written
	held  *heldLine  // the line held, while one is
	ended bool       // the answer comes next: no more progress lines
}

// heldLine is a progress line waiting for its hold to pass.
type heldLine struct {
	id, phase string
	within    time.Duration
	timer     *time.Timer
}

// send writes the progress line of id for phase, saying the answer comes
// within, or holds it (see progressHold).
func (p *progressLines) send(id, phase string, within time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	p.drop()
	l := &heldLine{id: id, phase: phase, within: within}
	if phase == wire.ProgressApproval {
		p.write(l)
		return
	}
	p.held = l
	// Set under p.mu, which the timer's function takes first.
	l.timer = time.AfterFunc(p.hold, func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.held == l { // not dropped, nor ended, meanwhile
			p.held = nil
			p.write(l)
		}
	})
}

// end drops a line still held and writes none after: the answer, if
// any, comes next.
func (p *progressLines) end() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	p.drop()
}

// flush writes a line still held at once, and none after: a run's
// stdout begins the answer next (answerLine), whose line may then take
// the whole run to complete, as the held line's within tells the client.
func (p *progressLines) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return
	}
	l := p.held
	p.ended = true
	p.drop()
	if l != nil {
		p.write(l)
	}
}

// drop forgets the line held, if any.
func (p *progressLines) drop() {
	if p.held != nil {
		p.held.timer.Stop()
		p.held = nil
	}
}

func (p *progressLines) write(l *heldLine) {
	if err := wire.WriteProgress(p.w, l.id, l.phase, l.within); err != nil && !errors.Is(err, errAnswerBegun) {
		p.log.Info("cannot send progress", "id", l.id, "err", err)
	}
}

// readLine reads the request line within Config.ReadTimeout of connecting,
// and its first byte within Config.FirstByteTimeout: a connection that says
// nothing gives its slot back soon.
func (s *Server) readLine(c *net.UnixConn) ([]byte, error) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(min(s.cfg.FirstByteTimeout, s.cfg.ReadTimeout)))
	first := make([]byte, 1)
	n, err := c.Read(first)
	if n == 0 {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, wire.FirstByteError(s.cfg.FirstByteTimeout)
		}
		return nil, err // io.EOF: left without a word
	}
	_ = c.SetReadDeadline(start.Add(s.cfg.ReadTimeout))
	return wire.ReadLine(io.MultiReader(bytes.NewReader(first), c))
}

var errClientGone = errors.New("client went away")

func (s *Server) respond(c *net.UnixConn, r *wire.Response) {
	r.Version = s.cfg.Version
	if err := wire.WriteResponse(stallGuard{c, s.cfg.StallTimeout}, r); err != nil {
		s.cfg.Log.Info("cannot send response", "id", r.ID, "err", err)
	}
}

// stallGuard writes to a connection so that a slow reader is served and
// a stalled one is dropped: a client that never reads must not hold a
// connection slot, a goroutine and up to 16 MiB of captured stderr for
// ever, nor its run's stdout, which waits for the client's reading as it
// streams into the answer (answerLine). A client is dropped once
// Config.StallTimeout has passed with nothing of what was sent read, not
// when one write takes longer: the kernel lets a writer go on only once
// its reader has taken three quarters of the socket's buffer (about
// 150 KiB), which a reader at 1 KiB/s takes minutes to do. So it writes
// at most stallChunk at once, which the kernel queues as one buffer,
// freed when the reader has read it all; and while a write waits, it
// looks every tenth of the timeout at what is queued (SIOCOUTQ): less
// than at the last look means the reader read, and the timeout starts
// again.
type stallGuard struct {
	c      *net.UnixConn
	within time.Duration
}

// stallChunk is the most stallGuard writes at once: a reader at 1 KiB/s
// reads one in 4 s, well within the default 10 s.
const stallChunk = 4 << 10

func (g stallGuard) Write(p []byte) (int, error) {
	look := max(g.within/10, time.Millisecond)
	deadline := time.Now().Add(g.within)
	queued := -1 // at the last look; -1: not looked since the last write
	n := 0
	for n < len(p) {
		next := time.Now().Add(look)
		if deadline.Before(next) {
			next = deadline
		}
		_ = g.c.SetWriteDeadline(next)
		m, err := g.c.Write(p[n:min(len(p), n+stallChunk)])
		n += m
		if m > 0 {
			deadline, queued = time.Now().Add(g.within), -1
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return n, err
		}
		if q, ok := outq(g.c); ok {
			if queued >= 0 && q < queued {
				deadline = time.Now().Add(g.within) // the reader read
			}
			queued = q
		}
		if !time.Now().Before(deadline) {
			return n, err
		}
	}
	return n, nil
}

// outq is how much of what was written to c its reader has yet to read,
// counted as the kernel counts its buffers.
func outq(c *net.UnixConn) (int, bool) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, false
	}
	var q int
	cerr := rc.Control(func(fd uintptr) { q, err = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ) })
	return q, cerr == nil && err == nil
}

// peerInfo is a client's identity as the kernel gave it at accept.
type peerInfo = peerid.Info
