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
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/wire"
)

// ErrServerClosed is returned by Serve after its context was cancelled and
// every connection was answered.
var ErrServerClosed = errors.New("daemon: server closed")

// Defaults of Config's zero fields.
const (
	DefaultPromptTimeout = approval.DefaultPromptTimeout
	DefaultExecTimeout   = 300 * time.Second
	DefaultMaxSkew       = 60 * time.Second
	DefaultMaxRuns       = 8
	DefaultMaxConns      = 64
	DefaultFirstByte     = 2 * time.Second
	DefaultMaxPending    = 4
	DefaultPromptRate    = 20
	DefaultRuntimeDir    = "/run/rootgate"
)

// Config is a Server's settings. Zero fields take the defaults above.
type Config struct {
	// Version is the daemon's version, sent in every response.
	Version string
	// RuntimeDir holds the replay window's file.
	RuntimeDir string
	// Policy holds the operator's rules; nil asks a person for everything.
	Policy *approval.Policy
	// Approver is asked when the policy says ask; nil means nobody can be
	// asked ([approval.Nobody]).
	Approver approval.Approver
	// Broker, when set, is where approver clients attach (ServeApprovers);
	// it should also be the Approver.
	Broker *approval.Broker
	// Admission names who besides root may attach as an approver.
	Admission Admission
	// Audit stores every request's lifecycle events; nil means none
	// beyond the log. A request whose records cannot be written does not
	// run (see docs/audit.md).
	Audit AuditLog
	// ExecTimeout bounds a run; a request's timeout may only lower it.
	ExecTimeout time.Duration
	// KillGrace is how long a run has between SIGTERM and SIGKILL.
	KillGrace time.Duration
	// MaxSkew bounds the distance between a request's time and the clock;
	// the replay window is twice as long.
	MaxSkew time.Duration
	// MaxRuns caps the runs in progress at once.
	MaxRuns int
	// MaxConns caps the connections in flight; past it, "server busy".
	MaxConns int
	// MaxConnsPerUID caps the connections of one uid other than root in
	// flight; 0 means a quarter of MaxConns (at least 1).
	MaxConnsPerUID int
	// FirstByte is how long a connection may stay silent before it is
	// answered with an error and closed; 0 means DefaultFirstByte.
	FirstByte time.Duration
	// MaxPending caps the requests of one uid waiting for a person's
	// decision at once; past it, such a request is refused.
	MaxPending int
	// PromptRate caps the requests of one uid put to a person per minute
	// (a sliding minute); past it, such a request is refused.
	PromptRate int
	// AuditMinFree is the free-space guard: while the audit log's file
	// system has fewer bytes left, requests are refused before they are
	// received; 0 means no guard.
	AuditMinFree int64
	// RejectRate caps the rejected records of one uid other than root
	// written per minute; past it they are counted, and one dropped record
	// says how many (see docs/audit.md).
	RejectRate int
	// EnvAllow is the env allowlist; nil means wire.DefaultEnvAllow.
	EnvAllow wire.EnvPolicy
	// Log receives the daemon's log; nil discards it.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Server serves rootgate requests. Its fields are set by New.
type Server struct {
	cfg    Config
	replay *replayWindow
	runs   chan struct{} // a token per run in progress
	conns  chan struct{} // a token per connection in flight
	shares *connShares   // per-uid shares of conns
	act    *activity     // what keeps the server from being idle
	limit  *promptLimit  // per-uid prompt caps
	reject *rejectLimit  // per-uid caps of rejected records
}

// New checks cfg, fills in defaults and opens the replay window in
// cfg.RuntimeDir.
func New(cfg Config) (*Server, error) {
	if cfg.RuntimeDir == "" {
		cfg.RuntimeDir = DefaultRuntimeDir
	}
	if cfg.Approver == nil {
		cfg.Approver = approval.Nobody{}
	}
	if cfg.ExecTimeout <= 0 {
		cfg.ExecTimeout = DefaultExecTimeout
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = pipeline.DefaultKillGrace
	}
	if cfg.MaxSkew <= 0 {
		cfg.MaxSkew = DefaultMaxSkew
	}
	if cfg.MaxRuns <= 0 {
		cfg.MaxRuns = DefaultMaxRuns
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxConnsPerUID <= 0 {
		cfg.MaxConnsPerUID = max(1, cfg.MaxConns/4)
	}
	if cfg.FirstByte <= 0 {
		cfg.FirstByte = DefaultFirstByte
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.PromptRate <= 0 {
		cfg.PromptRate = DefaultPromptRate
	}
	if cfg.RejectRate <= 0 {
		cfg.RejectRate = DefaultRejectRate
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
	rw, err := openReplay(cfg.RuntimeDir, 2*cfg.MaxSkew, cfg.Now())
	if err != nil {
		return nil, err
	}
	s := &Server{
		cfg:    cfg,
		replay: rw,
		runs:   make(chan struct{}, cfg.MaxRuns),
		conns:  make(chan struct{}, cfg.MaxConns),
		shares: newConnShares(cfg.MaxConnsPerUID),
		act:    newActivity(cfg.Now()),
		limit:  newPromptLimit(cfg.MaxPending, cfg.PromptRate),
	}
	s.reject = newRejectLimit(cfg.RejectRate, s.dropped)
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
	peer, err := peerOf(c)
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
	select {
	case s.conns <- struct{}{}:
		defer func() { <-s.conns }()
	default:
		s.busy(c, wire.ErrServerBusy, "uid", peer.UID, "max_conns", s.cfg.MaxConns)
		return
	}
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

// Close writes the dropped records still due and releases the replay
// window's file.
func (s *Server) Close() error {
	s.reject.close()
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
}

// serveConn handles one connection: one request, one answer.
func (s *Server) serveConn(ctx context.Context, c *net.UnixConn, peer peerInfo) {
	defer c.Close()
	// A bug met by one request must not take the daemon, and every other
	// request and run with it, down: answer this one with an error.
	defer func() {
		if v := recover(); v != nil {
			s.cfg.Log.Error("internal error; request abandoned", "panic", v, "stack", string(debug.Stack()))
			s.respond(c, wire.ErrorResponse("", wire.ErrInternal))
		}
	}()
	log := s.cfg.Log.With("uid", peer.UID, "pid", peer.PID)
	line, err := s.readLine(c)
	_ = c.SetReadDeadline(time.Time{})
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		err = wire.ErrReadTimeout
	case errors.Is(err, io.EOF):
		return // connected and left without a word: nothing to answer
	}
	if err != nil {
		log.Info("request rejected", "err", err)
		s.respond(c, wire.ErrorResponse("", err))
		return
	}

	hup, eof, stopWatch := watchHangup(c)
	defer stopWatch()
	reqCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// A full close always means the client is gone. The end of its stream
	// alone (a half-close) means so only for a request that said
	// eof_withdraws: a forwarder such as sshd passes a requester's close on
	// as a half-close and keeps its own end open, while plain clients
	// half-close after their line and still wait for the answer.
	optIn := make(chan struct{})
	var optInOnce sync.Once
	eofWithdraws := func() {
		optInOnce.Do(func() { close(optIn) })
		// A stream that ended already (with the line itself) withdraws
		// the request before anything else is done for it.
		if streamEnded(c) {
			cancel(errClientGone)
		}
	}
	go func() {
		select {
		case <-hup:
			cancel(errClientGone)
			return
		case <-eof:
		case <-reqCtx.Done():
			return
		}
		select {
		case <-hup:
			cancel(errClientGone)
		case <-optIn:
			cancel(errClientGone)
		case <-reqCtx.Done():
		}
	}()

	resp := s.handle(reqCtx, peer, line, eofWithdraws, log)
	if resp == nil {
		return
	}
	if context.Cause(reqCtx) == errClientGone {
		log.Info("client went away; no answer sent", "id", resp.ID)
		return
	}
	s.respond(c, resp)
}

// readLine reads the request line within wire.ReadTimeout of connecting,
// and its first byte within Config.FirstByte: a connection that says
// nothing gives its slot back soon.
func (s *Server) readLine(c *net.UnixConn) ([]byte, error) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(min(s.cfg.FirstByte, wire.ReadTimeout)))
	first := make([]byte, 1)
	n, err := c.Read(first)
	if n == 0 {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, wire.FirstByteError(s.cfg.FirstByte)
		}
		return nil, err // io.EOF: left without a word
	}
	_ = c.SetReadDeadline(start.Add(wire.ReadTimeout))
	return wire.ReadLine(io.MultiReader(bytes.NewReader(first), c))
}

var errClientGone = errors.New("client went away")

func (s *Server) respond(c *net.UnixConn, r *wire.Response) {
	r.Version = s.cfg.Version
	if err := wire.WriteResponse(stallGuard{c}, r); err != nil {
		s.cfg.Log.Info("cannot send response", "id", r.ID, "err", err)
	}
}

// stallWithin is how long a client may leave its answer unread before it
// is dropped: a client that never reads must not hold a connection slot,
// a goroutine and up to 48 MiB of captured output for ever.
const stallWithin = 10 * time.Second

// stallGuard writes to a connection with a deadline renewed before every
// write, so a slow reader is served and a stalled one is dropped.
type stallGuard struct{ c *net.UnixConn }

func (g stallGuard) Write(p []byte) (int, error) {
	_ = g.c.SetWriteDeadline(time.Now().Add(stallWithin))
	return g.c.Write(p)
}

func errorResponse(id string, err error) *wire.Response {
	return wire.ErrorResponse(id, err)
}

// handle takes a request line through checks 3 to 11. It calls
// eofWithdraws once the request is decoded and asks for it. It returns nil
// when there is no one left to answer.
func (s *Server) handle(ctx context.Context, peer peerInfo, line []byte, eofWithdraws func(), log *slog.Logger) *wire.Response {
	now := s.cfg.Now()
	req, err := wire.Decode(line)
	if err != nil {
		id := ""
		if req != nil {
			id = req.ID
		}
		s.event(auditEvent{Kind: eventRejected, ID: id, Peer: peer, Err: err, Line: line})
		return errorResponse(id, err)
	}
	if req.EOFWithdraws {
		eofWithdraws()
	}
	log = log.With("id", req.ID)
	// A request refused before it is received (checks 4 to 9, and the
	// prompt caps) leaves one compact rejected record, rate-limited per
	// uid: its line's size and SHA-256, never the line (docs/audit.md).
	received := false
	reject := func(err error) *wire.Response {
		e := auditEvent{Kind: eventRejected, ID: req.ID, Peer: peer, Err: err}
		if !received {
			e.Line = line
		}
		s.event(e)
		return errorResponse(req.ID, err)
	}
	// receive writes the received record, once the request is to be
	// decided; nothing runs, and it is not decided, if it cannot be.
	// For a request nothing will run for (a ping, a policy denial) a
	// pipeline past maxRecordedPipeline bytes is left out of the record,
	// which keeps the line's size and SHA-256 instead.
	receive := func(runsNothing bool) error {
		if err := s.checkFree(); err != nil {
			return err
		}
		received = true
		e := auditEvent{Kind: eventReceived, ID: req.ID, Peer: peer, Request: req}
		if runsNothing && pipelineBytes(req.Pipeline) > maxRecordedPipeline {
			e.Line = line
		}
		if err := s.event(e); err != nil {
			return errAudit
		}
		return nil
	}
	if err := req.CheckTime(now, s.cfg.MaxSkew); err != nil {
		return reject(err)
	}
	if err := s.cfg.EnvAllow.Check(req.Env); err != nil {
		return reject(err)
	}
	fresh, err := s.replay.Add(req.ReplayKey(), now)
	if err != nil {
		log.Error("replay window", "err", err)
		return reject(wire.ErrReplayRecord)
	}
	if !fresh {
		return reject(wire.DuplicateError(req.ID))
	}
	if req.Action == wire.ActionPing {
		// A ping runs nothing and asks no one: its record shares the
		// per-uid budget of refused requests, so pings cannot flood the log.
		if !s.reject.allow(peer.UID, now) {
			return s.pong(req.ID, peer)
		}
		switch err := receive(true); {
		case errors.Is(err, errAuditFull):
			return reject(err)
		case err != nil:
			return errorResponse(req.ID, err)
		}
		return s.pong(req.ID, peer)
	}

	plan, err := s.plan(req, peer)
	if err != nil {
		return reject(err)
	}
	defer plan.close()

	d, err := s.decide(ctx, plan, log, receive)
	switch {
	case errors.Is(err, errAudit):
		return errorResponse(req.ID, errAudit)
	case errors.Is(err, errAuditFull):
		return reject(err)
	case err != nil:
		return reject(err)
	}
	if plan.unrecorded {
		return &wire.Response{ID: req.ID, Status: wire.StatusDenied, Code: denialCode(d), Message: d.Message}
	}
	if s.event(auditEvent{Kind: eventDecided, ID: req.ID, Peer: peer, Decision: &d, Rule: plan.rule}) != nil {
		return errorResponse(req.ID, errAudit)
	}
	// fail ends a decided request in an error, recorded as failed.
	fail := func(msg error) *wire.Response {
		s.event(auditEvent{Kind: eventFailed, ID: req.ID, Peer: peer, Decision: &d, Err: msg})
		return errorResponse(req.ID, msg)
	}
	switch d.Verdict {
	case approval.Allow:
	case approval.Deny, approval.Unavailable:
		return &wire.Response{ID: req.ID, Status: wire.StatusDenied, Code: denialCode(d), Message: d.Message}
	case approval.Expired:
		return &wire.Response{ID: req.ID, Status: wire.StatusTimeout, Code: wire.CodePromptTimeout, Message: d.Message}
	default: // withdrawn: the client left or the daemon is stopping
		return s.gone(ctx, req.ID)
	}

	select {
	case s.runs <- struct{}{}:
		defer func() { <-s.runs }()
	case <-ctx.Done():
	}
	// A requester gone by now (even as the slot came free) is not run for.
	if ctx.Err() != nil {
		s.event(auditEvent{Kind: eventFailed, ID: req.ID, Peer: peer, Decision: &d, Err: fmt.Errorf("not started: %w", context.Cause(ctx))})
		return s.gone(ctx, req.ID)
	}
	if req.ForwardAgent {
		if d.Agent == nil { // allowed by policy, or by an approver without one
			return fail(wire.ErrNoAgent)
		}
		relay, err := startAgentRelay(ctx, filepath.Join(s.cfg.RuntimeDir, "agent"),
			agentSource{Path: d.Agent.Socket, UID: d.Agent.UID, GID: d.Agent.GID, Groups: d.Agent.Groups}, plan.account)
		if err != nil {
			log.Error("agent relay", "err", err)
			return fail(wire.AgentError(err))
		}
		defer relay.Close()
		plan.cmd.Env = append(plan.cmd.Env, "SSH_AUTH_SOCK="+relay.SocketPath())
	}
	// The run starts only once its started record is on disk.
	if err := s.event(auditEvent{Kind: eventStarted, ID: req.ID, Peer: peer, Decision: &d, Plan: plan}); err != nil {
		return errorResponse(req.ID, errAudit)
	}
	began := time.Now()
	res, err := plan.cmd.Run(ctx)
	if err != nil {
		log.Error("run failed to start", "err", err)
		return fail(wire.StartError(err))
	}
	// The run is over: a failure to record its end is logged, but the
	// requester still gets its result.
	s.event(auditEvent{Kind: endKind(ctx, res), ID: req.ID, Peer: peer, Decision: &d, Result: res, Duration: time.Since(began)})
	if d.After != nil {
		d.After.Outcome(req.ID, outcomeLine(res))
	}
	if res.Canceled {
		return s.gone(ctx, req.ID)
	}
	resp := runResponse(req.ID, res)
	if res.TimedOut {
		resp.Status = wire.StatusTimeout
		resp.Code = wire.CodeRunTimeout
		resp.Message = wire.RunTimeoutMessage(plan.cmd.Timeout)
	}
	return resp
}

// pong answers a ping: whether a person could be asked about peer's
// requests now.
func (s *Server) pong(id string, peer peerInfo) *wire.Response {
	resp := &wire.Response{ID: id, Status: wire.StatusOK, Message: wire.Pong}
	if s.cfg.Broker != nil {
		can := s.cfg.Broker.CanAsk(peer.UID)
		resp.Approver = &can
	}
	return resp
}

// gone answers a request whose context ended: "daemon stopping" when the
// daemon is, nothing when the client went away.
func (s *Server) gone(ctx context.Context, id string) *wire.Response {
	if context.Cause(ctx) == errClientGone {
		return nil
	}
	return errorResponse(id, wire.ErrStopping)
}

// outcomeLine sums up a run for the approver who allowed it.
func outcomeLine(res *pipeline.Result) string {
	var what string
	switch {
	case res.Canceled:
		what = "cancelled"
	case res.TimedOut:
		what = "timed out"
	default:
		what = "finished"
	}
	codes := ""
	for i, st := range res.Stages {
		if i > 0 {
			codes += " "
		}
		codes += strconv.Itoa(st.ExitCode)
		if st.Signal != "" {
			codes += "(" + st.Signal + ")"
		}
	}
	return what + ", exit codes " + codes
}

// denialCode is the code of a request d denies: the decider's own, or
// else that a person said no (Deny) or that no one could (Unavailable).
func denialCode(d approval.Decision) string {
	switch {
	case d.Code != "":
		return d.Code
	case d.Verdict == approval.Unavailable:
		return wire.CodeNoApprover
	}
	return wire.CodeDeniedByOperator
}

func runResponse(id string, res *pipeline.Result) *wire.Response {
	r := &wire.Response{
		ID:              id,
		Status:          wire.StatusOK,
		Stages:          make([]wire.StageResult, len(res.Stages)),
		Stdout:          res.Stdout.Data,
		StdoutTruncated: res.Stdout.Truncated,
	}
	for i, st := range res.Stages {
		r.Stages[i] = wire.StageResult{
			ExitCode:        st.ExitCode,
			Signal:          st.Signal,
			Stderr:          st.Stderr.Data,
			StderrTruncated: st.Stderr.Truncated,
		}
	}
	return r
}

// runPlan is a request made ready to run: executables resolved, identity and
// environment fixed. What the approver is shown is made from it, and it is
// what runs.
type runPlan struct {
	req     *wire.Request
	peer    peerInfo
	account pipeline.Account
	stages  []approval.Stage
	cwd     string             // the held cwd's real path
	dir     *os.File           // the cwd, held open
	pinned  []*pipeline.Pinned // the stages' executables, held open
	cmd     *pipeline.Cmd
	rule    *approval.Rule // the policy rule that decided, if one did
	// unrecorded: a policy denial past its uid's budget of records for
	// requests refused without a person; counted in a dropped record.
	unrecorded bool
}

// close releases the pinned executables and the cwd.
func (p *runPlan) close() {
	for _, f := range p.pinned {
		f.Close()
	}
	if p.dir != nil {
		p.dir.Close()
	}
}

// plan is check 9: resolve every executable, the cwd and the run-as user.
// Each executable is pinned (held open) from here to the run, so the file
// the approver is shown is the one that runs; the caller closes the plan.
// For a run that is not privileged, the cwd and the executables are
// opened with the run-as user's file system identity, so such a run
// reaches nothing its user could not.
func (s *Server) plan(req *wire.Request, peer peerInfo) (_ *runPlan, err error) {
	if req.ForwardAgent && (s.cfg.Broker == nil || !s.cfg.Broker.OffersAgent(peer.UID)) {
		return nil, wire.ErrNoAgent
	}
	uid := uint32(0)
	if !req.Privileged {
		uid = uint32(peer.UID)
	}
	account, err := pipeline.LookupAccount(uid)
	if err != nil {
		return nil, wire.NoUserError(int(uid))
	}
	if !req.Privileged {
		// The peer's own groups, as the kernel reported them at connect.
		account.GID = uint32(peer.GID)
		account.Groups = peer.Groups
	}
	p := &runPlan{req: req, peer: peer, account: account, stages: make([]approval.Stage, len(req.Pipeline))}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	open := p.open
	if !req.Privileged {
		open = func() error { return pipeline.AsUser(&p.account, p.open) }
	}
	if err := open(); err != nil {
		return nil, err
	}
	timeout := s.cfg.ExecTimeout
	if req.Timeout > 0 && req.Timeout < timeout {
		timeout = req.Timeout
	}
	paths := make([]string, len(p.stages))
	for i, st := range p.stages {
		paths[i] = st.Path
	}
	p.cmd = &pipeline.Cmd{
		Argv:      req.Pipeline,
		Paths:     paths,
		Env:       pipeline.Env(p.account, req.Env),
		Pinned:    p.pinned,
		Dir:       p.cwd,
		DirFile:   p.dir,
		Stdin:     req.Stdin,
		Account:   &p.account,
		Timeout:   timeout,
		KillGrace: s.cfg.KillGrace,
		Cap:       wire.MaxCapture,
	}
	return p, nil
}

// open opens the cwd and resolves and pins every stage's executable, with
// the calling thread's file system identity. The cwd is held open from
// here to the run, which enters the directory held, not whatever its path
// names by then; the prompt shows that directory's own path, symlinks
// resolved, as the kernel names the descriptor. Likewise each stage shows
// the real path of the file pinned, which is the one that runs.
func (p *runPlan) open() error {
	req := p.req
	dir, err := pipeline.OpenDir(req.Cwd)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return wire.CwdDeniedError(req.Cwd)
	case errors.Is(err, pipeline.ErrMagicLink):
		return wire.CwdError(req.Cwd, pipeline.ErrMagicLink)
	case err != nil:
		return wire.CwdMissingError(req.Cwd)
	}
	p.dir = dir
	cwd, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(dir.Fd())))
	if err != nil || !filepath.IsAbs(cwd) {
		return wire.CwdMissingError(req.Cwd)
	}
	p.cwd = cwd
	for i, argv := range req.Pipeline {
		exe, err := pipeline.Resolve(argv[0], cwd)
		if err != nil {
			if errors.Is(err, pipeline.ErrNotFound) {
				return wire.NotFoundError(i+1, argv[0])
			}
			return wire.ResolveError(i+1, err)
		}
		pin, err := pipeline.Pin(exe.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return wire.NotFoundError(i+1, argv[0]) // gone since Resolve looked
		case err != nil:
			return wire.ResolveError(i+1, err)
		}
		p.pinned = append(p.pinned, pin)
		st := approval.Stage{Argv: argv, Path: exe.Path}
		if pin.Real != exe.Path {
			st.Target = pin.Real
		}
		p.stages[i] = st
	}
	return nil
}

// decide is check 10: the policy first, then a person.
// receive writes the received record: it is called once the request is
// decided by the policy, or admitted to be put to a person.
func (s *Server) decide(ctx context.Context, p *runPlan, log *slog.Logger, receive func(runsNothing bool) error) (approval.Decision, error) {
	req := p.req
	userName := userNameOf(p.peer.UID)
	m := s.cfg.Policy.Evaluate(approval.Subject{
		Privileged: req.Privileged,
		User:       userName,
		Session:    req.Session,
		Host:       req.Host,
		Stages:     req.Pipeline,
		Paths:      p.cmd.Paths,
		Env:        req.Env,
	})
	if m.Action == approval.ActionDeny && !s.reject.allow(p.peer.UID, s.cfg.Now()) {
		// Denied without a person: such records share the per-uid budget
		// of refused requests, so a flood of them cannot fill the log.
		p.unrecorded = true
	} else if m.Action == approval.ActionDeny || m.Action == approval.ActionAllow && !req.ForwardAgent {
		if err := receive(m.Action == approval.ActionDeny); err != nil {
			return approval.Decision{}, err
		}
	}
	switch m.Action {
	case approval.ActionDeny:
		p.rule = m.Rule
		return approval.Decision{Verdict: approval.Deny, Message: m.Rule.DenyMessage(), Code: wire.CodeDeniedByPolicy, By: fmt.Sprintf("policy line %d", m.Rule.Line)}, nil
	case approval.ActionAllow:
		if req.ForwardAgent {
			// Lending the operator's SSH agent is the operator's call:
			// such a request is always put to a person.
			log.Info("allowed by policy, but forward_agent asks a person", "line", m.Rule.Line)
			break
		}
		p.rule = m.Rule
		return approval.Decision{Verdict: approval.Allow, By: fmt.Sprintf("policy line %d", m.Rule.Line)}, nil
	}
	// One requester must not flood the people who approve.
	end, err := s.limit.begin(p.peer.UID, s.cfg.Now())
	if err != nil {
		log.Warn("prompt refused", "err", err)
		return approval.Decision{}, err
	}
	defer end()
	if err := receive(false); err != nil {
		return approval.Decision{}, err
	}
	prompt := &approval.Prompt{
		ID:      req.ID,
		Host:    req.Host,
		Session: req.Session,
		Version: req.Version,
		Time:    req.Time,
		Reason:  req.Reason,
		Requester: approval.Requester{
			UID: p.peer.UID, GID: p.peer.GID, PID: p.peer.PID,
			User: userName, Exe: p.peer.Exe,
		},
		Stages:       p.stages,
		Privileged:   req.Privileged,
		RunAs:        p.account.Name,
		Cwd:          p.cwd,
		Env:          req.Env,
		Stdin:        req.Stdin,
		ForwardAgent: req.ForwardAgent,
		RunTimeout:   p.cmd.Timeout,
	}
	// Every approver client must be able to read the prompt: refuse
	// plainly, rather than send a line they would have to skip.
	if _, err := approval.PromptLine(prompt, time.Now()); err != nil {
		log.Warn("prompt refused", "err", err)
		return approval.Decision{}, err
	}
	log.Info("asking for approval")
	d := s.cfg.Approver.Approve(ctx, prompt)
	return d, nil
}

// userNameOf names uid, or gives its number when it has no passwd entry.
func userNameOf(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}
