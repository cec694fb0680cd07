package wire

import (
	"errors"
	"fmt"
	"time"
)

// The protocol's fixed error texts (docs/protocol.md). They are part of the
// contract: clients and tests match them verbatim.
var (
	// ErrTooLarge: the request line is longer than MaxLine.
	ErrTooLarge = errors.New("request exceeds maximum size (1048576 bytes)")
	// ErrNoNewline: the peer closed after sending bytes but no newline.
	ErrNoNewline = errors.New("request missing trailing newline")
	// ErrReadTimeout: the request line did not arrive within ReadTimeout.
	ErrReadTimeout = errors.New("request not received within 10s")
	// ErrAgentNeedsUnprivileged: forward_agent without "privileged": false.
	ErrAgentNeedsUnprivileged = errors.New(`forward_agent requires "privileged": false`)
	// ErrTimeMissing: the request has no time field.
	ErrTimeMissing = errors.New(`missing field "time"`)
	// ErrPipelineMissing: an exec request has no pipeline field.
	ErrPipelineMissing = errors.New(`missing field "pipeline"`)
	// ErrNotUTF8: the request line is not valid UTF-8.
	ErrNotUTF8 = errors.New("invalid JSON: request is not valid UTF-8")
	// ErrServerBusy: too many connections are in flight.
	ErrServerBusy = errors.New("server busy")
	// ErrStopping: the daemon is shutting down.
	ErrStopping = errors.New("daemon stopping")
)

// ReadTimeout bounds how long a peer may take to send its request line.
const ReadTimeout = 10 * time.Second

// charError reports a displayed string holding a forbidden character.
func charError(field string) error {
	return fmt.Errorf("%s contains a control or bidi character", field)
}

// EnvNotAllowedError reports an env key the daemon's allowlist refuses.
func envNotAllowed(key string) error {
	if key == "SSH_AUTH_SOCK" {
		return errors.New("SSH_AUTH_SOCK cannot be set; use forward_agent")
	}
	return fmt.Errorf("env key %q is not allowed", key)
}

// DuplicateError reports a request seen before within the replay window.
func DuplicateError(id string) error {
	return fmt.Errorf("duplicate request id %q", id)
}

// NotFoundError reports a stage whose executable could not be resolved;
// stage is 1-based as in the protocol's example.
func NotFoundError(stage int, name string) error {
	return fmt.Errorf("stage %d: executable not found: %q", stage, name)
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
	return fmt.Errorf("request too old: %ds (max %ds)", ageSec, maxSeconds(max))
}

func tooNew(aheadSec int64, max time.Duration) error {
	return fmt.Errorf("request time is in the future: %ds ahead (max %ds)", aheadSec, maxSeconds(max))
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
	return fmt.Errorf("too many requests from uid %d waiting for approval (max %d)", uid, max)
}

// TooManyConnsError refuses a connection when uid already has max
// connections in flight.
func TooManyConnsError(uid, max int) error {
	return fmt.Errorf("server busy: too many connections from uid %d in flight (max %d)", uid, max)
}

// FirstByteError answers a connection that sent nothing within d of
// connecting.
func FirstByteError(d time.Duration) error {
	return fmt.Errorf("request not started within %s", d)
}

// PromptRateError refuses a request when uid has already put perMinute
// requests to a person within the last minute.
func PromptRateError(uid, perMinute int) error {
	return fmt.Errorf("too many requests from uid %d: at most %d a minute may ask for approval", uid, perMinute)
}
