package wire

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The protocol's fixed error texts (docs/protocol.md). They are part of the
// contract: clients and tests match them verbatim.
var (
	// ErrTooLarge: the request line is longer than MaxLine.
	ErrTooLarge = coded(CodeTooLarge, "request exceeds maximum size (1048576 bytes)")
	// ErrNoNewline: the peer closed after sending bytes but no newline.
	ErrNoNewline = coded(CodeInvalidRequest, "request missing trailing newline")
	// ErrReadTimeout: the request line did not arrive within ReadTimeout.
	ErrReadTimeout = coded(CodeReadTimeout, "request not received within 10s")
	// ErrAgentNeedsUnprivileged: forward_agent without "privileged": false.
	ErrAgentNeedsUnprivileged = coded(CodeInvalidRequest, `forward_agent requires "privileged": false`)
	// ErrTimeMissing: the request has no time field.
	ErrTimeMissing = coded(CodeInvalidRequest, `missing field "time"`)
	// ErrPipelineMissing: an exec request has no pipeline field.
	ErrPipelineMissing = coded(CodeInvalidRequest, `missing field "pipeline"`)
	// ErrNotUTF8: the request line is not valid UTF-8.
	ErrNotUTF8 = coded(CodeInvalidJSON, "invalid JSON: request is not valid UTF-8")
	// ErrServerBusy: too many connections are in flight.
	ErrServerBusy = coded(CodeBusy, "server busy")
	// ErrLacking: the daemon is out of file descriptors or memory (its
	// own lack, never the request's fault).
	ErrLacking = coded(CodeBusy, "server busy: out of file descriptors or memory")
	// ErrStopping: the daemon is shutting down.
	ErrStopping = coded(CodeStopping, "daemon stopping")
	// ErrKilledStopping: the daemon stopped while the run was going; the
	// response carries what the run wrote before it was killed.
	ErrKilledStopping = coded(CodeKilledStopping, "daemon stopping: the command had started and was killed; the stages and output so far are in this response")
)

// ReadTimeout bounds how long a peer may take to send its request line.
const ReadTimeout = 10 * time.Second

// charError reports a displayed string holding a forbidden character.
func charError(field string) error {
	return coded(CodeInvalidRequest, field+" contains a control or bidi character")
}

// EnvNotAllowedError reports an env key the daemon's allowlist refuses.
func envNotAllowed(key string) error {
	if key == "SSH_AUTH_SOCK" {
		return coded(CodeEnvNotAllowed, "SSH_AUTH_SOCK cannot be set; use forward_agent")
	}
	return coded(CodeEnvNotAllowed, fmt.Sprintf("env key %q is not allowed", key))
}

// DuplicateError reports a request seen before within the replay window.
func DuplicateError(id string) error {
	return coded(CodeReplay, fmt.Sprintf("duplicate request id %q", id))
}

// NotFoundError reports a stage whose executable could not be resolved;
// stage is 1-based as in the protocol's example.
func NotFoundError(stage int, name string) error {
	return coded(CodeNotFound, fmt.Sprintf("stage %d: executable not found: %q", stage, name))
}

// NotFoundLeftOutError: stage's executable name is not found in the
// search path of a privileged run, but dir, left out of that path for
// why, holds it.
func NotFoundLeftOutError(stage int, name, dir, why string) error {
	return coded(CodeNotFound, fmt.Sprintf("stage %d: executable not found: %q: %s has it, but is left out of the search path of privileged runs: %s", stage, name, dir, why))
}

// secondsUp is how many seconds lie from a to b (a before b), rounded up.
// Unlike b.Sub(a), it cannot overflow: every time.Time's Unix seconds fit
// an int64 with room to spare.
func secondsUp(a, b time.Time) int64 {
	s := b.Unix() - a.Unix()
	if b.Nanosecond() > a.Nanosecond() {
		s++
	}
	return s
}

func tooOld(ageSec int64, max time.Duration) error {
	return coded(CodeStaleTime, fmt.Sprintf("request too old: %ds (max %ds)", ageSec, maxSeconds(max)))
}

func tooNew(aheadSec int64, max time.Duration) error {
	return coded(CodeStaleTime, fmt.Sprintf("request time is in the future: %ds ahead (max %ds)", aheadSec, maxSeconds(max)))
}

// maxSeconds renders the allowed skew as whole seconds, rounded up.
func maxSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}

// TooManyPendingError refuses a request when uid already has max requests
// waiting for a person's decision.
func TooManyPendingError(uid, max int) error {
	return coded(CodeRateLimit, fmt.Sprintf("too many requests from uid %d waiting for approval (max %d)", uid, max))
}

// ReplayFullError refuses a request from uid when max of its requests
// are already in the replay window, which is window long.
func ReplayFullError(uid, max int, window time.Duration) error {
	return coded(CodeRateLimit, fmt.Sprintf("too many requests from uid %d: at most %d within %s", uid, max, window))
}

// TooManyConnsError refuses a connection when uid already has max
// connections in flight.
func TooManyConnsError(uid, max int) error {
	return coded(CodeBusy, fmt.Sprintf("server busy: too many connections from uid %d in flight (max %d)", uid, max))
}

// CapturedBusyError refuses a request of uid whose files the daemon would
// capture (the content a person approves) while the captures held for
// requests not yet run take all of total bytes, or share of them for uid.
func CapturedBusyError(uid int, total, share int64) error {
	return coded(CodeBusy, fmt.Sprintf("server busy: the files captured for requests not yet run take all of the %d MiB kept for them (%d MiB for uid %d); try again once they are decided", total>>20, share>>20, uid))
}

// AuditBudgetError refuses a request of uid, whose requests added limit
// bytes to the audit log within the hour that ends at renews: its
// requests that may run or reach a person are refused until then.
func AuditBudgetError(uid int, limit int64, renews time.Time) error {
	// Rounded up: a client that waits until the time said is served.
	at := renews.UTC().Add(time.Second - 1).Truncate(time.Second).Format(time.RFC3339)
	return coded(CodeBusy, fmt.Sprintf("server busy: the requests of uid %d added their hourly budget of %d bytes to the audit log; more are refused until %s", uid, limit, at))
}

// ReadTimeoutError answers a connection whose request line did not arrive
// within d of connecting: ErrReadTimeout for the default ReadTimeout.
func ReadTimeoutError(d time.Duration) error {
	if d == ReadTimeout {
		return ErrReadTimeout
	}
	return coded(CodeReadTimeout, fmt.Sprintf("request not received within %s", d))
}

// FirstByteError answers a connection that sent nothing within d of
// connecting.
func FirstByteError(d time.Duration) error {
	return coded(CodeReadTimeout, fmt.Sprintf("request not started within %s", d))
}

// PromptRateError refuses a request when uid has already put perMinute
// requests to a person within the last minute.
func PromptRateError(uid, perMinute int) error {
	return coded(CodeRateLimit, fmt.Sprintf("too many requests from uid %d: at most %d a minute may ask for approval", uid, perMinute))
}

// The daemon's own texts (docs/protocol.md).
var (
	// ErrInternal answers a request a fault in the daemon abandoned.
	ErrInternal = coded(CodeInternal, "internal error")
	// ErrPeerCredentials: the daemon cannot tell who connected.
	ErrPeerCredentials = coded(CodeInternal, "cannot read peer credentials")
	// ErrReplayRecord: the replay window cannot record the request.
	ErrReplayRecord = coded(CodeInternal, "cannot record request id")
	// ErrAudit: the audit record cannot be written, so nothing runs.
	ErrAudit = coded(CodeAudit, "cannot write the audit record; not running")
	// ErrAuditFull: the audit log's file system is nearly full.
	ErrAuditFull = coded(CodeAudit, "the audit log's file system is nearly full; not running")
	// ErrNoAgent: forward_agent was approved with no agent to forward.
	ErrNoAgent = coded(CodeNoAgent, "no SSH agent to forward: start the approver with --forward-agent")
)

// NoUserError: the uid the request is to run as has no account.
func NoUserError(uid int) error {
	return coded(CodeNoUser, fmt.Sprintf("cannot run as uid %d: no such user", uid))
}

// RunAsError: the account or group a request names (run_as, "#UID" as
// the number; run_as_group, "#GID" likewise) does not exist. what is
// "user" or "group".
func RunAsError(what, name string) error {
	if id, ok := strings.CutPrefix(name, "#"); ok {
		kind := "uid"
		if what == "group" {
			kind = "gid"
		}
		return coded(CodeNoUser, fmt.Sprintf("cannot run as %s %s: no such %s", kind, id, what))
	}
	return coded(CodeNoUser, fmt.Sprintf("cannot run as %s %q: no such %s", what, name, what))
}

// CwdMissingError: the request's cwd is not an existing directory.
func CwdMissingError(cwd string) error {
	return coded(CodeCwd, fmt.Sprintf("cwd %q is not an existing directory", cwd))
}

// CwdDeniedError: the account the request runs as cannot enter its cwd.
func CwdDeniedError(cwd string) error {
	return coded(CodeCwd, fmt.Sprintf("cwd %q: permission denied", cwd))
}

// RunTimeoutMessage is the message of a run killed at its time limit d.
func RunTimeoutMessage(d time.Duration) string {
	return fmt.Sprintf("run exceeded its time limit of %s", d)
}

// CwdError: the request's cwd cannot be opened for the reason err gives
// (a symlink loop or a /proc magic link).
func CwdError(cwd string, err error) error {
	return &Error{Code: CodeCwd, Msg: fmt.Sprintf("cwd %q: %v", cwd, err), err: err}
}

// ResolveError: stage's executable, found, cannot be resolved or opened
// for the reason err gives; stage is 1-based.
func ResolveError(stage int, err error) error {
	return &Error{Code: CodeResolve, Msg: fmt.Sprintf("stage %d: %v", stage, err), err: err}
}

// PromptTooLargeError: the prompt for the request would be n bytes, over
// an approver's limit of max. No request the daemon accepts comes near
// the limit, so meeting it is a fault in the daemon: its code is
// CodeInternal.
func PromptTooLargeError(n, max int) error {
	return coded(CodeInternal, fmt.Sprintf("the request is too large to show to an approver: its prompt would be %d bytes, over the %d-byte limit", n, max))
}

// AgentError: the approver's SSH agent cannot be reached for the run.
func AgentError(err error) error {
	return &Error{Code: CodeNoAgent, Msg: fmt.Sprintf("cannot forward the SSH agent: %v", err), err: err}
}

// StartError: the approved pipeline could not be started.
func StartError(err error) error {
	return &Error{Code: CodeStart, Msg: fmt.Sprintf("cannot start pipeline: %v", err), err: err}
}

// The answers to a request no one allowed to run (docs/protocol.md,
// check 10).

// ErrNoApprover: there is no one to ask about the request.
var ErrNoApprover = coded(CodeNoApprover, `no approver attached: run "sudo rootgate approve" in a terminal`)

// NoEligibleApproverError: the requester, uid with user name user,
// controls every attached approver. user is shown as given: the caller
// escapes it for a terminal.
func NoEligibleApproverError(uid int, user string) error {
	who := "uid " + strconv.Itoa(uid)
	if user != "" && user != strconv.Itoa(uid) {
		who += " (" + user + ")"
	}
	return coded(CodeNoEligibleApprover, "no eligible approver: the attached approvers can be controlled by "+who+
		`, who sent this request; run the agent under its own account (README: "Secure setup"), or approve with a passkey (README: "Approving your own account's agent with a passkey")`)
}

// NoEligibleApproverRunAsError: the account a request would run as, uid
// with user name user, may approve rootgate requests and controls every
// attached approver (and the requester controls none). user is shown as
// given: the caller escapes it for a terminal.
func NoEligibleApproverRunAsError(uid int, user string) error {
	who := "uid " + strconv.Itoa(uid)
	if user != "" && user != strconv.Itoa(uid) {
		who += " (" + user + ")"
	}
	return coded(CodeNoEligibleApprover, "no eligible approver: the attached approvers can be controlled by "+who+
		RunAsControlsApprovers+": a run as it could answer their prompts, so it is put only to an approver it cannot control")
}

// RunAsControlsApprovers is the words that tell a
// [NoEligibleApproverRunAsError] from a [NoEligibleApproverError] (both
// have the code CodeNoEligibleApprover): the account the request runs
// as, not its requester, controls the approvers.
const RunAsControlsApprovers = ", whom this request would run as"

// ApproversLeftError: every approver asked went away, or could not ask,
// before deciding; why, unless "", is the last one's reason.
func ApproversLeftError(why string) error {
	msg := "every approver left before deciding"
	if why != "" {
		msg += " (" + why + ")"
	}
	return coded(CodeNoApprover, msg)
}

// Why an approver could not decide: the reason [ApproversLeftError] gives
// when it was the last one asked. name is "USER on WHERE".

// ApproverDisconnected: the attached approver client went away.
func ApproverDisconnected(name string) string { return "approver " + name + " disconnected" }

// ApproverNoGroup: the approver client cannot show a grouped prompt
// (its hello did not offer the "group" capability).
func ApproverNoGroup(name string) string {
	return "approver " + name + " cannot show a prompt for several identical requests; update it"
}

// ApproverUnreachable: the prompt could not be sent to the approver client.
func ApproverUnreachable(name string) string { return "approver " + name + " unreachable" }

// PromptFailed: a prompt of kind ("approval" on a terminal, "desktop")
// on where could not be shown or answered.
func PromptFailed(kind, where string, err error) string {
	return fmt.Sprintf("%s prompt on %s failed: %v", kind, where, err)
}

// DesktopStdinTooLong: a desktop dialog shows only a preview of stdin, so
// a request with more (n bytes) is for a terminal.
func DesktopStdinTooLong(where string, n int) string {
	return fmt.Sprintf("desktop prompt on %s cannot show all of the request's stdin (%d bytes): approve it from a terminal", where, n)
}

// PromptTimeoutError: no one decided within d, shown in seconds ("60s";
// a timeout of a fraction of a second, which only tests set, as Go
// writes it, "300ms").
func PromptTimeoutError(d time.Duration) error {
	within := d.String()
	if d%time.Second == 0 {
		within = fmt.Sprintf("%ds", int64(d/time.Second))
	}
	return coded(CodePromptTimeout, "no approval decision within "+within)
}

// DeniedByPolicyError: the policy rule at source (FILE:LINE), whose text is text,
// denies the request.
func DeniedByPolicyError(source, text string) error {
	return coded(CodeDeniedByPolicy, fmt.Sprintf("denied by policy rule at %s: %s", source, text))
}

// DeniedByOperatorError: operator, asked on where (a terminal's name,
// "desktop"), said no; an operator whose name is not known is "the
// operator".
func DeniedByOperatorError(operator, where string) error {
	if operator == "" {
		return coded(CodeDeniedByOperator, "denied by the operator on "+where)
	}
	return coded(CodeDeniedByOperator, fmt.Sprintf("denied by operator %s on %s", operator, where))
}
