package daemon

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/policy"
	"github.com/rootgate/rootgate/wire"
)

// eventKind names a step of a request's life.
type eventKind string

// The lifecycle events, in the order a request meets them. A run ends in
// exactly one of finished, timed out, cancelled or killed, or in failed
// when it could not start.
const (
	eventReceived  eventKind = eventKind(audit.KindReceived)  // decoded and valid in form
	eventRejected  eventKind = eventKind(audit.KindRejected)  // refused by a check; Err says why
	eventDecided   eventKind = eventKind(audit.KindDecided)   // Decision says by whom
	eventStarted   eventKind = eventKind(audit.KindStarted)   // Plan holds what runs
	eventFinished  eventKind = eventKind(audit.KindFinished)  // the run ended by itself; Result
	eventTimedOut  eventKind = eventKind(audit.KindTimedOut)  // the run passed its limit and was killed; Result
	eventCancelled eventKind = eventKind(audit.KindCancelled) // the requester went away and the run was killed; Result
	eventKilled    eventKind = eventKind(audit.KindKilled)    // the daemon stopped and killed the run; Result
	eventFailed    eventKind = eventKind(audit.KindFailed)    // decided, but ended in an error; Err
	// eventOrphaned: a run a daemon that did not stop cleanly left
	// without an end (its cgroup, killed at start, or a started record
	// with no end in the trail); ID is the request id, Err says the
	// outcome is unknown. It has no peer.
	eventOrphaned eventKind = eventKind(audit.KindOrphaned)
)

// auditEvent is one step of a request's life. Only the fields of its kind are
// set, and Decision from decided on.
type auditEvent struct {
	Kind     eventKind
	ID       string
	Peer     peerInfo
	Request  *wire.Request
	Err      error
	Decision *approval.Decision
	Rule     *policy.Rule // the policy rule that decided, if one did
	Grant    *grant       // the standing grant that decided, if one did
	Plan     *runPlan
	Result   *pipeline.Result
	Duration time.Duration // of the run, with Result
	Line     []byte        // the raw line of a request rejected before it was received
	// Within bounds the wait for the record (stuckAudit); 0 means
	// auditWait.
	Within time.Duration
}

// An AuditLog stores audit records: Append returns once the record (and
// every one before it) is on disk, AppendLater once it is written,
// AppendAsync once it is written with a function that waits for it to be
// on disk (the sync runs meanwhile), and
// CommitWithin makes every record written so far durable within a time,
// without waiting (its error goes to the function given); Free says how
// many bytes its file system has left; Unfinished lists the runs that a
// daemon which is gone started and never recorded the end of (alive says
// whether a daemon named in an opened record is running). It must be
// safe for concurrent use. *audit.Log implements it.
type AuditLog interface {
	Append(*audit.Record) error
	AppendAsync(*audit.Record) (wait func() error, err error)
	AppendLater(*audit.Record) error
	CommitWithin(d time.Duration, failed func(error))
	Free() (int64, error)
	Unfinished(alive func(audit.Daemon) bool) ([]string, error)
}

var _ AuditLog = (*audit.Log)(nil)

// errAudit answers a request whose audit record could not be written.
var errAudit = wire.ErrAudit

// errAuditFull answers a request while the audit log's file system has
// less than Config.AuditMinFree left.
var errAuditFull = wire.ErrAuditFull

// checkFree is the free-space guard: a request is received (and may run)
// only while the audit log's file system has AuditMinFree bytes left, so
// that the records of what runs always fit.
func (s *Server) checkFree() error {
	if s.cfg.Audit == nil || s.cfg.AuditMinFree <= 0 {
		return nil
	}
	free, err := s.cfg.Audit.Free()
	if err != nil {
		s.cfg.Log.Error("cannot check the audit log's free space; not running", "err", err)
		return errAuditFull
	}
	if free < s.cfg.AuditMinFree {
		s.cfg.Log.Error("audit log's file system nearly full; requests refused", "free_bytes", free, "min_free_bytes", s.cfg.AuditMinFree)
		return errAuditFull
	}
	return nil
}

// event records e in the audit log, if any, and logs it (to the journal
// when the daemon logs there) with the request id, the requester, the
// decision and the outcome as fields. It returns the audit log's error;
// see request.recordAsync for what each kind of a request's holds.
func (s *Server) event(e auditEvent) error {
	_, err := s.eventAsync(e, false)
	return err
}

// eventAsync is event, with the sync of a durable record in the
// background when async is set: it returns once the record is written
// (and logged), with the audit log's error if it could not be, and,
// when it could, a function that waits for the record's sync and
// returns the audit log's error (logging a failed sync). With async
// false, it returns once the record is stored as event does, and wait
// returns nil.
func (s *Server) eventAsync(e auditEvent, async bool) (wait func() error, err error) {
	wait = synced
	r := record(e)
	if s.cfg.Audit != nil {
		within := cmp.Or(e.Within, auditWait)
		var commit func() error
		commit, err = s.stuckAudit(within, func() (commit func() error, err error) {
			switch {
			case !durable(e):
				err = s.cfg.Audit.AppendLater(r)
			case async:
				commit, err = s.cfg.Audit.AppendAsync(r)
			default:
				err = s.cfg.Audit.Append(r)
			}
			if err == nil {
				// Charged once written, even past the request's wait
				// (auditbudget.go).
				s.auditBudget.charge(e.Peer.UID, r.Size, e.Kind == eventReceived && e.Line == nil, s.cfg.Now())
			}
			return commit, err
		})
		if commit != nil && err == nil {
			wait = sync.OnceValue(func() error {
				_, err := s.stuckAudit(within, func() (func() error, error) { return nil, commit() })
				if err != nil {
					s.cfg.Log.Error("cannot sync audit record", "event", string(e.Kind), "request_id", e.ID, "err", err)
				}
				return err
			})
		}
		if err != nil {
			s.cfg.Log.Error("cannot write audit record", "event", string(e.Kind), "request_id", e.ID, "err", err)
		}
	}
	attrs := []any{
		"event", string(e.Kind),
		"request_id", e.ID,
	}
	if e.Kind != eventOrphaned {
		attrs = append(attrs, "requester_uid", e.Peer.UID, "requester_pid", e.Peer.PID)
	}
	// Not r.Seq first: after a stuck write, r is the writer's.
	if err == nil && r.Seq > 0 {
		attrs = append(attrs, "audit_seq", r.Seq, "audit_hash", r.Hash)
	}
	if e.Decision != nil {
		d := decision(e.Decision, e.Rule)
		attrs = append(attrs, "decision", d.Verdict, "decided_by", d.By)
	}
	switch e.Kind {
	case eventRejected, eventFailed:
		attrs = append(attrs, "outcome", "error", "error", r.Error)
	case eventOrphaned:
		attrs = append(attrs, "outcome", "unknown", "error", r.Error)
	case eventFinished, eventTimedOut, eventCancelled, eventKilled:
		attrs = append(attrs, "outcome", string(e.Kind), "exit_codes", codesText(e.Result), "duration", e.Duration)
	case eventStarted:
		attrs = append(attrs, "run_as_uid", r.Run.RunAsUID, "executables", stagePaths(r.Run))
	case eventReceived:
		attrs = append(attrs, "requester_exe", e.Peer.Exe)
	}
	level := slog.LevelInfo
	if err != nil {
		level = slog.LevelError
	}
	s.cfg.Log.Log(context.Background(), level, "audit: "+string(e.Kind), attrs...)
	return wait, err
}

// A request waits at most auditWait for each of its records to be written
// (and synced, where it must be): an audit log's file system that stops
// (frozen, a hung disk) must not hold the requester past its client's
// deadline (10 s for the first line, internal/client), nor a ping past
// pingAuditWait. Past it the request is answered as for a record that
// could not be written (errAudit; nothing runs), or a ping pong, while
// the write goes on in the background, at most auditPending of them, past
// which a record is not even tried.
const (
	auditWait     = 4 * time.Second
	pingAuditWait = 500 * time.Millisecond
	auditPending  = 64
)

// errAuditStuck: a record not written within its wait.
var errAuditStuck = errors.New("the audit log was not written in time")

// stuckAudit runs f, an append or a sync, and returns what it does, or
// errAuditStuck once within has passed, f going on alone.
func (s *Server) stuckAudit(within time.Duration, f func() (func() error, error)) (func() error, error) {
	if !s.auditWrites.TryAcquire(1) {
		return nil, errAuditStuck
	}
	type result struct {
		commit func() error
		err    error
	}
	done := make(chan result, 1)
	go func() {
		defer s.auditWrites.Release(1)
		commit, err := f()
		done <- result{commit, err}
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case r := <-done:
		return r.commit, r.err
	case <-t.C:
		return nil, errAuditStuck
	}
}

// synced is the wait of a record with nothing left to wait for.
func synced() error { return nil }

// dropped writes a dropped record (see rejectLimit) and logs it.
func (s *Server) dropped(r *audit.Record) {
	var err error
	if s.cfg.Audit != nil {
		if err = s.cfg.Audit.Append(r); err != nil {
			s.cfg.Log.Error("cannot write audit record", "event", string(r.Kind), "err", err)
		} else {
			s.auditBudget.charge(r.Peer.UID, r.Size, false, s.cfg.Now())
		}
	}
	s.cfg.Log.Warn("audit: rejected records left out past the rate limit", "requester_uid", r.Peer.UID, "dropped", r.Dropped.Count, "since", r.Dropped.Since)
}

// durable reports whether e's record must be on disk before the request
// goes on. Received and allowing decided records are always followed by a
// durable one (started, or the record that ends the request), whose sync
// takes them along; so a run starts only once every record of its request
// is on disk. The record of a run's end is written before the answer is
// sent (before its rest, when the run's stdout began it: answerLine) and
// on disk within auditCommitDelay of it (commitAudit): the next
// run's started record, whose sync takes it along, or one sync shared by
// the requests that ended meanwhile (a group commit). A daemon that stops
// before that sync leaves a trail that ends at started, which the next
// daemon records as orphaned (recoverUnfinished). That is one sync per
// approved run, where there were two, and four before.
func durable(e auditEvent) bool {
	switch e.Kind {
	case eventReceived:
		return e.Request != nil && (e.Request.Action == wire.ActionPing || e.Request.Check)
	case eventDecided:
		return e.Decision == nil || e.Decision.Verdict != approval.Allow
	case eventFinished, eventTimedOut, eventCancelled, eventKilled:
		return false
	}
	return true
}

// auditCommitDelay bounds how long the record of a run's end may wait,
// after the answer, for a sync it can share.
const auditCommitDelay = 10 * time.Millisecond

// commitAudit makes every record written so far durable within
// auditCommitDelay; serveConn calls it once the answer is sent.
func (s *Server) commitAudit() {
	if s.cfg.Audit == nil {
		return
	}
	s.cfg.Audit.CommitWithin(auditCommitDelay, func(err error) {
		s.cfg.Log.Error("cannot sync the audit log", "err", err)
	})
}

// recoverUnfinished records as orphaned each run a daemon that is gone
// started and never recorded the end of, in the audit log's trail: it
// stopped before that record was written or synced. It alone writes
// orphaned records, one per such run: killed holds the names (without
// "~N") of the runs' cgroups recoverOrphans killed, and swept the
// cgroup.RunName of the ids of the runs whose processes recoverLeftovers
// looked for, which only says so in the record's error. A cgroup whose run's end is in the trail (the
// daemon stopped before removing it), or whose run never started (a
// cgroup is made after its run's started record is written, and a run
// that failed to start has a failed record after it), is no orphaned
// run.
func (s *Server) recoverUnfinished(killed, swept map[string]bool) {
	if s.cfg.Audit == nil {
		return
	}
	ids, err := s.cfg.Audit.Unfinished(audit.Running)
	if err != nil {
		s.cfg.Log.Error("cannot read the audit log for runs left unfinished", "err", err)
		return
	}
	for _, id := range ids {
		why := errUnfinished
		switch {
		case killed[cgroup.RunName(id)]:
			why = errOrphaned
		case swept[cgroup.RunName(id)]:
			why = errSwept
		}
		s.event(auditEvent{Kind: eventOrphaned, ID: id, Err: why})
	}
}

// errUnfinished is the error of an orphaned record whose run had no
// cgroup left.
var errUnfinished = errors.New("run started by a daemon that stopped before the run's end was recorded on disk; how it ended is unknown")

// errOrphaned is the error of an orphaned record whose run's cgroup
// recoverOrphans killed.
var errOrphaned = errors.New("run started by a daemon that stopped before the run's end was recorded on disk; everything left of it was killed when this daemon started; how it ended is unknown")

// errSwept is the error of an orphaned record whose run, without a
// cgroup, recoverLeftovers looked for.
var errSwept = errors.New("run started by a daemon that stopped before the run's end was recorded on disk; its processes that could be found (by its environment tag, its stages' process groups and sessions) were killed when this daemon started; how it ended is unknown")

// endKind is the event that ends a run with res, given the request's
// context (a cancelled run was cancelled by its requester going away, or
// killed by the daemon stopping).
func endKind(ctx context.Context, res *pipeline.Result) eventKind {
	switch {
	case res.TimedOut:
		return eventTimedOut
	case res.Canceled && endCause(ctx) == errClientGone:
		return eventCancelled
	case res.Canceled:
		return eventKilled
	}
	return eventFinished
}

// record makes e's audit record.
func record(e auditEvent) *audit.Record {
	r := &audit.Record{Kind: audit.Kind(e.Kind), ID: e.ID}
	if e.Err != nil {
		r.Error = e.Err.Error()
		if e.Kind == eventRejected {
			r.Error = clip(r.Error, maxRecordedError)
		}
	}
	if e.Line != nil {
		r.Line = &audit.Line{Bytes: len(e.Line), SHA256: audit.SHA256(e.Line)}
	}
	if e.Decision != nil && e.Kind == eventDecided {
		r.Decision = decision(e.Decision, e.Rule)
		if g := e.Grant; g != nil {
			uid := g.approverUID
			r.Decision.Grant, r.Decision.ApproverUID, r.Decision.Approver = g.id, &uid, g.approver
		}
	}
	switch e.Kind {
	case eventReceived, eventRejected:
		p := e.Peer
		r.Peer = &audit.Peer{UID: p.UID, GID: p.GID, PID: p.PID, Groups: p.Groups, Exe: p.Exe, ExeOwnNamespace: p.ExeOwnNS && p.Exe != ""}
		if e.Request != nil {
			r.Request = requestRecord(e.Request)
			if p.UID != 0 {
				// Bounded (auditbudget.go): root's are kept whole.
				q := r.Request
				q.Pipeline, q.Reason = excerptPipeline(q.Pipeline), excerpt(q.Reason, maxRecordedReason)
				q.Env, q.EnvSHA256 = excerptEnv(q.Env, q.EnvSHA256)
			}
			if e.Kind == eventReceived && e.Line != nil {
				// Compact (maxRecordedLine): only the short fields.
				q := r.Request
				q.Pipeline, q.Env, q.EnvSHA256, q.Reason, q.Cwd, q.Host, q.Session = nil, nil, nil, "", "", "", ""
			}
		}
	case eventStarted:
		r.Run = run(e.Plan)
	case eventFinished, eventTimedOut, eventCancelled, eventKilled:
		r.Result = result(e.Result, e.Duration)
	}
	return r
}

func requestRecord(q *wire.Request) *audit.Request {
	r := &audit.Request{
		LineSHA256:   hex.EncodeToString(q.LineSHA256[:]),
		IDGiven:      q.IDGiven,
		Action:       q.Action,
		Host:         q.Host,
		Session:      q.Session,
		Time:         q.TimeText,
		Reason:       q.Reason,
		Pipeline:     q.Pipeline,
		Privileged:   q.Privileged,
		ForwardAgent: q.ForwardAgent,
		Cwd:          q.Cwd,
		StdinBytes:   len(q.Stdin),
		Version:      q.Version,
		Check:        q.Check,
		RunAs:        q.RunAs,
		RunAsGroup:   q.RunAsGroup,
	}
	r.Env, r.EnvSHA256 = audit.SplitEnv(q.Env)
	if q.Stdin != nil {
		r.StdinSHA256 = audit.SHA256(q.Stdin)
	}
	if q.Timeout > 0 {
		r.Timeout = q.Timeout.String()
	}
	return r
}

func decision(d *approval.Decision, rule *policy.Rule) *audit.Decision {
	r := &audit.Decision{Verdict: d.Verdict.String(), By: d.By, Message: d.Message, Group: d.Group, GroupOf: d.GroupOf}
	if rule != nil {
		r.PolicyFile, r.PolicyLine, r.PolicyRule = rule.File, rule.Line, rule.Text
	}
	if pk := d.Passkey; pk != nil {
		r.Passkey = passkeyRecord(pk)
	}
	if m := d.Member; m != nil {
		uid := m.UID
		r.ApproverUID, r.Approver = &uid, m.Name
		r.UnsafeSelfApproval = d.SelfApproval
	}
	return r
}

// passkeyRecord is a passkey assertion as the audit log keeps it.
func passkeyRecord(pk *approval.PasskeyProof) *audit.Passkey {
	return &audit.Passkey{Credential: pk.Credential, Name: pk.Name, RequestHash: pk.Hash, Nonce: pk.Nonce, Grant: pk.Grant,
		GrantRunsAnything: pk.GrantRunsAnything, AuthenticatorData: pk.AuthenticatorData, ClientData: pk.ClientData,
		Signature: pk.Signature, UserHandle: pk.UserHandle}
}

// passkeysChanged records a change of the enrolled passkeys.
func (s *Server) passkeysChanged(ch remote.PasskeyChange) {
	s.cfg.Log.Warn("passkeys changed", "change", ch.Kind, "ids", ch.IDs, "name", ch.Name, "confirmed_by", ch.ConfirmedBy,
		"console_confirmed", ch.ConsoleConfirmed, "fingerprint", ch.Fingerprint)
	if s.cfg.Audit == nil {
		return
	}
	r := &audit.PasskeyChange{Change: ch.Kind, IDs: ch.IDs, Name: ch.Name, ConfirmedBy: ch.ConfirmedBy, ConsoleConfirmed: ch.ConsoleConfirmed,
		Controllers: ch.Controllers, Creation: ch.Creation, Origin: ch.Origin, Fingerprint: ch.Fingerprint, AAGUID: ch.AAGUID}
	if len(ch.PublicKey) > 0 {
		r.PublicKey = base64.RawURLEncoding.EncodeToString(ch.PublicKey)
	}
	if ch.Proof != nil {
		r.Proof = passkeyRecord(ch.Proof)
	}
	if err := s.cfg.Audit.Append(&audit.Record{Kind: audit.KindPasskey, Passkeys: r}); err != nil {
		s.cfg.Log.Error("cannot write audit record", "event", string(audit.KindPasskey), "err", err)
	}
}

func run(p *runPlan) *audit.Run {
	r := &audit.Run{
		RunAsUID:  p.account.UID,
		RunAsGID:  p.account.GID,
		RunAsUser: p.account.Name,
		Groups:    p.account.Groups,
		Stages:    make([]audit.Stage, len(p.stages)),
		Cwd:       p.cmd.Dir,
		Timeout:   p.cmd.Timeout.String(),
		Agent:     p.req.ForwardAgent,
		DaemonPID: os.Getpid(),
	}
	for i, st := range p.stages {
		r.Stages[i] = audit.Stage{Path: st.Path, Target: st.Target}
		if st.Content != nil {
			r.Stages[i].SHA256 = st.Content.SHA256
		}
	}
	return r
}

func result(res *pipeline.Result, d time.Duration) *audit.Result {
	r := &audit.Result{
		Duration:        d.String(),
		Stages:          make([]audit.StageResult, len(res.Stages)),
		StdoutBytes:     res.Stdout.Total,
		StdoutTruncated: res.Stdout.Truncated,
		StdoutSHA256:    captureSHA256(&res.Stdout),
	}
	r.Usage = (*audit.Usage)(usageOf(res.Usage))
	for i, st := range res.Stages {
		r.Stages[i] = audit.StageResult{
			ExitCode:        st.ExitCode,
			Signal:          st.Signal,
			Duration:        st.Duration.String(),
			StderrBytes:     st.Stderr.Total,
			StderrTruncated: st.Stderr.Truncated,
			StderrSHA256:    captureSHA256(&st.Stderr),
		}
	}
	return r
}

// captureSHA256 is the hex SHA-256 of a captured stream's kept bytes:
// for a stdout that went into the answer as it came, as the pipeline
// hashed them then; else hashed chunk by chunk as the capture holds them
// (a short stream, in one chunk, without allocating a hash).
func captureSHA256(c *pipeline.Capture) string {
	if c.SHA256 != nil {
		return hex.EncodeToString(c.SHA256)
	}
	if chunks := c.Chunks(); len(chunks) <= 1 {
		var b []byte
		if len(chunks) == 1 {
			b = chunks[0]
		}
		return audit.SHA256(b)
	}
	h := sha256.New()
	_, _ = c.WriteTo(h) // a hash.Hash never fails to write
	return hex.EncodeToString(h.Sum(nil))
}

func codesText(res *pipeline.Result) string {
	if res == nil {
		return ""
	}
	parts := make([]string, len(res.Stages))
	for i, st := range res.Stages {
		parts[i] = strconv.Itoa(st.ExitCode)
		if st.Signal != "" {
			parts[i] += "(" + st.Signal + ")"
		}
	}
	return strings.Join(parts, " ")
}

func stagePaths(r *audit.Run) string {
	parts := make([]string, len(r.Stages))
	for i, st := range r.Stages {
		parts[i] = st.Path
	}
	return strings.Join(parts, " | ")
}

// maxRecordedLine is how long the request line of a request nothing runs
// for (a ping, a check, a policy denial) may be for its received record to
// hold the request's fields; past it, the record keeps the line's size and
// SHA-256 and only the short fields, so such requests, which no person
// reads first, cannot fill the log with long arguments, env or reasons.
const maxRecordedLine = 4096
