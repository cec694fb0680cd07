// Package wire is rootgate's request/response contract (docs/protocol.md):
// the types, the line codec, validation and defaults. It knows nothing about
// sockets, processes or people.
//
// A daemon reads a line with [ReadLine], turns it into a [Request] with
// [Decode] (JSON, keys exactly the field names and no escaped lone
// surrogates as [CheckKeys] checks them, types, field rules, the
// forward_agent rule: checks 3 to 5 of the protocol's order), then applies
// [Request.CheckTime] (6) and [EnvPolicy.Check] (7). Answers are written
// with [WriteResponse], which streams captured output as base64 without
// building the whole line in memory.
package wire

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/internal/termsafe"
)

// Limits of the request fields.
const (
	MaxStages = 16
	// MaxEnvKeys bounds the keys of env: far more than a run needs (a
	// test runs 20,000), far fewer than a 1 MiB line can hold.
	MaxEnvKeys    = 32768
	MaxIDLen      = 128
	MaxHostLen    = 255
	MaxSessionLen = 256
	MaxReasonLen  = 4096
	MaxVersionLen = 256
	// MaxAccountLen bounds run_as and run_as_group.
	MaxAccountLen = 256
	// MaxTimeoutSeconds is the largest timeout a request may ask for (a
	// year); the daemon lowers any timeout to its own limit anyway.
	MaxTimeoutSeconds = 365 * 24 * 3600
)

// Actions.
const (
	ActionExec = "exec"
	ActionPing = "ping"
)

// Request is a decoded, validated request.
type Request struct {
	ID      string // given by the client, or a fresh UUIDv4
	IDGiven bool   // the client sent an id
	Host    string
	Session string
	// TimeText is the time field as sent; Time is it parsed ("" and the
	// zero time when it was missing; CheckTime rejects both).
	TimeText string
	Time     time.Time
	Pipeline [][]string
	Env      map[string]string
	Reason   string
	// Privileged defaults to true.
	Privileged bool
	// PrivilegedSet: the client sent the privileged field.
	PrivilegedSet bool
	ForwardAgent  bool
	Action        string // ActionExec or ActionPing
	Cwd           string // "/" by default
	Stdin         []byte // nil when absent
	// Timeout is the run time limit the client asked for; 0 when absent.
	Timeout time.Duration
	Version string
	// LineSHA256 is the SHA-256 of the raw request line.
	LineSHA256 [sha256.Size]byte
	// EOFWithdraws: the client keeps its side open until it has read the
	// answer, so the end of its stream withdraws the request.
	EOFWithdraws bool
	// Check: evaluate the policy for this request and say what it would
	// decide, without asking anyone or running anything (opt-in
	// extension; docs/protocol.md, "Check requests").
	Check bool
	// Progress: the client asked for progress lines before the answer
	// (docs/protocol.md, "Progress lines"; opt-in).
	Progress bool
	// Stream is the stream framing the client asked for (StreamVersion),
	// 0 when it did not: its run's output then comes as frames while the
	// run goes on, every byte of it (docs/protocol.md, "Streamed output";
	// opt-in).
	Stream int
	// RunAs names the account a privileged request runs as: a user name,
	// or "#UID"; "" runs as root (docs/protocol.md, "Runs as a named
	// account"). RunAsGroup likewise names the run's primary group
	// ("#GID" or a name); "" keeps the account's own.
	RunAs      string
	RunAsGroup string
	// runAsSet and runAsGroupSet: the client sent the field (an empty
	// value is refused, not taken as absent).
	runAsSet, runAsGroupSet bool
}

// ReplayKey is what the replay window remembers: the id when the client
// gave one, else the SHA-256 of the raw line.
func (r *Request) ReplayKey() string {
	if r.IDGiven {
		return "id:" + r.ID
	}
	return fmt.Sprintf("sha256:%x", r.LineSHA256)
}

// field decoders, keyed by JSON name, in one table so that the set of known
// fields and their types cannot drift apart.
var fields = map[string]func(r *Request, raw json.RawMessage) error{
	"id":       func(r *Request, raw json.RawMessage) error { r.IDGiven = true; return decodeString("id", raw, &r.ID) },
	"host":     func(r *Request, raw json.RawMessage) error { return decodeString("host", raw, &r.Host) },
	"session":  func(r *Request, raw json.RawMessage) error { return decodeString("session", raw, &r.Session) },
	"time":     func(r *Request, raw json.RawMessage) error { return decodeString("time", raw, &r.TimeText) },
	"reason":   func(r *Request, raw json.RawMessage) error { return decodeString("reason", raw, &r.Reason) },
	"cwd":      func(r *Request, raw json.RawMessage) error { return decodeString("cwd", raw, &r.Cwd) },
	"version":  func(r *Request, raw json.RawMessage) error { return decodeString("version", raw, &r.Version) },
	"action":   func(r *Request, raw json.RawMessage) error { return decodeString("action", raw, &r.Action) },
	"pipeline": decodePipeline,
	"env":      decodeEnv,
	"privileged": func(r *Request, raw json.RawMessage) error {
		r.PrivilegedSet = true
		return decodeBool("privileged", raw, &r.Privileged)
	},
	"forward_agent": func(r *Request, raw json.RawMessage) error { return decodeBool("forward_agent", raw, &r.ForwardAgent) },
	"run_as": func(r *Request, raw json.RawMessage) error {
		r.runAsSet = true
		return decodeString("run_as", raw, &r.RunAs)
	},
	"run_as_group": func(r *Request, raw json.RawMessage) error {
		r.runAsGroupSet = true
		return decodeString("run_as_group", raw, &r.RunAsGroup)
	},
	"eof_withdraws": func(r *Request, raw json.RawMessage) error { return decodeBool("eof_withdraws", raw, &r.EOFWithdraws) },
	"progress":      func(r *Request, raw json.RawMessage) error { return decodeBool("progress", raw, &r.Progress) },
	"stdin":         decodeStdin,
	"stream":        decodeStream,
	"check":         func(r *Request, raw json.RawMessage) error { return decodeBool("check", raw, &r.Check) },
	"timeout":       decodeTimeout,
}

// Decode parses and validates one request line (without its newline):
// checks 3 to 5 of the protocol's order. Missing fields get their defaults;
// a request without id gets a fresh UUIDv4.
//
// When the line parsed as a request object but failed validation, Decode
// returns the request too, so the error response can echo its ID (which is
// then "" if the id itself was invalid). When it did not parse, the request
// is nil.
func Decode(line []byte) (*Request, error) {
	if !utf8.Valid(line) {
		return nil, ErrNotUTF8
	}
	r := &Request{Privileged: true, Action: ActionExec, Cwd: "/", Env: map[string]string{}}
	r.LineSHA256 = sha256.Sum256(line)
	// Before any parser: what a parser costs grows with the depth.
	if err := CheckDepth(line); err != nil {
		return nil, invalidRequest(err)
	}
	err := checkRequestKeys(line)
	// A field with too many members is left out of the decoding, so
	// that none of them is allocated, and refused as validate would,
	// the rest of the request decoded for its id.
	var tooMany *tooManyError
	if errors.As(err, &tooMany) {
		err = nil
	}
	if err == nil {
		err = decodeObject(line, r, tooMany)
	}
	if err := syntaxFirst(line, err); err != nil {
		return nil, invalidRequest(err)
	}
	if !r.IDGiven {
		r.ID = uuid.NewString()
	}
	err = r.validate()
	if tooMany != nil {
		err = tooMany // the field validate would have refused
	}
	if err != nil {
		if r.IDGiven && (r.ID == "" || utf8.RuneCountInString(r.ID) > MaxIDLen || !termsafe.String(r.ID, false)) {
			r.ID = ""
		}
		return r, invalidRequest(err)
	}
	return r, nil
}

// invalidRequest gives err, a reason Decode refuses a line, the code
// invalid_request unless it has a code of its own.
func invalidRequest(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: CodeInvalidRequest, Msg: err.Error(), err: err}
}

// requestShape is what CheckKeys allows in a request: the names of the
// fields table, each once; env is an object of any keys.
var requestShape = func() *Shape {
	s := &Shape{Fields: make(map[string]*Shape, len(fields))}
	for name := range fields {
		s.Fields[name] = &Shape{}
	}
	s.Fields["pipeline"] = &Shape{Elem: &Shape{Elem: &Shape{}}, Max: MaxStages}
	s.Fields["env"] = &Shape{Map: true, Elem: &Shape{}, Max: MaxEnvKeys}
	return s
}()

// checkRequestKeys refuses, in the protocol's words, a key that is not
// exactly a field name, a repeated key, and a string with an escaped lone
// surrogate.
func checkRequestKeys(line []byte) error {
	if !bytes.HasPrefix(bytes.TrimLeft(line, " \t\r\n"), []byte("{")) {
		return nil // not an object: decodeObject says so
	}
	err := checkKeysShallow(line, requestShape) // Decode checked the depth
	if ce, ok := err.(*CountError); ok {
		// Refused before a decoder allocates each of them.
		switch ce.Path {
		case "pipeline":
			return &tooManyError{field: "pipeline", msg: fmt.Sprintf("pipeline must have 1 to %d stages", MaxStages)}
		case "env":
			return &tooManyError{field: "env", msg: fmt.Sprintf("env must have at most %d keys", MaxEnvKeys)}
		}
	}
	if ke, ok := err.(*KeyError); ok {
		switch {
		case ke.Path == "" && ke.Repeated:
			return fmt.Errorf("duplicate field %q", ke.Key)
		case ke.Path == "":
			return coded(CodeUnknownField, fmt.Sprintf("unknown field %q", ke.Key))
		case ke.Path == "env" && ke.Repeated:
			// The decoder keeps the last; another reader might keep the first.
			return fmt.Errorf("duplicate env key %q", ke.Key)
		}
	}
	return err
}

// tooManyError is a field with more members than the request may have
// (CountError), which decodeObject leaves out.
type tooManyError struct{ field, msg string }

func (e *tooManyError) Error() string { return e.msg }

// decodeObject walks the top-level object so that unknown and repeated keys
// are refused (a repeated key would let two JSON parsers disagree about
// what was asked). The field skip names, if any, is not decoded.
func decodeObject(line []byte, r *Request, skip *tooManyError) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	if err != nil {
		return invalidJSON(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return coded(CodeInvalidJSON, "invalid JSON: request must be a JSON object")
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return invalidJSON(err)
		}
		name := tok.(string) // object keys are always strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return invalidJSON(err)
		}
		set, known := fields[name]
		if !known {
			return coded(CodeUnknownField, fmt.Sprintf("unknown field %q", name))
		}
		if seen[name] {
			return fmt.Errorf("duplicate field %q", name)
		}
		seen[name] = true
		if string(raw) == "null" {
			return fmt.Errorf("field %q must not be null", name)
		}
		if skip != nil && name == skip.field {
			continue
		}
		if err := set(r, raw); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return invalidJSON(err)
	}
	// Only whitespace may follow; the decoder would stop at the first
	// byte it cannot read and leave the rest unexamined.
	if len(bytes.TrimLeft(line[dec.InputOffset():], " \t\r\n")) > 0 {
		return coded(CodeInvalidJSON, "invalid JSON: data after the request object")
	}
	return nil
}

// syntaxFirst makes a line that is not JSON at all fail as such, before a
// field's type is checked: decodeObject checks each field as it comes, so
// a type error early in a line would otherwise hide a syntax error later.
func syntaxFirst(line []byte, err error) error {
	if err == nil || CodeOf(err) == CodeInvalidJSON || json.Valid(line) {
		return err
	}
	var v json.RawMessage
	if serr := json.Unmarshal(line, &v); serr != nil {
		return invalidJSON(serr)
	}
	return err
}

func invalidJSON(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return coded(CodeInvalidJSON, "invalid JSON: unexpected end of input")
	}
	return coded(CodeInvalidJSON, "invalid JSON: "+strings.TrimPrefix(err.Error(), "json: "))
}

func decodeString(name string, raw json.RawMessage, dst *string) error {
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("field %q must be a string", name)
	}
	return nil
}

func decodeBool(name string, raw json.RawMessage, dst *bool) error {
	if err := json.Unmarshal(raw, dst); err != nil {
		return fmt.Errorf("field %q must be a boolean", name)
	}
	return nil
}

func decodePipeline(r *Request, raw json.RawMessage) error {
	bad := errors.New(`field "pipeline" must be an array of arrays of strings`)
	// A null stage or argument would decode as none or "": refused
	// first, so that the arguments decode straight into strings.
	if hasNull(raw) {
		return bad
	}
	var stages [][]string
	if err := json.Unmarshal(raw, &stages); err != nil {
		return bad
	}
	r.Pipeline = stages
	return nil
}

// hasNull reports whether raw, JSON text, holds a null: outside its
// strings, an n can only begin one.
func hasNull(raw []byte) bool {
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case 'n':
			return true
		}
	}
	return false
}

func decodeEnv(r *Request, raw json.RawMessage) error {
	var env map[string]*string
	if err := json.Unmarshal(raw, &env); err != nil {
		return errors.New(`field "env" must be an object of strings`)
	}
	for k, v := range env {
		if v == nil {
			return errors.New(`field "env" must be an object of strings`)
		}
		r.Env[k] = *v
	}
	return nil // repeated keys: checkRequestKeys
}

// RepeatedKey reports the first key that raw, a JSON object, names twice at
// its top level: such an object means one thing to one decoder and another
// to the next (Go's keeps the last value, others the first). Anything raw
// has wrong besides is left to the decoder: ok is false then. [CheckKeys]
// checks this and more.
func RepeatedKey(raw []byte) (key string, ok bool) {
	if ke, isKey := CheckKeys(raw, &Shape{Map: true}).(*KeyError); isKey && ke.Repeated {
		return ke.Key, true
	}
	return "", false
}

func decodeStdin(r *Request, raw json.RawMessage) error {
	var s string
	if err := decodeString("stdin", raw, &s); err != nil {
		return err
	}
	b, err := base64.StdEncoding.Strict().DecodeString(s)
	if err != nil {
		return errors.New(`field "stdin" must be base64`)
	}
	r.Stdin = b
	return nil
}

// decodeStream reads the stream field: a framing version this package
// speaks, which is 1 alone.
func decodeStream(r *Request, raw json.RawMessage) error {
	if string(raw) != strconv.Itoa(StreamVersion) {
		return fmt.Errorf(`field "stream" must be %d, the version of the stream framing this daemon speaks`, StreamVersion)
	}
	r.Stream = StreamVersion
	return nil
}

func decodeTimeout(r *Request, raw json.RawMessage) error {
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return errors.New(`field "timeout" must be a number of seconds`)
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		// A number, but out of float64's range.
		return errors.New(`field "timeout" must be a positive number of seconds`)
	}
	// More than a year means nothing for a run limit.
	if f <= 0 || math.IsInf(f, 0) || f > MaxTimeoutSeconds {
		return errors.New(`field "timeout" must be a positive number of seconds`)
	}
	r.Timeout = time.Duration(f * float64(time.Second))
	if r.Timeout <= 0 {
		return errors.New(`field "timeout" must be a positive number of seconds`)
	}
	return nil
}

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validate is check 4 (field rules) and 5 (forward_agent), in the order
// docs/protocol.md gives.
func (r *Request) validate() error {
	for _, check := range []func() error{
		r.checkAction, r.checkPipeline, r.checkTexts, r.checkEnvKeys, r.checkRunAs,
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// checkAction checks the action and what it needs or forbids.
func (r *Request) checkAction() error {
	switch r.Action {
	case ActionExec:
		if r.Pipeline == nil {
			return ErrPipelineMissing
		}
	case ActionPing:
		if r.Check {
			return errors.New(`"check" is for exec requests, not ping`)
		}
	default:
		return errors.New(`field "action" must be "exec" or "ping"`)
	}
	return nil
}

// checkPipeline checks the number of stages and every argument.
func (r *Request) checkPipeline() error {
	if r.Action == ActionExec || len(r.Pipeline) > 0 {
		if len(r.Pipeline) < 1 || len(r.Pipeline) > MaxStages {
			return fmt.Errorf("pipeline must have 1 to %d stages", MaxStages)
		}
	}
	for i, stage := range r.Pipeline {
		if len(stage) == 0 {
			return fmt.Errorf("pipeline[%d] must not be empty", i)
		}
		if stage[0] == "" {
			return fmt.Errorf("pipeline[%d][0] must not be empty", i)
		}
		for j, arg := range stage {
			if !termsafe.String(arg, true) {
				return charError(fmt.Sprintf("pipeline[%d][%d]", i, j))
			}
		}
	}
	return nil
}

// checkTexts checks the string fields' lengths and characters, and that
// cwd is absolute.
func (r *Request) checkTexts() error {
	if r.IDGiven {
		if n := utf8.RuneCountInString(r.ID); n < 1 || n > MaxIDLen {
			return fmt.Errorf("id must be 1 to %d characters", MaxIDLen)
		}
	}
	for _, f := range []struct {
		name      string
		val       string
		max       int
		multiline bool
	}{
		{"id", r.ID, MaxIDLen, false},
		{"host", r.Host, MaxHostLen, false},
		{"session", r.Session, MaxSessionLen, false},
		{"reason", r.Reason, MaxReasonLen, true},
		{"version", r.Version, MaxVersionLen, false},
		{"cwd", r.Cwd, 4096, false},
	} {
		if utf8.RuneCountInString(f.val) > f.max {
			return fmt.Errorf("%s exceeds %d characters", f.name, f.max)
		}
		if !termsafe.String(f.val, f.multiline) {
			return charError(f.name)
		}
	}
	if !path.IsAbs(r.Cwd) {
		return errors.New("cwd must be an absolute path")
	}
	return nil
}

// checkEnvKeys checks env's keys are names and its values free of
// control characters (their kinds are check 7's: EnvPolicy.Check).
func (r *Request) checkEnvKeys() error {
	for k, v := range r.Env {
		if !envKey.MatchString(k) {
			return fmt.Errorf("env key %q is not a valid name", k)
		}
		if !termsafe.String(v, false) {
			return charError(fmt.Sprintf("env[%q]", k))
		}
	}
	return nil
}

// checkRunAs is check 5 (forward_agent needs an unprivileged run), then
// run_as and run_as_group: well formed, and only with "privileged": true.
func (r *Request) checkRunAs() error {
	if r.ForwardAgent && (!r.PrivilegedSet || r.Privileged) {
		return ErrAgentNeedsUnprivileged
	}
	for _, f := range []struct {
		name, val, what string
		set             bool
	}{
		{"run_as", r.RunAs, "user", r.runAsSet},
		{"run_as_group", r.RunAsGroup, "group", r.runAsGroupSet},
	} {
		if !f.set {
			continue
		}
		if err := checkAccountName(f.name, f.val, f.what); err != nil {
			return err
		}
		if !r.Privileged {
			return fmt.Errorf(`%s needs "privileged": true: a request with "privileged": false runs as its requester`, f.name)
		}
	}
	return nil
}

// accountName is what run_as and run_as_group may hold besides "#ID": a
// name of the portable characters most systems allow in user and group
// names, an optional trailing "$" (a machine account), never only digits
// (which would read as a number to some tools and a name to others).
var accountName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@-]*\$?$`)

// checkAccountName checks v, the value of field name (run_as or
// run_as_group), as a what ("user" or "group") name or "#ID".
func checkAccountName(name, v, what string) error {
	switch {
	case v == "":
		return fmt.Errorf("%s must not be empty", name)
	case utf8.RuneCountInString(v) > MaxAccountLen:
		return fmt.Errorf("%s exceeds %d characters", name, MaxAccountLen)
	case !termsafe.String(v, false):
		return charError(name)
	}
	if id, ok := strings.CutPrefix(v, "#"); ok {
		if _, err := ParseAccountID(id); err == nil {
			return nil
		}
	} else if accountName.MatchString(v) && strings.Trim(v, "0123456789") != "" {
		return nil
	}
	return fmt.Errorf(`%s must be a %s name or "#%sID" (a number)`, name, what, strings.ToUpper(what[:1]))
}

// ParseAccountID parses the number of a "#ID" run_as or run_as_group:
// decimal digits, no sign, no leading zero, below 4294967295 (which is
// -1, "no id", to the kernel).
func ParseAccountID(s string) (uint32, error) {
	if s == "" || len(s) > 10 || s[0] == '0' && len(s) > 1 || strings.Trim(s, "0123456789") != "" {
		return 0, errors.New("not a decimal id")
	}
	n, err := strconv.ParseUint(s, 10, 64) // at most 10 digits: fits
	if err != nil || n >= math.MaxUint32 {
		return 0, errors.New("id out of range")
	}
	return uint32(n), nil
}

// CheckTime is check 6: the request's time must be an RFC 3339 date-time
// (see [ParseTime]) within maxSkew of now, either way. Times are compared
// as times, so no time, however far off, overflows the check.
func (r *Request) CheckTime(now time.Time, maxSkew time.Duration) error {
	if r.TimeText == "" {
		return ErrTimeMissing
	}
	t, err := ParseTime(r.TimeText)
	if err != nil {
		return coded(CodeInvalidRequest, fmt.Sprintf("field \"time\" must be an RFC 3339 date-time with a zone, got %q", r.TimeText))
	}
	r.Time = t
	switch {
	case t.Before(now.Add(-maxSkew)):
		return tooOld(secondsUp(t, now), maxSkew)
	case t.After(now.Add(maxSkew)):
		return tooNew(secondsUp(now, t), maxSkew)
	}
	return nil
}

var errNotRFC3339 = errors.New("not an RFC 3339 date-time")

// ParseTime parses exactly an RFC 3339 date-time (section 5.6):
// full-date "T" full-time, such as 2026-02-13T14:30:00Z or
// 2026-02-13t16:30:00.25+02:00, with "T" and "Z" in either case, any
// number of fraction digits after a '.', and a zone of Z or ±hh:mm. Go's
// time.Parse also takes forms RFC 3339 does not have (a ',' before the
// fraction, a one-digit hour). Fraction digits beyond nanoseconds are
// dropped; a leap second (:60) is the first instant of the next minute.
func ParseTime(s string) (time.Time, error) {
	if len(s) < 20 || s[10] != 'T' && s[10] != 't' {
		return time.Time{}, errNotRFC3339
	}
	year, month, day, ok := fullDate(s[:10])
	if !ok {
		return time.Time{}, errNotRFC3339
	}
	hour, minute, sec, ok := partialTime(s[11:19])
	if !ok {
		return time.Time{}, errNotRFC3339
	}
	nsec, rest, ok := timeFraction(s[19:])
	if !ok {
		return time.Time{}, errNotRFC3339
	}
	loc, ok := timeZone(rest)
	if !ok {
		return time.Time{}, errNotRFC3339
	}
	return time.Date(year, time.Month(month), day, hour, minute, sec, nsec, loc), nil
}

// fullDate reads s, 10 bytes, as RFC 3339's full-date, yyyy-mm-dd: a
// day the month has.
func fullDate(s string) (year, month, day int, ok bool) {
	if s[4] != '-' || s[7] != '-' {
		return 0, 0, 0, false
	}
	year, month, day = digits(s, 0, 4), digits(s, 5, 2), digits(s, 8, 2)
	if year < 0 || month < 1 || month > 12 || day < 1 {
		return 0, 0, 0, false
	}
	if day > time.Date(year, time.Month(month)+1, 0, 0, 0, 0, 0, time.UTC).Day() {
		return 0, 0, 0, false
	}
	return year, month, day, true
}

// partialTime reads s, 8 bytes, as RFC 3339's hh:mm:ss, the seconds up
// to 60 (a leap second).
func partialTime(s string) (hour, minute, sec int, ok bool) {
	if s[2] != ':' || s[5] != ':' {
		return 0, 0, 0, false
	}
	hour, minute, sec = digits(s, 0, 2), digits(s, 3, 2), digits(s, 6, 2)
	if hour < 0 || hour > 23 || minute < 0 || minute > 59 || sec < 0 || sec > 60 {
		return 0, 0, 0, false
	}
	return hour, minute, sec, true
}

// digits reads the n decimal digits at s[i:], or is -1.
func digits(s string, i, n int) int {
	if i+n > len(s) {
		return -1
	}
	v := 0
	for _, c := range []byte(s[i : i+n]) {
		if c < '0' || c > '9' {
			return -1
		}
		v = v*10 + int(c-'0')
	}
	return v
}

// timeFraction reads the fraction of a second that may start s, a '.'
// and at least one digit, as nanoseconds (digits past the ninth dropped),
// and returns what follows it; s without a fraction is returned whole,
// with 0. ok is false for a '.' without a digit.
func timeFraction(s string) (nsec int, rest string, ok bool) {
	if s == "" || s[0] != '.' {
		return 0, s, true
	}
	i := 1
	for ; i < len(s) && s[i] >= '0' && s[i] <= '9'; i++ {
		if i <= 9 {
			nsec = nsec*10 + int(s[i]-'0')
		}
	}
	if i == 1 {
		return 0, "", false
	}
	for d := i; d <= 9; d++ {
		nsec *= 10
	}
	return nsec, s[i:], true
}

// timeZone reads s, the whole rest of a date-time after its seconds and
// fraction: "Z" (either case), or an offset ±hh:mm.
func timeZone(s string) (*time.Location, bool) {
	switch {
	case s == "Z" || s == "z":
		return time.UTC, true
	case len(s) == 6 && (s[0] == '+' || s[0] == '-') && s[3] == ':':
		oh, om := digits(s, 1, 2), digits(s, 4, 2)
		if oh < 0 || oh > 23 || om < 0 || om > 59 {
			return nil, false
		}
		off := (oh*60 + om) * 60
		if s[0] == '-' {
			off = -off
		}
		return time.FixedZone("", off), true
	}
	return nil, false
}

// DefaultEnvAllow returns the daemon's default env allowlist, a copy the
// caller may change; a trailing '*' matches any suffix. Each key has a rule
// for its values (env.go).
func DefaultEnvAllow() []string { return slices.Clone(defaultEnvAllow) }

var defaultEnvAllow = []string{
	"LANG", "LANGUAGE", "LC_*", "TZ", "TERM", "COLUMNS", "LINES", "NO_COLOR",
	"DEBIAN_FRONTEND", "DEBCONF_NONINTERACTIVE_SEEN", "APT_LISTCHANGES_FRONTEND",
	"SYSTEMD_COLORS", "http_proxy", "https_proxy",
	"no_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY",
}

// neverAllowed are refused whatever the allowlist says.
var neverAllowed = []string{"PATH", "LD_*", "HOME", "USER", "LOGNAME", "SHELL", "IFS", "BASH_ENV", "ENV", "SSH_AUTH_SOCK"}

// EnvPolicy is an env allowlist: names, or prefixes ending in '*'.
type EnvPolicy []string

func matchesAny(patterns []string, key string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(key, prefix) || p == key {
			return true
		}
	}
	return false
}

// Check is check 7: every key of env must be allowed, and its value of
// the kind the key holds (see env.go). A key the package has no value rule
// for is refused whatever p says. Keys are checked in sorted order so the
// error names the same key every time.
func (p EnvPolicy) Check(env map[string]string) error {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		r := envValueRule(k)
		if matchesAny(neverAllowed, k) || !matchesAny(p, k) || r == nil {
			return envNotAllowed(k)
		}
		if err := checkEnvValue(r, k, env[k]); err != nil {
			return err
		}
	}
	return nil
}
