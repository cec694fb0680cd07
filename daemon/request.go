package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/wire"
)

func errorResponse(id string, err error) *wire.Response {
	return wire.ErrorResponse(id, err)
}

// runOutput is where a run's output goes (answerLine): stdout into the
// answer line, for request id, or, for a request that said "stream",
// every byte of stdout and of each stage's stderr as frames.
type runOutput interface {
	stdout(id string) io.Writer
	output(ctx context.Context, until time.Time) (stdout io.Writer, stderr func(int) io.Writer)
}

// handle takes a request line through checks 3 to 11. It calls
// eofWithdraws once the request is decoded and asks for it, and progress
// when a request that asked for progress lines is to be decided, is put
// to a person, or starts to run, with the longest it may still take. A
// run's stdout goes to the writer out.stdout returns for the request's id,
// as it is read: the answer's beginning, or, streamed, frames (out). It
// returns nil when a request ended before its run with no one left to
// answer; a run's answer is returned even then (the caller sends it
// only to a client still there, and frees its output afterwards). What
// it passes to later is done by the caller after the answer.
func (s *Server) handle(ctx context.Context, peer peerInfo, line []byte, eofWithdraws func(), progress func(id, phase string, within time.Duration), later func(func()), out runOutput, log *slog.Logger) *wire.Response {
	now := s.cfg.Now()
	// The request is decided against the policy in force now, whatever
	// a reload does while it is checked or waits for a person.
	pol := s.policy.Load()
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
	// For a request nothing will run for (a ping, a check, a policy
	// denial) whose line passes maxRecordedLine bytes, the record keeps
	// the line's size and SHA-256 instead of its long fields.
	receive := func(runsNothing bool) error {
		if err := s.checkFree(); err != nil {
			return err
		}
		received = true
		e := auditEvent{Kind: eventReceived, ID: req.ID, Peer: peer, Request: req}
		// A uid past its hourly budget of full records gets compact
		// ones too (auditbudget.go).
		if runsNothing && len(line) > maxRecordedLine || !s.auditBudget.take(peer.UID, min(len(line), maxRecordedPipeline+maxRecordedReason), now) {
			e.Line = line
		}
		if err := s.event(e); err != nil {
			return errAudit
		}
		return nil
	}
	if err := req.CheckTime(now, s.cfg.MaxSkew); err != nil {
		resp := reject(err)
		if wire.CodeOf(err) == wire.CodeStaleTime {
			resp.DaemonTime = now.UTC().Format(time.RFC3339)
		}
		return resp
	}
	if err := s.cfg.EnvAllow.Check(req.Env); err != nil {
		return reject(err)
	}
	keys := []string{req.ReplayKey()}
	if !req.IDGiven {
		// Its id is in progress lines and answers: no other request may
		// take it within the window, nor while this one runs (see
		// TestMadeUpIDTaken, TestMadeUpIDRemembered).
		keys = append(keys, "id:"+req.ID)
	}
	fresh, err := s.replay.Add(keys, peer.UID, now)
	if wire.CodeOf(err) == wire.CodeRateLimit {
		return reject(err)
	}
	if err != nil {
		log.Error("replay window", "err", err)
		return reject(wire.ErrReplayRecord)
	}
	if !fresh {
		return reject(wire.DuplicateError(req.ID))
	}
	defer s.replay.Done(keys...)
	if req.Action == wire.ActionPing {
		// A ping runs nothing and asks no one: its record shares the
		// per-uid budget of refused requests, so pings cannot flood the log.
		if !s.reject.allow(peer.UID, now) {
			return s.pong(req.ID, peer)
		}
		// Its record is waited for briefly: a ping says whether the
		// daemon answers, which it does while its audit log's file
		// system is stopped (frozen), writing the record once it can.
		if err := s.checkFree(); err != nil {
			return reject(err)
		}
		received = true
		e := auditEvent{Kind: eventReceived, ID: req.ID, Peer: peer, Request: req, Within: pingAuditWait}
		if len(line) > maxRecordedLine {
			e.Line = line
		}
		if err := s.event(e); err != nil && !errors.Is(err, errAuditStuck) {
			return errorResponse(req.ID, errAudit)
		}
		return s.pong(req.ID, peer)
	}

	// Past the descriptors it may hold, a request is answered busy
	// before it opens any (lacking.go).
	fds := requestFDs(len(req.Pipeline))
	if !s.fds.TryAcquire(fds) {
		return reject(wire.ErrLacking)
	}
	defer s.fds.Release(fds)
	plan, err := s.plan(req, peer)
	if err != nil {
		return reject(honest(err))
	}
	defer plan.close()
	plan.policy = pol
	if req.Check {
		// Like a ping, a check runs nothing and asks no one.
		if !s.reject.allow(peer.UID, now) {
			return s.check(plan)
		}
		switch err := receive(true); {
		case errors.Is(err, errAuditFull):
			return reject(err)
		case err != nil:
			return errorResponse(req.ID, err)
		}
		return s.check(plan)
	}
	plan.progress = func(phase string) {
		if !req.Progress {
			return
		}
		// The longest the rest may take, as far as this daemon knows:
		// the prompt (a policy decision is quicker), then the run and
		// its kill grace. Waiting for a run slot is not known ahead.
		within := plan.cmd.Timeout + s.cfg.KillGrace
		if phase != wire.ProgressRunning {
			within += s.cfg.PromptTimeout
		}
		progress(req.ID, phase, within)
	}
	// The client hears at once that the daemon is deciding its request.
	plan.progress(wire.ProgressReceived)

	d, err := s.decide(ctx, plan, log, receive)
	switch {
	case errors.Is(err, errAudit):
		return errorResponse(req.ID, errAudit)
	case errors.Is(err, errAuditFull):
		return reject(err)
	case err != nil:
		return reject(err)
	}
	if d.Code == wire.CodeNoApprover && ctx.Err() != nil && endCause(ctx) != errClientGone {
		// The approvers left because the daemon, stopping, closed their
		// connections: the daemon ended the wait, not their absence.
		d = approval.Decision{Verdict: approval.Withdrawn}
	}
	if d.Verdict == approval.Withdrawn && endCause(ctx) != errClientGone {
		// The daemon ended the wait, not the requester (who is told
		// "daemon stopping"): the record must say so.
		d.By, d.Message = endedByDaemon, wire.ErrStopping.Error()
	}
	by := s.decider(&d, plan.rule)

	if plan.grant != nil {
		by = grantDecider(plan.grant)
	}
	if plan.unrecorded {
		return &wire.Response{ID: req.ID, Status: wire.StatusDenied, Code: denialCode(d), Message: d.Message, DecidedBy: by}
	}
	if s.event(auditEvent{Kind: eventDecided, ID: req.ID, Peer: peer, Decision: &d, Rule: plan.rule, Grant: plan.grant}) != nil {
		return errorResponse(req.ID, errAudit)
	}
	s.noteDecision(plan, userNameOf(peer.UID), &d)
	// A grant asked for on a group's prompt is made once, by the request
	// that was shown.
	if plan.prompt != nil && d.Grant > 0 && d.GroupOf == "" {
		s.addGrant(plan, plan.prompt, &d, s.cfg.Now())
	}
	if plan.prompt != nil && d.Rule != "" && d.Verdict == approval.Allow && d.Member != nil {
		if saved := s.saveRule(plan, &d); saved != nil && by != nil {
			// The person decided; the rule they saved decides the next.
			by.Rule, by.Source = saved.Text, fmt.Sprintf("%s:%d", saved.File, saved.Line)
		}
	}
	// fail ends a decided request in an error, recorded as failed.
	fail := func(msg error) *wire.Response {
		s.event(auditEvent{Kind: eventFailed, ID: req.ID, Peer: peer, Decision: &d, Err: msg})
		resp := errorResponse(req.ID, msg)
		resp.DecidedBy = by
		return resp
	}
	switch d.Verdict {
	case approval.Allow:
	case approval.Deny, approval.Unavailable:
		return &wire.Response{ID: req.ID, Status: wire.StatusDenied, Code: denialCode(d), Message: d.Message, DecidedBy: by}
	case approval.Expired:
		return &wire.Response{ID: req.ID, Status: wire.StatusTimeout, Code: wire.CodePromptTimeout, Message: d.Message}
	default: // withdrawn: the client left or the daemon is stopping
		return s.gone(ctx, req.ID)
	}

	// What the run may keep for its answer is taken first, and held
	// until the answer is written (kept.go): past the budget, approved
	// requests wait for the answers before them to be written.
	var keep *kept
	if k, err := s.kept.acquire(ctx, peer.UID, keepFor(req)); err == nil {
		keep = k
		later(k.release)
	}
	// Past MaxRuns, approved requests wait for a slot in the order they
	// came to wait; a uid other than root holds at most half of them, its
	// further runs waiting for its own to end.
	if release, err := s.runShares.acquire(ctx, peer.UID); err == nil {
		defer release()
	}
	if err := s.runs.Acquire(ctx, 1); err == nil {
		defer s.runs.Release(1)
	}
	// A requester gone by now (even as the slot came free) is not run for.
	if ctx.Err() != nil {
		s.event(auditEvent{Kind: eventFailed, ID: req.ID, Peer: peer, Decision: &d, Err: fmt.Errorf("not started: %w", endCause(ctx))})
		return s.gone(ctx, req.ID)
	}
	setSudoEnv(plan)
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
	if plan.rule != nil && plan.grant == nil {
		// Each stage's rule limits the whole run: a first stage allowed
		// without limits does not lift a later one's.
		plan.lim = stricter(plan.lim, plan.ruleLim)
	}
	// A limit the operator asked for that cannot be enforced here
	// refuses the run: it never runs without it.
	if err := s.cfg.Cgroups.Check(plan.lim); err != nil {
		log.Error("run refused", "err", err)
		return fail(wire.StartError(err))
	}
	// The run starts only once its started record is on disk. The record
	// is written now and synced while the run gets ready (its cgroup, its
	// pipes, its stages' threads); the run's first process is created
	// only once the sync is done (Cmd.Gate). A record written but not
	// synced stays in the file: the failed record after it says the run
	// never started (else the next daemon would take it for a run of
	// unknown outcome).
	synced, err := s.eventAsync(auditEvent{Kind: eventStarted, ID: req.ID, Peer: peer, Decision: &d, Plan: plan}, true)
	if err != nil {
		return fail(errAudit)
	}
	plan.cmd.Gate = func() error {
		if err := synced(); err != nil {
			return err
		}
		plan.progress(wire.ProgressRunning)
		return nil
	}
	if c := s.cfg.Cgroups; c != nil {
		// Its own cgroup, or no run: a run that cannot be contained so
		// is not run the weaker way behind the operator's back.
		cg, err := c.newRun(req.ID, plan.lim)
		if err != nil {
			log.Error("cannot make the run's cgroup", "err", err)
			return fail(wire.StartError(err))
		}
		plan.cmd.Cgroup = cg
		// Removed after the answer: everything in it was killed when the
		// run ended (pipeline.Cmd.Run), and its counters were read.
		later(func() {
			if err := cg.Remove(); err != nil {
				log.Error("run's cgroup left behind", "cgroup", cg.Path, "err", err)
			}
		})
	}
	untrack := func() {}
	if s.cfg.Cgroups == nil {
		// Recorded, so that the next daemon finds what is left of the
		// run should this one die mid-run; the record goes once the run
		// has ended and been swept.
		end, err := s.trackRun(req.ID, plan.cmd)
		if err != nil {
			log.Error("run refused", "err", err)
			return fail(wire.StartError(err))
		}
		untrack = sync.OnceFunc(end)
		defer untrack()
	}
	if req.Stream != 0 {
		// Every byte of the output goes to the client as frames, as the
		// run writes it, and the daemon holds none of it.
		plan.cmd.Cap = pipeline.NoCap
		// A client may hold the output (a pager) as long as the run may
		// last: its time limit, its kill grace, then the stall timeout.
		until := time.Now().Add(plan.cmd.Timeout + cmp.Or(plan.cmd.KillGrace, pipeline.DefaultKillGrace) + s.cfg.StallTimeout)
		plan.cmd.StdoutTo, plan.cmd.StderrTo = out.output(ctx, until)
	} else {
		// The run's stdout goes into the answer as it comes, not into the
		// daemon's memory (docs/performance.md, "Daemon peak RSS").
		plan.cmd.StdoutTo = out.stdout(req.ID)
	}
	began := time.Now()
	res, err := plan.cmd.Run(ctx)
	untrack()
	if err != nil {
		if synced() != nil {
			return fail(errAudit)
		}
		log.Error("run failed to start", "err", err)
		if d.After != nil {
			// The person who approved learns that nothing ran, and
			// why: a file swapped after the approval is news to them.
			d.After.Outcome(req.ID, "not run: "+termsafe.Sanitize(err.Error()))
		}
		if lacking(err) {
			return fail(wire.ErrLacking)
		}
		return fail(wire.StartError(err))
	}
	if res.KillErr != nil {
		log.Error("run's cgroup not emptied", "err", res.KillErr)
	}
	// The run is over: a failure to record its end is logged, but the
	// requester still gets its result.
	s.event(auditEvent{Kind: endKind(ctx, res), ID: req.ID, Peer: peer, Decision: &d, Result: res, Duration: time.Since(began)})
	if d.After != nil {
		d.After.Outcome(req.ID, outcomeLine(res))
	}
	resp := runResponse(req.ID, res)
	resp.DecidedBy = by
	if keep != nil {
		keep.keep(int64(outputLen(resp)))
	}
	if res.Canceled {
		if endCause(ctx) == errClientGone {
			// No one to answer: serveConn sends nothing, but collects
			// the output (collect.go).
			return resp
		}
		// The daemon is stopping: say that the run started and was
		// killed, with what it wrote, so it is not taken for one that
		// never began.
		resp.Status = wire.StatusError
		resp.Code = wire.CodeKilledStopping
		resp.Message = wire.ErrKilledStopping.Error()
		return resp
	}
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

// endedByDaemon is the decided record's by (and the decision's) when the
// daemon, stopping, ended a request that waited for approval.
const endedByDaemon = "daemon stopping"

// gone answers a request whose context ended: "daemon stopping" when the
// daemon is, nothing when the client went away.
func (s *Server) gone(ctx context.Context, id string) *wire.Response {
	if endCause(ctx) == errClientGone {
		return nil
	}
	return errorResponse(id, wire.ErrStopping)
}

// endCause is why a request's context ends, or ended: errClientGone when
// its client went away, else wire.ErrStopping, the daemon stopping (the
// only other end of a request's context, and what a request that ended
// neither way yet is told should the daemon end its wait).
func endCause(ctx context.Context) error {
	if context.Cause(ctx) == errClientGone {
		return errClientGone
	}
	return wire.ErrStopping
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
		StdoutChunks:    res.Stdout.Chunks(),
		StdoutTruncated: res.Stdout.Truncated,
	}
	r.Usage = usageOf(res.Usage)
	for i, st := range res.Stages {
		r.Stages[i] = wire.StageResult{
			ExitCode:        st.ExitCode,
			Signal:          st.Signal,
			StderrChunks:    st.Stderr.Chunks(),
			StderrTruncated: st.Stderr.Truncated,
		}
	}
	return r
}

// usageOf is a run's usage as the answer and the audit record give it;
// nil without a cgroup.
func usageOf(u *pipeline.Usage) *wire.Usage {
	if u == nil {
		return nil
	}
	w := &wire.Usage{CPUUsec: u.CPU.Microseconds(), UserUsec: u.User.Microseconds(), SystemUsec: u.System.Microseconds()}
	if u.MemoryPeak >= 0 {
		peak := u.MemoryPeak
		w.MemoryPeak = &peak
	}
	return w
}
