package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/policy"
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

// A request is one connection's request, from its line to its answer:
// serveConn makes it for the connection, with the peer's identity read
// at accept, and calls serve once the line is read. Its steps are the
// protocol's checks in order (docs/protocol.md): decode, admit, plan,
// decide, run; each returns nil to go on, or an *outcome that ends the
// request there, which finish turns into the request's last record and
// its answer (a run's answer is answer's). The records a request writes
// are all made by recordAsync.
type request struct {
	s    *Server
	peer peerInfo
	// What serveConn gives it once its line is read.
	ctx          context.Context // ends when the client goes away or the daemon stops (endCause)
	line         []byte
	log          *slog.Logger
	eofWithdraws func()         // called once the request asks that its client's end of stream withdraw it
	lines        *progressLines // where its progress lines go
	out          runOutput      // where its run's output goes
	// later is what is to be done once its answer is written and the
	// connection closed (serveConn does it).
	later []func()

	now time.Time // when its line was taken up
	// pol is the policy in force when its line was taken up: the request
	// is decided against it, whatever a reload does while it is checked
	// or waits for a person.
	pol *policy.Policy

	req      *wire.Request // decoded (what of it was, when decode failed)
	received bool          // its received record is written
	unasked  bool          // received as a request nothing runs for and no one is asked about
	p        *runPlan      // planned; not changed after
	v        verdict       // decided
	// cmd is what runs: the plan's, set up for the run (its output, its
	// cgroup, its start gate, the SUDO_* and agent variables).
	cmd pipeline.Cmd
	// by is who decided it, as its answer says, once its decided record
	// is written.
	by    *wire.DecidedBy
	keep  *kept // what its run may keep for the answer, once taken
	began time.Time
	res   *pipeline.Result // its run's result

	// What it holds until serve returns (release).
	keys    []string    // its replay keys, added
	fds     int64       // descriptors of the budget taken
	share   func()      // releases its uid's run share, once taken
	slot    bool        // a run slot is taken
	relay   *agentRelay // the SSH agent relay for its run, once started
	untrack func()      // removes its run's record for the next daemon, once made
}

// An outcome ends a request short of its run's answer: the record it
// leaves and its answer. finish writes both.
type outcome struct {
	// record is the request's last record: eventRejected (refused by
	// a check), eventFailed (decided, and ended in an error), or none:
	// it leaves none beyond those written already, or its records are
	// what could not be written.
	record eventKind
	// err is why: the record's error, and the answer's unless resp is
	// set or gone.
	err error
	// resp is the answer, when it is not err's: a pong, a check's, a
	// denial.
	resp *wire.Response
	// gone: the request's context ended; it is answered "daemon
	// stopping", or not at all when its client went away (gone).
	gone bool
}

func (o *outcome) Error() string {
	if o.err != nil {
		return o.err.Error()
	}
	return "request ended"
}

// rejected ends a request refused by a check with err.
func rejected(err error) error { return &outcome{record: eventRejected, err: err} }

// failed ends a decided request in err, recorded as failed.
func failed(err error) error { return &outcome{record: eventFailed, err: err} }

// unrecorded ends a request in err with no record more: its record could
// not be written.
func unrecorded(err error) error { return &outcome{err: err} }

// answered ends a request with resp, and no record more.
func answered(resp *wire.Response) error { return &outcome{resp: resp} }

// withdrawn ends a request whose context ended before its run.
var withdrawn error = &outcome{gone: true}

// serve takes the request through its steps and returns its answer; nil
// when a request ended before its run with no one left to answer. A
// run's answer is returned even then (serveConn sends it only to a
// client still there, and frees its output afterwards). What it holds is
// released when it returns; what it leaves to later, serveConn does after
// the answer.
func (r *request) serve() *wire.Response {
	defer func() {
		r.release()
		// What it held is garbage once it is answered: serveConn
		// collects a run's big output then (collect.go), and keeps
		// only what is left for later.
		*r = request{later: r.later}
	}()
	r.now = r.s.cfg.Now()
	r.pol = r.s.policy.Load()
	err := r.decode()
	if err == nil {
		err = r.admit()
	}
	if err == nil {
		err = r.plan()
	}
	if err == nil {
		err = r.decide()
	}
	if err == nil {
		err = r.run()
	}
	return r.finish(err)
}

// id is the request's id, as far as its line was decoded.
func (r *request) id() string {
	if r.req == nil {
		return ""
	}
	return r.req.ID
}

// decode is checks 1 to 3: the line decodes as a request.
func (r *request) decode() error {
	req, err := wire.Decode(r.line)
	r.req = req
	if err != nil {
		return rejected(err)
	}
	if req.EOFWithdraws {
		r.eofWithdraws()
	}
	r.log = r.log.With("id", req.ID)
	return nil
}

// admit is checks 4 to 8: the request's time, its environment and its
// replay window (an id not seen before, within its uid's share), then
// its uid's hourly audit budget. A request refused here, and up to its
// received record, leaves one compact rejected record, rate-limited per
// uid: its line's size and SHA-256, never the line (docs/audit.md). A
// ping is answered once past the replay window.
func (r *request) admit() error {
	req, now := r.req, r.now
	if err := req.CheckTime(now, r.s.cfg.MaxSkew); err != nil {
		o := &outcome{record: eventRejected, err: err}
		if wire.CodeOf(err) == wire.CodeStaleTime {
			o.resp = errorResponse(req.ID, err)
			o.resp.DaemonTime = now.UTC().Format(time.RFC3339)
		}
		return o
	}
	if err := r.s.cfg.EnvAllow.Check(req.Env); err != nil {
		return rejected(err)
	}
	keys := []string{req.ReplayKey()}
	if !req.IDGiven {
		// Its id is in progress lines and answers: no other request may
		// take it within the window, nor while this one runs (see
		// TestMadeUpIDTaken, TestMadeUpIDRemembered).
		keys = append(keys, "id:"+req.ID)
	}
	fresh, err := r.s.replay.Add(keys, r.peer.UID, now)
	if wire.CodeOf(err) == wire.CodeRateLimit {
		return rejected(err)
	}
	if err != nil {
		r.log.Error("replay window", "err", err)
		return rejected(wire.ErrReplayRecord)
	}
	if !fresh {
		return rejected(wire.DuplicateError(req.ID))
	}
	r.keys = keys
	if req.Action == wire.ActionPing {
		return r.ping()
	}
	// A uid whose records took its hourly budget is answered busy
	// (auditbudget.go).
	if err := r.s.auditBudget.admit(r.peer.UID, req.Check, now); err != nil {
		return rejected(err)
	}
	return nil
}

// ping answers a ping, which runs nothing and asks no one. Its received
// record is waited for briefly: a ping says whether the daemon answers,
// which it does while its audit log's file system is stopped (frozen),
// writing the record once it can.
func (r *request) ping() error {
	if _, err := r.receiveUnasked(r.now); err != nil {
		return notReceived(err)
	}
	return answered(r.s.pong(r.req.ID, r.peer))
}

// plan is check 9 (Server.plan). Past the descriptors it may hold, a
// request is answered busy before it opens any (lacking.go).
func (r *request) plan() error {
	fds := requestFDs(len(r.req.Pipeline))
	if !r.s.fds.TryAcquire(fds) {
		return rejected(wire.ErrLacking)
	}
	r.fds = fds
	p, err := r.s.plan(r.req, r.peer)
	if err != nil {
		return rejected(honest(err))
	}
	r.p = p
	return nil
}

// decide is check 10 (judge), and what a decision leads to before the
// run: its decided record, the approvers' idle screens told, a grant or
// a rule a person asked for made. A check request is answered here, and
// a request that is not allowed.
func (r *request) decide() error {
	if r.req.Check {
		// Like a ping, a check runs nothing and asks no one.
		if _, err := r.receiveUnasked(r.now); err != nil {
			return notReceived(err)
		}
		return answered(r.s.check(r.p, r.pol))
	}
	// The client hears at once that the daemon is deciding its request.
	r.progress(wire.ProgressReceived)
	v, err := r.judge()
	if err != nil {
		return notReceived(err)
	}
	v.d = r.endedWait(v.d)
	r.v = v
	d := &r.v.d
	by := r.s.decider(d, v.rule)
	if v.grant != nil {
		by = grantDecider(v.grant)
	}
	if v.unrecorded {
		return answered(&wire.Response{ID: r.req.ID, Status: wire.StatusDenied, Code: denialCode(*d), Message: d.Message, DecidedBy: by})
	}
	if r.record(eventDecided, nil) != nil {
		return unrecorded(errAudit)
	}
	r.by = by
	r.s.noteDecision(r.p, userNameOf(r.peer.UID), &r.v)
	r.keepAsked()
	switch d.Verdict {
	case approval.Allow:
		return nil
	case approval.Deny, approval.Unavailable:
		return answered(&wire.Response{ID: r.req.ID, Status: wire.StatusDenied, Code: denialCode(*d), Message: d.Message, DecidedBy: by})
	case approval.Expired:
		return answered(&wire.Response{ID: r.req.ID, Status: wire.StatusTimeout, Code: wire.CodePromptTimeout, Message: d.Message})
	}
	return withdrawn // the client left or the daemon is stopping
}

// endedWait is d, the decision on a wait for approval the request's
// context ended, as the daemon records it: ended by the daemon, stopping,
// unless the client went away.
func (r *request) endedWait(d approval.Decision) approval.Decision {
	stopping := endCause(r.ctx) != errClientGone
	if d.Code == wire.CodeNoApprover && r.ctx.Err() != nil && stopping {
		// The approvers left because the daemon, stopping, closed their
		// connections: the daemon ended the wait, not their absence.
		d = approval.Decision{Verdict: approval.Withdrawn}
	}
	if d.Verdict == approval.Withdrawn && stopping {
		// The daemon ended the wait, not the requester (who is told
		// "daemon stopping"): the record must say so.
		d.By, d.Message = endedByDaemon, wire.ErrStopping.Error()
	}
	return d
}

// keepAsked makes what the person who approved asked for beyond the
// request: a standing grant, or a policy rule, which then names itself
// as the request's decider for the next.
func (r *request) keepAsked() {
	prompt, d := r.v.prompt, &r.v.d
	if prompt == nil {
		return
	}
	// A grant asked for on a group's prompt is made once, by the request
	// that was shown.
	if d.Grant > 0 && d.GroupOf == "" {
		r.s.addGrant(r.p, prompt, d, r.s.cfg.Now())
	}
	if d.Rule != "" && d.Verdict == approval.Allow && d.Member != nil {
		if saved := r.s.saveRule(r.p, prompt, d); saved != nil && r.by != nil {
			// The person decided; the rule they saved decides the next.
			r.by.Rule, r.by.Source = saved.Text, fmt.Sprintf("%s:%d", saved.File, saved.Line)
		}
	}
}

// progress writes a progress line for phase, when the request asked for
// them, saying the longest the rest may take, as far as this daemon
// knows: the prompt (a policy decision is quicker), then the run and its
// kill grace. Waiting for a run slot is not known ahead.
func (r *request) progress(phase string) {
	if !r.req.Progress {
		return
	}
	within := r.p.cmd.Timeout + r.s.cfg.KillGrace
	if phase != wire.ProgressRunning {
		within += r.s.cfg.PromptTimeout
	}
	r.lines.send(r.req.ID, phase, within)
}

// run is check 11: the allowed request runs, once a run slot is free and
// its started record is written.
func (r *request) run() error {
	r.reserve()
	// A requester gone by now (even as the slot came free) is not run for.
	if r.ctx.Err() != nil {
		return &outcome{record: eventFailed, err: fmt.Errorf("not started: %w", endCause(r.ctx)), gone: true}
	}
	r.cmd = *r.p.cmd
	setSudoEnv(&r.cmd, r.p)
	if err := r.forwardAgent(); err != nil {
		return err
	}
	// A limit the operator asked for that cannot be enforced here
	// refuses the run: it never runs without it.
	if err := r.s.cfg.Cgroups.Check(r.limits()); err != nil {
		r.log.Error("run refused", "err", err)
		return failed(wire.StartError(err))
	}
	synced, err := r.started()
	if err != nil {
		return err
	}
	if err := r.contain(); err != nil {
		return err
	}
	r.output()
	r.began = time.Now()
	res, err := r.cmd.Run(r.ctx)
	r.untrack()
	if err != nil {
		return r.notRun(err, synced)
	}
	if res.KillErr != nil {
		r.log.Error("run's cgroup not emptied", "err", res.KillErr)
	}
	r.res = res
	return nil
}

// reserve takes what an approved request needs to run, waiting as long
// as its context lasts. What the run may keep for its answer is taken
// first, and held until the answer is written (kept.go): past the
// budget, approved requests wait for the answers before them to be
// written. Past MaxRuns, approved requests wait for a slot in the order
// they came to wait; a uid other than root holds at most half of them,
// its further runs waiting for its own to end.
func (r *request) reserve() {
	if k, err := r.s.kept.acquire(r.ctx, r.peer.UID, keepFor(r.req)); err == nil {
		r.keep = k
		r.later = append(r.later, k.release)
	}
	if release, err := r.s.runShares.acquire(r.ctx, r.peer.UID); err == nil {
		r.share = release
	}
	if err := r.s.runs.Acquire(r.ctx, 1); err == nil {
		r.slot = true
	}
}

// limits are the run's cgroup's: the daemon's, lowered by the rules that
// allowed the run. Each stage's rule limits the whole run: a first stage
// allowed without limits does not lift a later one's.
func (r *request) limits() cgroup.Limits {
	if r.v.rule != nil && r.v.grant == nil {
		return stricter(r.p.lim, r.v.ruleLim)
	}
	return r.p.lim
}

// forwardAgent lends the run the SSH agent of the person who approved
// it, when the request asks for it.
func (r *request) forwardAgent() error {
	if !r.req.ForwardAgent {
		return nil
	}
	a := r.v.d.Agent
	if a == nil { // allowed by policy, or by an approver without one
		return failed(wire.ErrNoAgent)
	}
	relay, err := startAgentRelay(r.ctx, filepath.Join(r.s.cfg.RuntimeDir, "agent"),
		agentSource{Path: a.Socket, UID: a.UID, GID: a.GID, Groups: a.Groups}, r.p.account)
	if err != nil {
		r.log.Error("agent relay", "err", err)
		return failed(wire.AgentError(err))
	}
	r.relay = relay
	r.cmd.Env = append(slices.Clip(r.cmd.Env), "SSH_AUTH_SOCK="+relay.SocketPath())
	return nil
}

// started writes the started record. The run starts only once it is on
// disk: it is written now and synced while the run gets ready (its
// cgroup, its pipes, its stages' threads); the run's first process is
// created only once the sync is done (Cmd.Gate), which synced waits for.
// A record written but not synced stays in the file: the failed record
// after it says the run never started (else the next daemon would take
// it for a run of unknown outcome).
func (r *request) started() (synced func() error, err error) {
	synced, err = r.recordAsync(eventStarted, nil)
	if err != nil {
		return nil, failed(errAudit)
	}
	r.cmd.Gate = func() error {
		if err := synced(); err != nil {
			return err
		}
		r.progress(wire.ProgressRunning)
		return nil
	}
	return synced, nil
}

// contain gives the run its own cgroup, or, without cgroups, records it
// for the next daemon.
func (r *request) contain() error {
	cmd := &r.cmd
	if c := r.s.cfg.Cgroups; c != nil {
		// Its own cgroup, or no run: a run that cannot be contained so
		// is not run the weaker way behind the operator's back.
		cg, err := c.NewRun(r.req.ID, r.limits())
		if err != nil {
			r.log.Error("cannot make the run's cgroup", "err", err)
			return failed(wire.StartError(err))
		}
		cmd.Cgroup = cg
		// Removed after the answer: everything in it was killed when the
		// run ended (pipeline.Cmd.Run), and its counters were read.
		log := r.log
		r.later = append(r.later, func() {
			if err := cg.Remove(); err != nil {
				log.Error("run's cgroup left behind", "cgroup", cg.Path, "err", err)
			}
		})
		r.untrack = func() {}
		return nil
	}
	// Recorded, so that the next daemon finds what is left of the run
	// should this one die mid-run; the record goes once the run has
	// ended and been swept.
	end, err := r.s.trackRun(r.req.ID, cmd)
	if err != nil {
		r.log.Error("run refused", "err", err)
		return failed(wire.StartError(err))
	}
	r.untrack = sync.OnceFunc(end)
	return nil
}

// output sends the run's output where it goes.
func (r *request) output() {
	cmd := &r.cmd
	if r.req.Stream != 0 {
		// Every byte of the output goes to the client as frames, as the
		// run writes it, and the daemon holds none of it.
		cmd.Cap = pipeline.NoCap
		// A client may hold the output (a pager) as long as the run may
		// last: its time limit, its kill grace, then the stall timeout.
		until := time.Now().Add(cmd.Timeout + cmp.Or(cmd.KillGrace, pipeline.DefaultKillGrace) + r.s.cfg.StallTimeout)
		cmd.StdoutTo, cmd.StderrTo = r.out.output(r.ctx, until)
		return
	}
	// The run's stdout goes into the answer as it comes, not into the
	// daemon's memory (docs/performance.md, "Daemon peak RSS").
	cmd.StdoutTo = r.out.stdout(r.req.ID)
}

// notRun ends a request whose run failed to start with err.
func (r *request) notRun(err error, synced func() error) error {
	if synced() != nil {
		return failed(errAudit)
	}
	r.log.Error("run failed to start", "err", err)
	if r.v.d.After != nil {
		// The person who approved learns that nothing ran, and why: a
		// file swapped after the approval is news to them.
		r.v.d.After.Outcome(r.req.ID, "not run: "+termsafe.Sanitize(err.Error()))
	}
	if lacking(err) {
		return failed(wire.ErrLacking)
	}
	return failed(wire.StartError(err))
}

// release gives back what the request holds, as it took it in reverse.
func (r *request) release() {
	if r.untrack != nil {
		r.untrack()
	}
	if r.relay != nil {
		r.relay.Close()
	}
	if r.slot {
		r.s.runs.Release(1)
	}
	if r.share != nil {
		r.share()
	}
	if r.p != nil {
		r.p.close()
	}
	if r.fds > 0 {
		r.s.fds.Release(r.fds)
	}
	if r.keys != nil {
		r.s.replay.Done(r.keys...)
	}
}

// finish ends the request with the outcome err carries, as a step
// returned it: it writes the record the outcome leaves and returns the
// answer. With no outcome the request ran: its end is recorded, the
// approver who allowed it told, and it is answered with its result.
func (r *request) finish(err error) *wire.Response {
	if err == nil {
		// The run is over: a failure to record its end is logged, but
		// the requester still gets its result.
		r.record(endKind(r.ctx, r.res), nil)
		if r.v.d.After != nil {
			r.v.d.After.Outcome(r.req.ID, outcomeLine(r.res))
		}
		resp := r.answer()
		if r.keep != nil {
			r.keep.keep(int64(outputLen(resp)))
		}
		return resp
	}
	var o *outcome
	if !errors.As(err, &o) {
		o = &outcome{err: err} // a step returns outcomes only
	}
	if o.record != "" {
		r.record(o.record, o.err)
	}
	switch {
	case o.gone:
		return r.s.gone(r.ctx, r.id())
	case o.resp != nil:
		return o.resp
	}
	resp := errorResponse(r.id(), o.err)
	resp.DecidedBy = r.by
	return resp
}

// answer is a run's answer: its result, who decided, and how it ended.
func (r *request) answer() *wire.Response {
	res := r.res
	resp := runResponse(r.req.ID, res)
	resp.DecidedBy = r.by
	switch {
	case res.Canceled && endCause(r.ctx) == errClientGone:
		// No one to answer: serveConn sends nothing, but collects the
		// output (collect.go).
	case res.Canceled:
		// The daemon is stopping: say that the run started and was
		// killed, with what it wrote, so it is not taken for one that
		// never began.
		resp.Status = wire.StatusError
		resp.Code = wire.CodeKilledStopping
		resp.Message = wire.ErrKilledStopping.Error()
	case res.TimedOut:
		resp.Status = wire.StatusTimeout
		resp.Code = wire.CodeRunTimeout
		resp.Message = wire.RunTimeoutMessage(r.p.cmd.Timeout)
	}
	return resp
}

// receive writes the received record, once the request is to be
// decided; nothing runs, and it is not decided, if it cannot be (its
// error then: errAuditFull, or errAudit).
func (r *request) receive() error {
	if err := r.s.checkFree(); err != nil {
		return err
	}
	r.received = true
	if err := r.record(eventReceived, nil); err != nil {
		if r.req.Action == wire.ActionPing && errors.Is(err, errAuditStuck) {
			return nil // written once it can be
		}
		return errAudit
	}
	return nil
}

// receiveUnasked receives a request nothing runs for and no one is asked
// about: a ping, a check, a refusal without a person. Its record shares
// the per-uid budget of refused requests (underRejectBudget), so a flood
// of them cannot fill the log and rotate older records away; past the
// budget the request is left unrecorded, and counted in a dropped
// record. It reports whether the request was received.
func (r *request) receiveUnasked(now time.Time) (bool, error) {
	if !r.underRejectBudget(now) {
		return false, nil
	}
	r.unasked = true
	return true, r.receive()
}

// notReceived ends a request that could not be received with err: the
// audit log's file system nearly full (errAuditFull) or a check after
// the received record (refused, recorded so), or its record not written
// (errAudit).
func notReceived(err error) error {
	if errors.Is(err, errAudit) {
		return unrecorded(errAudit)
	}
	return rejected(err)
}

// underRejectBudget reports whether a record of the request's refusal,
// or of its receipt when nothing runs for it and no one is asked, may be
// written at now: such records share a per-uid budget (rejectLimit).
// Past it they are counted, and one dropped record says how many.
func (r *request) underRejectBudget(now time.Time) bool {
	return r.s.reject.allow(r.peer.UID, now)
}

// record writes the request's record of kind (with err for a rejected
// or failed one) and returns the audit log's error.
func (r *request) record(kind eventKind, err error) error {
	_, err = r.recordAsync(kind, err)
	return err
}

// recordAsync writes the request's record of kind, with err for a
// rejected or failed one: every record of a request is made here, from
// what the request holds by then. A started record is synced in the
// background, wait waiting for the sync (eventAsync). It returns the
// audit log's error.
func (r *request) recordAsync(kind eventKind, err error) (wait func() error, _ error) {
	e := auditEvent{Kind: kind, ID: r.id(), Peer: r.peer, Err: err}
	switch kind {
	case eventRejected:
		if !r.underRejectBudget(r.s.cfg.Now()) {
			return synced, nil // counted in the uid's next dropped record
		}
		if !r.received {
			e.Line = r.line
		}
	case eventReceived:
		e.Request = r.req
		// For a request nothing will run for (a ping, a check, a policy
		// denial) whose line passes maxRecordedLine bytes, the record
		// keeps the line's size and SHA-256 instead of its long fields;
		// so does a uid's past its hourly share of full records
		// (auditbudget.go).
		if r.unasked && len(r.line) > maxRecordedLine || !r.s.auditBudget.full(r.peer.UID, r.now) {
			e.Line = r.line
		}
		if r.req.Action == wire.ActionPing {
			e.Within = pingAuditWait // waited for briefly
		}
	case eventDecided:
		e.Decision, e.Rule, e.Grant = &r.v.d, r.v.rule, r.v.grant
	case eventFailed:
		e.Decision = &r.v.d
	case eventStarted:
		e.Decision, e.Plan = &r.v.d, r.p
	default: // the run's end
		e.Decision, e.Result, e.Duration = &r.v.d, r.res, time.Since(r.began)
	}
	return r.s.eventAsync(e, kind == eventStarted)
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
func usageOf(u *cgroup.Usage) *wire.Usage {
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
