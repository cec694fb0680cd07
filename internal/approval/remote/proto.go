package remote

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/wire"
)

// The approver protocol (docs/protocol.md, "Approver protocol"): one JSON
// object per line in both directions between rootgated and an attached
// approver client on the approver socket.

// ProtoVersion is the approver protocol's version.
const ProtoVersion = 1

// Line size caps. A prompt carries a whole request (up to 1 MiB of JSON,
// base64 stdin growing it by a third), so daemon lines may be larger than
// request lines; an approver has only short things to say.
const (
	MaxDaemonLine   = 4 << 20
	MaxApproverLine = 64 << 10
)

// Message types.
const (
	MsgHello    = "hello"    // approver → daemon, first line
	MsgWelcome  = "welcome"  // daemon → approver, reply to hello
	MsgError    = "error"    // daemon → approver: refused (then closed) or a line refused
	MsgPrompt   = "prompt"   // daemon → approver: decide about Request
	MsgWithdraw = "withdraw" // daemon → approver: the prompt ID is gone (Reason says why)
	MsgDecision = "decision" // approver → daemon: the answer to prompt ID
	MsgResult   = "result"   // daemon → approver: how an approved request ended
	MsgPing     = "ping"     // daemon → approver, keep-alive
	MsgPong     = "pong"     // approver → daemon, reply to ping
	// A connection may instead open with one of these, and is answered
	// once and closed: it lists or revokes standing grants.
	MsgGrants  = "grants"  // client → daemon: list; daemon → client: the list (Grants, Hidden)
	MsgRevoke  = "revoke"  // client → daemon: revoke grant ID
	MsgRevoked = "revoked" // daemon → client: grant ID was revoked
	// MsgStatus, daemon → approver, to an approver whose hello offered
	// CapStatus: what its idle screen shows (Queue, Grants, Hidden,
	// Decisions), sent after the welcome and again whenever it changes.
	MsgStatus = "status"
	// MsgNonce, daemon → passkey relay: prompt ID's nonce was used by a
	// refused assertion; Nonce is its new one.
	MsgNonce = "nonce"
	// MsgAccepted, daemon → passkey relay: its decision about prompt ID
	// was taken (a refused one is answered with an error naming ID).
	MsgAccepted = "accepted"
	// MsgPasskeys, daemon → passkey relay: the enrolled passkeys changed
	// (Reason says how); RPID and Credentials are the new ones.
	MsgPasskeys = "passkeys"
	// Passkey changes, root only, each on a connection of its own
	// (docs/protocol.md, "Passkeys"): enrol (Name, Origin) is answered
	// enrol_options (Options, Challenge, Confirm, Credentials), then the
	// client sends enrol_attest (Attestation: the credential the browser
	// created) and is answered enrol_attested (ID, Fingerprint, AAGUID,
	// and when Confirm the Challenge an enrolled passkey signs:
	// passkey.EnrolChallenge, over that credential), then sends
	// enrol_finish (Assertion when Confirm, ConsoleConfirmed when not) and
	// is answered enrolled (ID) or error; passkey_remove (ID) is answered
	// passkey_removed; passkey_import (Data) passkey_imported.
	MsgEnrol           = "enrol"
	MsgEnrolOptions    = "enrol_options"
	MsgEnrolAttest     = "enrol_attest"
	MsgEnrolAttested   = "enrol_attested"
	MsgEnrolFinish     = "enrol_finish"
	MsgEnrolled        = "enrolled"
	MsgPasskeyRemove   = "passkey_remove"
	MsgPasskeyRemoved  = "passkey_removed"
	MsgPasskeyImport   = "passkey_import"
	MsgPasskeyImported = "passkey_imported"
)

// Capabilities an approver client may offer in its hello besides how it
// asks ("terminal", "desktop") and "forward-agent".
const (
	// CapStatus: send it status messages for its idle screen.
	CapStatus = "status"
	// CapGroup: it shows a prompt's group count (approval.Prompt.Group).
	// A client without it is not put a grouped prompt.
	CapGroup = "group"
	// CapPasskey: it is a passkey relay (`rootgate web`). Its prompts
	// carry a nonce, it is asked about every requester's requests, and
	// each approval it sends must carry a passkey assertion that the
	// daemon verifies (docs/security.md, "Approving with a passkey").
	CapPasskey = "passkey"
)

// StatusDecisions is how many of the last decisions a status message
// carries, and StatusItems how many queued requests and grants at most.
const (
	StatusDecisions = 10
	StatusItems     = 50
)

// Message is one line of the approver protocol. Only the fields of its
// Type are set.
type Message struct {
	Type string `json:"type"`

	// hello
	Version      int      `json:"version,omitempty"`
	Client       string   `json:"client,omitempty"`       // approver client's version
	Name         string   `json:"name,omitempty"`         // where it prompts, e.g. "pts/3" or "desktop"
	Capabilities []string `json:"capabilities,omitempty"` // "terminal", "desktop", "forward-agent"
	AgentSocket  string   `json:"agent_socket,omitempty"` // the SSH agent it offers

	// welcome
	Daemon        string  `json:"daemon,omitempty"`         // daemon's version
	PromptTimeout float64 `json:"prompt_timeout,omitempty"` // seconds
	// NotAsked are the uids whose requests this approver is never shown:
	// they can control its terminal or session. SelfApproval says the
	// daemon shows them anyway (--unsafe-self-approval), with a banner.
	NotAsked     []int `json:"not_asked,omitempty"`
	SelfApproval bool  `json:"self_approval,omitempty"`
	// StandingGrants says the daemon keeps standing grants: a decision
	// may carry one.
	StandingGrants bool `json:"standing_grants,omitempty"`
	// RuleFile is the policy drop-in where the daemon saves a rule a
	// decision carries; "" (omitted): it saves none (it has no policy
	// file), and refuses a decision that carries one.
	RuleFile string `json:"rule_file,omitempty"`
	// Hostname is the daemon's own host name (its uname nodename, in its
	// UTS namespace): the machine its prompts' commands run on. An
	// approver client shows it on every prompt from this daemon; the
	// request's own host is only the requester's word.
	Hostname string `json:"hostname,omitempty"`
	// PingEvery is how often, in seconds, the daemon pings this approver;
	// the client drops a daemon silent for [DaemonSilentPings] times as
	// long.
	PingEvery float64 `json:"ping_every,omitempty"`

	// welcome to a passkey relay, and enrol_options: the RP ID and the
	// enrolled credential ids, for navigator.credentials.get.
	RPID        string   `json:"rp_id,omitempty"`
	Credentials []string `json:"credentials,omitempty"`

	// prompt, to a passkey relay, and nonce: the nonce the approval's
	// challenge must hold (passkey.Challenge).
	Nonce string `json:"nonce,omitempty"`
	// decision, approving, from a passkey relay; enrol_finish, when the
	// enrolment must be confirmed: a passkey's assertion.
	Assertion *passkey.Assertion `json:"assertion,omitempty"`
	// enrol: the page origin the passkey is enrolled for (Name is its
	// name). enrol_options: the creation options (JSON) for
	// navigator.credentials.create, their challenge, and whether an
	// enrolled passkey must confirm. enrol_attest: the created credential
	// (JSON). enrol_attested: the new credential (ID), its fingerprint
	// (passkey.Fingerprint), its authenticator's AAGUID when it gave one,
	// and when Confirm the challenge (base64url) an enrolled passkey must
	// sign (passkey.EnrolChallenge). enrol_finish, for a first passkey:
	// root confirmed that fingerprint on the terminal of the enrolling
	// process. passkey_import: a passkeys file.
	Origin           string `json:"origin,omitempty"`
	Options          string `json:"options,omitempty"`
	Challenge        string `json:"challenge,omitempty"`
	Confirm          bool   `json:"confirm,omitempty"`
	Attestation      string `json:"attestation,omitempty"`
	Fingerprint      string `json:"fingerprint,omitempty"`
	AAGUID           string `json:"aaguid,omitempty"`
	ConsoleConfirmed bool   `json:"console_confirmed,omitempty"`
	Data             string `json:"data,omitempty"`

	// prompt, withdraw, decision, result
	ID       string           `json:"id,omitempty"`
	Hash     string           `json:"hash,omitempty"`     // RequestHash of the prompt's request
	Deadline *time.Time       `json:"deadline,omitempty"` // prompt: when it times out
	Request  *approval.Prompt `json:"request,omitempty"`  // prompt
	Approve  *bool            `json:"approve,omitempty"`  // decision: true approves, false denies
	Reason   string           `json:"reason,omitempty"`   // withdraw: why, e.g. "approved by root on pts/4"
	Outcome  string           `json:"outcome,omitempty"`  // result: one line
	Note     string           `json:"note,omitempty"`     // decision, deny only: a short note for the requester
	// Grant, on a decision that approves: a standing grant for requests
	// of the same shape from the same requester, for this many seconds.
	// GrantRunsAnything confirms a grant for a request that runs an
	// interpreter or command runner ([approval.RunsAnything]): the person
	// was told and confirmed twice.
	Grant             int64 `json:"grant,omitempty"`
	GrantRunsAnything bool  `json:"grant_runs_anything,omitempty"`
	// Rule, on a decision that approves: a policy rule to save, which
	// must be one allow rule that matches the request
	// ([approval.CheckRule]). RuleRunsAnything confirms a rule for a
	// request that runs an interpreter or command runner, or an open
	// rule for find ([approval.RuleRunsAnything]): the person was told
	// and confirmed twice.
	Rule             string `json:"rule,omitempty"`
	RuleRunsAnything bool   `json:"rule_runs_anything,omitempty"`
	// grants (the daemon's answer): the standing grants this approver may
	// see, and how many others are held for requesters it is never asked
	// about.
	Grants []GrantInfo `json:"grants,omitempty"`
	Hidden int         `json:"hidden,omitempty"`
	// status: the requests waiting for a person and the last decisions
	// (newest first), of the requesters this approver may be asked
	// about; with Grants and Hidden as in a grants answer.
	Queue     []QueueItem    `json:"queue,omitempty"`
	Decisions []DecisionInfo `json:"decisions,omitempty"`
	// More counts the queued requests and grants a status leaves out to
	// stay small (it lists at most StatusItems of each).
	More int `json:"more,omitempty"`

	// error
	Message string `json:"message,omitempty"`
}

// GrantInfo is a standing grant as a grants answer lists it.
type GrantInfo struct {
	ID        string     `json:"id"`
	UID       int        `json:"uid"`  // the requester's
	User      string     `json:"user"` // its user name, or the number
	Pipeline  [][]string `json:"pipeline"`
	Paths     []string   `json:"paths"` // each stage's resolved executable
	RunAs     string     `json:"run_as"`
	Cwd       string     `json:"cwd"`
	Env       []string   `json:"env,omitempty"` // KEY=VALUE, sorted
	StdinSize int        `json:"stdin_bytes,omitempty"`
	Ends      time.Time  `json:"ends"`
	By        string     `json:"by"` // who gave it
	Uses      int        `json:"uses"`

	// RunAsGroup is the group the request named (run_as_group), which
	// the run gets as its primary group; "" when it named none.
	RunAsGroup string `json:"run_as_group,omitempty"`
}

// RunsAs is whom g's runs run as, for display, escaped: the account and
// the group the request named ("alice WITH GROUP shadow").
func (g *GrantInfo) RunsAs() string {
	as := termsafe.Sanitize(g.RunAs)
	if g.RunAsGroup != "" {
		as += " WITH GROUP " + termsafe.Sanitize(g.RunAsGroup)
	}
	return as
}

// QueueItem is a request (or a group of identical ones) waiting for a
// person, as a status message lists it.
type QueueItem struct {
	ID       string     `json:"id"`  // the requester's id for it
	UID      int        `json:"uid"` // the requester's
	User     string     `json:"user"`
	Pipeline [][]string `json:"pipeline"`
	Since    time.Time  `json:"since"`           // when it arrived
	Count    int        `json:"count,omitempty"` // identical requests it holds, when more than 1
}

// DecisionInfo is a decision as a status message lists it.
type DecisionInfo struct {
	ID       string     `json:"id"`
	UID      int        `json:"uid"`
	User     string     `json:"user"`
	Pipeline [][]string `json:"pipeline"`
	Time     time.Time  `json:"time"`
	Verdict  string     `json:"verdict"` // allow, deny, timeout, withdrawn, unavailable
	// By says who decided: "person root (uid 0) on pts/3", "rule
	// /etc/rootgate/policy:4", "grant g2", "timeout", "no approver", ...
	By    string `json:"by"`
	Count int    `json:"count,omitempty"` // the group's size, when one answer decided more than 1
}

// RequestHash is the SHA-256 of a prompt's JSON form, hex. A decision must
// carry it, so it can only answer the exact request that was shown.
func RequestHash(p *approval.Prompt) string {
	b, err := json.Marshal(p)
	if err != nil {
		panic("approval: prompt does not marshal: " + err.Error()) // only plain fields
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// messageShape is the keys a message may have: exactly the json names of
// Message's fields, and within a prompt's request those of Prompt.
var messageShape = wire.ShapeOf(reflect.TypeFor[Message]())

// ErrLineTooLong is returned by ReadMessage for a line over its cap.
var ErrLineTooLong = errors.New("message line too long")

// ReadMessage reads one message line of at most max bytes from r.
// Unknown fields are refused, so a peer speaking another version is told
// rather than misread; a key must be exactly a field's name (not another
// case or a Unicode fold of it) and given once, and no string may hold an
// escaped lone surrogate ([wire.CheckKeys]).
func ReadMessage(r *bufio.Reader, max int) (*Message, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > max {
			return nil, ErrLineTooLong
		}
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if errors.Is(err, io.EOF) && len(line) > 0 {
			return nil, io.ErrUnexpectedEOF
		}
		return nil, err
	}
	// {"approve":false,"approve":true} or {"approve":false,"Approve":true}
	// must not mean one thing to the daemon (whose decoder keeps the last
	// key and ignores case) and another to a person or a log reader.
	if err := wire.CheckKeys(line, messageShape); err != nil {
		return nil, fmt.Errorf("bad message: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var m Message
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("bad message: %w", err)
	}
	// Only JSON's own whitespace may follow (bytes.TrimSpace would also
	// pass \v, \f and Unicode spaces, which no JSON reader takes).
	if len(bytes.TrimLeft(line[dec.InputOffset():], " \t\r\n")) > 0 {
		return nil, errors.New("bad message: data after the message")
	}
	if m.Type == "" {
		return nil, errors.New("bad message: no type")
	}
	return &m, nil
}

// EncodeMessage returns m as one line, its newline included. It does not
// escape <, > and & as encoding/json does by default: an argument of a
// million '<' must not become a six-megabyte prompt.
func EncodeMessage(m *Message) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteMessage writes m as one line.
func WriteMessage(w io.Writer, m *Message) error {
	b, err := EncodeMessage(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// PromptLine returns the prompt message for p, as one line, and an error
// when the line is longer than an approver client reads ([MaxDaemonLine]).
// A request the daemon accepts (at most 1 MiB of valid UTF-8, at most 16
// stages) gives well under 4 MiB: a request string escapes to at most
// twice its size (U+2028 and U+2029 become \u2028), stdin stays base64, and
// the resolved paths and the requester's executable add at most 33 ×
// PATH_MAX bytes, six each when they are not UTF-8 (\ufffd).
// nonce, when not "", is the prompt's nonce for a passkey relay.
func PromptLine(p *approval.Prompt, deadline time.Time, nonce string) ([]byte, error) {
	b, err := EncodeMessage(&Message{Type: MsgPrompt, ID: p.ID, Hash: RequestHash(p), Deadline: &deadline, Request: p, Nonce: nonce})
	if err != nil {
		return nil, err
	}
	if len(b) > MaxDaemonLine {
		return nil, wire.PromptTooLargeError(len(b), MaxDaemonLine)
	}
	return b, nil
}

// RefusedError is a daemon's refusal to attach the client: retrying
// cannot help.
type RefusedError struct{ Message string }

// Error escapes the daemon's words: what answers on a socket (a forward's
// local end, say) need not be rootgated, and they go to the operator's
// terminal.
func (e *RefusedError) Error() string {
	return "rootgated refused this approver: " + termsafe.Sanitize(e.Message)
}
