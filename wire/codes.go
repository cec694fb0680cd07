package wire

import "errors"

// The codes of non-ok responses (docs/protocol.md, "Response codes"). A
// client decides by the code, never by the message, whose wording may
// change; a client that meets a code it does not know treats the response
// by its status alone.
const (
	CodeInvalidJSON        = "invalid_json"         // error: the line is not one JSON object of valid UTF-8
	CodeUnknownField       = "unknown_field"        // error: a field this daemon does not know
	CodeInvalidRequest     = "invalid_request"      // error: a field's value or the request's shape is wrong
	CodeTooLarge           = "too_large"            // error: the line exceeds MaxLine
	CodeReadTimeout        = "read_timeout"         // error: the request did not arrive in time
	CodeStaleTime          = "stale_time"           // error: the request's time is too far from the daemon's clock
	CodeReplay             = "replay"               // error: the request was seen before
	CodeEnvNotAllowed      = "env_not_allowed"      // error: an env key the allowlist refuses
	CodeEnvValue           = "env_value"            // error: an allowed env key holds a value it may not
	CodeNotFound           = "not_found"            // error: a stage's executable cannot be found
	CodeResolve            = "resolve"              // error: a stage's executable cannot be resolved or opened
	CodeCwd                = "cwd"                  // error: cwd is missing or not reachable
	CodeNoUser             = "no_user"              // error: the uid to run as has no account
	CodeNoAgent            = "no_agent"             // error: forward_agent without an agent to forward
	CodeBusy               = "busy"                 // error: too many connections or requests in flight
	CodeRateLimit          = "rate_limit"           // error: the uid asks a person too often
	CodeStopping           = "stopping"             // error: the daemon is shutting down
	CodeStart              = "start"                // error: the approved pipeline could not be started
	CodeAudit              = "audit"                // error: the audit record cannot be written
	CodeInternal           = "internal"             // error: a fault in the daemon
	CodeNoApprover         = "no_approver"          // denied: no one could be asked, or every approver left
	CodeNoEligibleApprover = "no_eligible_approver" // denied: every approver is one the requester controls
	CodeDeniedByPolicy     = "denied_by_policy"     // denied: a deny rule matched
	CodeDeniedByOperator   = "denied_by_operator"   // denied: a person said no
	CodePromptTimeout      = "prompt_timeout"       // timeout: no one decided in time
	CodeRunTimeout         = "run_timeout"          // timeout: the run was killed at its time limit
	CodeKilledStopping     = "killed_stopping"      // error: the run had started and was killed as the daemon stopped
)

// codes maps every code to with the status it comes with.
var codes = map[string]string{
	CodeInvalidJSON: StatusError, CodeUnknownField: StatusError, CodeInvalidRequest: StatusError,
	CodeTooLarge: StatusError, CodeReadTimeout: StatusError, CodeStaleTime: StatusError,
	CodeReplay: StatusError, CodeEnvNotAllowed: StatusError, CodeEnvValue: StatusError, CodeNotFound: StatusError,
	CodeCwd: StatusError, CodeResolve: StatusError, CodeStart: StatusError, CodeNoUser: StatusError, CodeNoAgent: StatusError,
	CodeBusy: StatusError, CodeRateLimit: StatusError, CodeStopping: StatusError,
	CodeAudit: StatusError, CodeInternal: StatusError,
	CodeNoApprover: StatusDenied, CodeNoEligibleApprover: StatusDenied,
	CodeDeniedByPolicy: StatusDenied, CodeDeniedByOperator: StatusDenied,
	CodePromptTimeout: StatusTimeout, CodeRunTimeout: StatusTimeout,
	CodeKilledStopping: StatusError,
}

// CodeStatus returns the status a code comes with, and whether the code is
// one of the protocol's.
func CodeStatus(code string) (string, bool) {
	s, ok := codes[code]
	return s, ok
}

// Codes returns every code of the protocol.
func Codes() []string {
	out := make([]string, 0, len(codes))
	for c := range codes {
		out = append(out, c)
	}
	return out
}

// Error is an error a client can receive: its text is the response's
// message, Code its code.
type Error struct {
	Code string
	Msg  string
	err  error // the error it gives a code to, if any
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the error e gives a code to, if any.
func (e *Error) Unwrap() error { return e.err }

// coded makes an [Error].
func coded(code, msg string) error { return &Error{Code: code, Msg: msg} }

// CodeOf is the code of err: the code of the first [Error] in its chain,
// or CodeInternal for an error the protocol does not name.
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// ErrorResponse is the error response carrying err: the message and code
// of the first [Error] in its chain, or ErrInternal's for an error the
// protocol does not name, so that a client only ever receives the texts
// written here (the daemon logs and audits the error itself).
func ErrorResponse(id string, err error) *Response {
	var e *Error
	if !errors.As(err, &e) {
		e = ErrInternal.(*Error)
	}
	return &Response{ID: id, Status: StatusError, Code: e.Code, Message: e.Msg}
}
