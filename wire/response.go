package wire

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"unicode"

	"github.com/rootgate/rootgate/internal/termsafe"
)

// Statuses.
const (
	StatusOK      = "ok"
	StatusDenied  = "denied"
	StatusTimeout = "timeout"
	StatusError   = "error"
)

// MaxCapture is how many bytes of stdout a response carries at most, and
// how many of all its stages' stderr together; a stream cut is marked
// truncated.
const MaxCapture = 16 << 20

// Pong is the message of a ping's answer.
const Pong = "pong"

// Response is the daemon's one answer line. The byte fields travel as
// base64; encoding/json decodes them that way too, so clients can decode a
// line with json.Unmarshal.
type Response struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	// Code, on every non-ok response: which case it is (codes.go), for
	// clients to decide by. Additive: a client may ignore it.
	Code            string        `json:"code,omitempty"`
	Stages          []StageResult `json:"stages,omitempty"`
	Stdout          []byte        `json:"stdout,omitempty"`
	StdoutTruncated bool          `json:"stdout_truncated,omitempty"`
	// StdoutChunks, for the daemon writing an answer: more stdout, written
	// after Stdout, chunk by chunk, so that a run's captured output is
	// never joined into one slice. encoding/json ignores it: a decoded
	// answer has all its stdout in Stdout.
	StdoutChunks [][]byte `json:"-"`
	Message      string   `json:"message,omitempty"`
	// Approver, in a ping's answer only: whether an approver who may
	// decide the requester's requests is attached. Absent when the daemon
	// cannot tell.
	Approver *bool  `json:"approver,omitempty"`
	Version  string `json:"version"`

	// Additive fields (docs/protocol.md): a client may ignore them.
	// Check, on the answer to a check request: "allow", "ask" or "deny".
	Check string `json:"check,omitempty"`
	// DecidedBy, on the answer to a request that was decided (or checked
	// and matched a policy rule): who decided.
	DecidedBy *DecidedBy `json:"decided_by,omitempty"`
	// DaemonTime, on a refusal for the request's time: the daemon's clock,
	// RFC 3339 in whole seconds UTC.
	DaemonTime string `json:"daemon_time,omitempty"`
	// Usage, with a run's results when the run had a cgroup of its own:
	// what the cgroup counted.
	Usage *Usage `json:"usage,omitempty"`
}

// Usage is what a run's cgroup counted over the whole run, every process
// of it included: CPU time in microseconds (cpu.stat) and, where the
// memory controller is enabled, the peak memory in bytes (memory.peak).
type Usage struct {
	CPUUsec    int64  `json:"cpu_usec"`
	UserUsec   int64  `json:"user_usec"`
	SystemUsec int64  `json:"system_usec"`
	MemoryPeak *int64 `json:"memory_peak,omitempty"`
}

// Values of [DecidedBy].By.
const (
	DecidedByPolicy = "policy"
	DecidedByPerson = "person"
	// DecidedByGrant: a person's standing grant for requests of exactly
	// this shape from this requester (docs/protocol.md, "Standing grants").
	DecidedByGrant = "grant"
)

// Check answers ([Response].Check).
const (
	CheckAllow = "allow"
	CheckAsk   = "ask"
	CheckDeny  = "deny"
)

// MaxNoteLen is how many characters of a person's deny note a response
// carries at most.
const MaxNoteLen = 200

// DecidedBy says who decided a request: a policy rule (Rule, Source) or
// a person (Approver, Via, and Note when they typed one), or a person's
// standing grant (Grant, Ends, and the Approver and Via who gave it).
type DecidedBy struct {
	By       string `json:"by"`                 // DecidedByPolicy, DecidedByPerson or DecidedByGrant
	Rule     string `json:"rule,omitempty"`     // the policy rule's text
	Source   string `json:"source,omitempty"`   // "FILE:LINE" of the rule
	Approver string `json:"approver,omitempty"` // "NAME (uid N) on TTY"
	Via      string `json:"via,omitempty"`      // "terminal" (the daemon's own --tty) or "remote"
	Note     string `json:"note,omitempty"`     // a deny note the person typed, sanitised
	Grant    string `json:"grant,omitempty"`    // the standing grant's id, e.g. "g3"
	Ends     string `json:"ends,omitempty"`     // when the grant ends, RFC 3339 UTC in whole seconds
	// Group, when more than 1, says the person's one answer decided that
	// many identical requests, shown as one prompt; GroupOf is the id of
	// the request whose prompt was shown, when it is another.
	Group   int    `json:"group,omitempty"`
	GroupOf string `json:"group_of,omitempty"`
}

// StageResult is one stage's outcome.
type StageResult struct {
	ExitCode        int    `json:"exit_code"`
	Signal          string `json:"signal,omitempty"`
	Stderr          []byte `json:"stderr"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	// StderrChunks: more stderr, written after Stderr, as
	// [Response].StdoutChunks is.
	StderrChunks [][]byte `json:"-"`
}

// HasRun reports whether the response carries a run's results.
func (r *Response) HasRun() bool { return r.Stages != nil }

// WriteResponse writes r as one JSON line ending in '\n'. Output is
// base64-encoded as it is written, chunk by chunk, so memory use stays at
// the captured bytes themselves plus a small buffer. Stages and stdout are written
// whenever Stages is non-nil (ok, or a run that timed out).
func WriteResponse(w io.Writer, r *Response) error {
	bw := bufio.NewWriterSize(w, bufferSize(r))
	e := &lineEncoder{w: bw}
	e.raw(`{"id":`)
	e.str(r.ID)
	e.fields(r, true)
	if e.err != nil {
		return e.err
	}
	return bw.Flush()
}

// fields writes r's fields after its id, each after its comma, and the
// line's end. With stdout false, it leaves out stdout and
// stdout_truncated (a [StdoutStream] wrote them).
func (e *lineEncoder) fields(r *Response, stdout bool) {
	e.raw(`,"status":`)
	e.str(r.Status)
	if r.Code != "" {
		e.raw(`,"code":`)
		e.str(r.Code)
	}
	if r.HasRun() {
		e.raw(`,"stages":[`)
		for i, s := range r.Stages {
			if i > 0 {
				e.raw(",")
			}
			e.raw(`{"exit_code":`)
			e.json(s.ExitCode)
			if s.Signal != "" {
				e.raw(`,"signal":`)
				e.str(s.Signal)
			}
			e.raw(`,"stderr":`)
			e.b64(s.Stderr, s.StderrChunks)
			if s.StderrTruncated {
				e.raw(`,"stderr_truncated":true`)
			}
			e.raw("}")
		}
		e.raw(`]`)
		if stdout {
			e.raw(`,"stdout":`)
			e.b64(r.Stdout, r.StdoutChunks)
			if r.StdoutTruncated {
				e.raw(`,"stdout_truncated":true`)
			}
		}
		if r.Usage != nil {
			e.raw(`,"usage":`)
			e.json(r.Usage)
		}
	}
	if r.Message != "" {
		e.raw(`,"message":`)
		e.str(r.Message)
	}
	if r.Approver != nil {
		e.raw(`,"approver":`)
		e.json(*r.Approver)
	}
	if r.Check != "" {
		e.raw(`,"check":`)
		e.str(r.Check)
	}
	if r.DecidedBy != nil {
		e.raw(`,"decided_by":`)
		e.json(r.DecidedBy)
	}
	if r.DaemonTime != "" {
		e.raw(`,"daemon_time":`)
		e.str(r.DaemonTime)
	}
	e.raw(`,"version":`)
	e.str(r.Version)
	e.raw("}\n")
}

// bufferSize is WriteResponse's buffer for r: the whole line when it is
// short, so a small answer costs one small allocation and one write;
// 64 KiB, for few large writes, when it is long.
func bufferSize(r *Response) int {
	n := len(r.ID) + len(r.Code) + len(r.Message) + len(r.Version) + 256
	if r.DecidedBy != nil {
		n += len(r.DecidedBy.Rule) + len(r.DecidedBy.Source) + len(r.DecidedBy.Approver) + 6*len(r.DecidedBy.Note) + 128
	}
	if r.HasRun() {
		n += base64.StdEncoding.EncodedLen(outputLen(r.Stdout, r.StdoutChunks))
		for _, s := range r.Stages {
			n += base64.StdEncoding.EncodedLen(outputLen(s.Stderr, s.StderrChunks)) + len(s.Signal) + 64
		}
	}
	return min(n, 64<<10)
}

// outputLen is the length of a stream held as b followed by chunks.
func outputLen(b []byte, chunks [][]byte) int {
	n := len(b)
	for _, c := range chunks {
		n += len(c)
	}
	return n
}

// lineEncoder keeps the first write error so WriteResponse reads straight.
type lineEncoder struct {
	w   *bufio.Writer
	err error
}

func (e *lineEncoder) raw(s string) {
	if e.err == nil {
		_, e.err = e.w.WriteString(s)
	}
}

func (e *lineEncoder) json(v any) {
	if e.err != nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		e.err = err
		return
	}
	_, e.err = e.w.Write(b)
}

func (e *lineEncoder) str(s string) { e.json(s) }

// b64 writes b followed by chunks as one base64 string. The encoder
// carries a chunk's last bytes over to the next, so chunks need not be
// multiples of 3 bytes.
func (e *lineEncoder) b64(b []byte, chunks [][]byte) {
	e.raw(`"`)
	if e.err != nil {
		return
	}
	enc := base64.NewEncoder(base64.StdEncoding, e.w)
	if _, err := enc.Write(b); err != nil {
		e.err = err
		return
	}
	for _, c := range chunks {
		if _, err := enc.Write(c); err != nil {
			e.err = err
			return
		}
	}
	e.err = enc.Close()
	e.raw(`"`)
}

// Outgoing is a request as a client writes it. Optional fields left at
// their zero value are omitted, so the daemon's defaults apply; Privileged
// is a pointer because its default (true) is not the zero value.
type Outgoing struct {
	ID           string            `json:"id,omitempty"`
	Host         string            `json:"host,omitempty"`
	Session      string            `json:"session,omitempty"`
	Time         string            `json:"time"`
	Action       string            `json:"action,omitempty"`
	Pipeline     [][]string        `json:"pipeline,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Reason       string            `json:"reason,omitempty"`
	Privileged   *bool             `json:"privileged,omitempty"`
	RunAs        string            `json:"run_as,omitempty"`
	RunAsGroup   string            `json:"run_as_group,omitempty"`
	ForwardAgent bool              `json:"forward_agent,omitempty"`
	EOFWithdraws bool              `json:"eof_withdraws,omitempty"`
	Check        bool              `json:"check,omitempty"`
	Progress     bool              `json:"progress,omitempty"`
	Stream       int               `json:"stream,omitempty"`
	Cwd          string            `json:"cwd,omitempty"`
	Stdin        []byte            `json:"stdin,omitempty"`
	Timeout      float64           `json:"timeout,omitempty"`
	Version      string            `json:"version,omitempty"`
}

// SanitizeNote makes a person's deny note fit to travel to the requester:
// invalid UTF-8, control, zero-width and bidi characters and runs of
// blanks become one space, the ends are trimmed, and at most
// [MaxNoteLen] characters are kept.
func SanitizeNote(s string) string {
	var b strings.Builder
	n := 0
	space := false
	for _, c := range strings.ToValidUTF8(s, " ") {
		if !termsafe.Rune(c) || unicode.IsSpace(c) {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			if n++; n > MaxNoteLen {
				break
			}
			b.WriteByte(' ')
		}
		space = false
		if n++; n > MaxNoteLen {
			break
		}
		b.WriteRune(c)
	}
	return strings.TrimRight(b.String(), " ")
}
