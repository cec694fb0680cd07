// Package approval is what every decider shares: the [Decision] an
// [Approver] gives about a [Prompt] (a request described completely), the
// [Broker] that puts a prompt to every attached approver at once (the first
// answer wins), [Nobody] (no person can be asked, so the answer is no), and
// [Render], the one text of a prompt every approver shows. The deciders are
// packages of their own: policy (the operator's standing rules),
// approval/terminal (a form on a terminal), approval/desktop (a desktop
// notification or dialog) and approval/remote (approver clients attached to
// the daemon). This package knows nothing about the daemon's sockets or the
// pipelines it runs, and links no terminal or D-Bus library.
package approval

import (
	"context"
	"errors"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// Verdict is the outcome of asking.
type Verdict int

const (
	// Deny refuses the request. It is the zero value, so a Decision nobody
	// filled in refuses.
	Deny Verdict = iota
	// Allow lets the request run.
	Allow
	// Expired means no decision was made in time.
	Expired
	// Withdrawn means the request went away (its context ended) before
	// anyone decided.
	Withdrawn
	// Unavailable means this approver could not ask at all (its terminal
	// or dialog failed). It decides nothing: others may still answer, and
	// where no one can, the request is denied with Message.
	Unavailable
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Expired:
		return "timeout"
	case Withdrawn:
		return "withdrawn"
	case Unavailable:
		return "unavailable"
	}
	return "deny"
}

// Decision is an approver's answer.
type Decision struct {
	Verdict Verdict
	// Message is the one sentence the requester is told when the verdict is
	// not Allow (e.g. "denied by operator root on /dev/pts/3").
	Message string
	// Code, where the decider knows it, is the response's code for a
	// verdict that is not Allow (wire.Code*); empty lets the daemon choose
	// by the verdict.
	Code string
	// By says who decided, for the audit trail (e.g. "tty /dev/pts/3",
	// "policy /etc/rootgate/policy:4").
	By string
	// Agent, on an Allow from an approver that offers its SSH agent, is
	// that agent; a forward_agent run relays to it.
	Agent *AgentOffer `json:"-"`
	// After, when set, is told the request's outcome once it has run (an
	// attached approver shows it to the operator).
	After Outcomer `json:"-"`
	// Member, on an Allow or Deny from a [Broker], is the member who gave
	// it (its uid and where it asks), for the audit trail.
	Member *Member `json:"-"`
	// SelfApproval is set when Member was only asked because the broker's
	// UnsafeSelfApproval is on: the requester could have typed the answer.
	SelfApproval bool `json:"-"`
	// Note, on a Deny from a person, is what they typed for the requester
	// to read (wire.SanitizeNote applies before it is sent), or "".
	Note string `json:"-"`
	// Grant, on an Allow from a person, asks for a standing grant: the
	// daemon allows requests of the same shape from the same requester
	// without asking, for this long ([MaxGrant] at most). See [Grantable].
	Grant time.Duration `json:"-"`
	// Rule, on an Allow from a person, is the policy rule they confirmed
	// to save ([CheckRule]): the daemon checks it again, appends it to its
	// policy's drop-in [RuleDropIn] and reloads the policy.
	Rule string `json:"-"`
	// Group, when more than 1, says the decision answered that many
	// identical requests at once ([Prompt.Group]); GroupOf is then the id
	// of the request whose prompt was shown, or "" for that one.
	Group   int    `json:"-"`
	GroupOf string `json:"-"`
	// Passkey, on an Allow from a [Member] that is Signed, is the
	// assertion the daemon checked, for the audit trail.
	Passkey *PasskeyProof `json:"-"`
}

// PasskeyProof is an approval's passkey assertion as the daemon checked
// it: the passkey, what its challenge was made of (see passkey.Challenge)
// and the signed data, each base64url.
type PasskeyProof struct {
	Credential        string // the credential id
	Name              string // the passkey's name
	Hash              string // the prompt's request hash
	Nonce             string
	Grant             int64 // seconds of a standing grant signed for, or 0
	GrantRunsAnything bool
	AuthenticatorData string
	ClientData        string
	Signature         string
	UserHandle        string
}

// AgentOffer is an SSH agent an approver offers: its socket, and the
// identity of the approver process, which the daemon connects with.
type AgentOffer struct {
	Socket   string
	UID, GID uint32
	Groups   []uint32
}

// An Outcomer is told how a decided request ended, in one line.
type Outcomer interface {
	Outcome(id, line string)
}

// Requester is the peer that sent the request, as the kernel reported it.
type Requester struct {
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	PID  int    `json:"pid"`
	User string `json:"user"` // user name of UID, or the number when unknown
	Exe  string `json:"exe"`  // /proc/PID/exe at accept, "" when unreadable
	// ExeOwnNamespace is set when the requester runs in a mount
	// namespace other than the daemon's (or one the daemon cannot
	// compare): Exe is then a path in its own namespace, where it may have
	// mounted anything over /usr/bin/apt-get, so it names no file the
	// daemon or the approver knows.
	ExeOwnNamespace bool `json:"exe_own_namespace,omitempty"`
}

// Stage is one command of the pipeline as it will run.
type Stage struct {
	Argv   []string `json:"argv"`   // as requested; Argv[0] as written
	Path   string   `json:"path"`   // resolved absolute path that will be executed
	Target string   `json:"target"` // the real path of the file that runs, when it differs from Path, else ""
	// Content is set when someone other than root may change the file
	// (or which file Path leads to): the daemon captured its bytes when
	// the request was received, and the run executes exactly those.
	Content *Content `json:"content,omitempty"`
	// Uncaptured is set when the file had to be captured for the run
	// (as Content) but could not be: neither the run's identity nor the
	// requester's may read it. What runs is then what the file holds
	// when the run starts, which others than root may change; no
	// standing grant or rule runs it unasked.
	Uncaptured bool `json:"uncaptured,omitempty"`
	// Is, set by the daemon, is the path of a listed program ([Listed])
	// on this machine that the file that runs is, found by what the file
	// is rather than by its names: the same file (a hard link) or a copy
	// of it (the same size and SHA-256). It is set only when none of the
	// stage's names is listed: for a root copy of python3.12 named
	// mytool, "/usr/bin/python3.12".
	Is string `json:"is,omitempty"`
	// Interpreters, set by the daemon, are the interpreters the kernel
	// runs for a #! script, in turn: the one its #! line names, then
	// that one's when it is a script too (never the ELF loader). The
	// stage is those programs run with the script as an argument.
	Interpreters []Interpreter `json:"interpreters,omitempty"`
}

// Interpreter is one interpreter of a #! script ([Stage.Interpreters]).
type Interpreter struct {
	Path string `json:"path"` // as the #! line names it
	// Is is [Stage.Is] for the interpreter: the listed program it is when
	// Path's name is not listed (a link or a copy under another name).
	Is string `json:"is,omitempty"`
}

// Content is a stage's captured file, as the daemon read it.
type Content struct {
	SHA256 string `json:"sha256"` // of all of it, lowercase hex
	Size   int64  `json:"size"`
	// Text is its first ContentShownBytes bytes when it is a script
	// (not an ELF image), to show; Whole says that is all of it.
	Text  []byte `json:"text,omitempty"`
	Whole bool   `json:"whole,omitempty"`
	// Beside names the script's directory when someone other than root
	// may change what is in it: files the script reads or runs from
	// there are theirs to change, after the approval too.
	Beside string `json:"beside,omitempty"`
}

// ContentShownBytes is how much of a captured script a prompt shows.
const ContentShownBytes = 64 << 10

// Prompt is everything an approver is shown about a request. Every string
// in it except Path/Target comes from the requester and must be displayed
// literally and escaped. Its JSON form travels to attached approvers.
type Prompt struct {
	ID         string    `json:"id"`
	Host       string    `json:"host"`
	Session    string    `json:"session"`
	Version    string    `json:"version"` // client's version
	Time       time.Time `json:"time"`
	Reason     string    `json:"reason"`
	Requester  Requester `json:"requester"`
	Stages     []Stage   `json:"stages"`
	Privileged bool      `json:"privileged"`
	RunAs      string    `json:"run_as"` // user name the run will have
	Cwd        string    `json:"cwd"`
	// CwdOthers: someone other than root may change what is in Cwd, so
	// what a privileged run reads from there is theirs to change.
	CwdOthers    bool              `json:"cwd_others,omitempty"`
	Env          map[string]string `json:"env"`
	Stdin        []byte            `json:"stdin"`
	ForwardAgent bool              `json:"forward_agent"`
	RunTimeout   time.Duration     `json:"run_timeout"` // the run's time limit, in nanoseconds
	// Named is set when a privileged request names the account or the
	// group it runs as (run_as, run_as_group): the run has that
	// identity, and the prompt says so on its first line. RunAs is then
	// the account's name.
	Named *NamedRun `json:"named,omitempty"`
	// SelfApproval marks a prompt put to an approver the requester can
	// control, under the daemon's --unsafe-self-approval: the requester
	// could have typed the answer itself.
	SelfApproval bool `json:"self_approval,omitempty"`
	// Limits says how the run is contained and the limits that apply to
	// it, e.g. "memory 512M, tasks 100 (the run's own cgroup)"; "" when
	// the daemon did not say (one older than this field).
	Limits string `json:"limits,omitempty"`
	// Group, when more than 1, is how many identical requests (same
	// requester, same Shape) this one prompt decides: one answer runs or
	// refuses them all. The prompt shown is the first one's.
	Group int `json:"group,omitempty"`
	// Hint, when set, is the daemon's note on a standing grant or policy
	// rule that would have covered a near-identical request, and what
	// differs (one or two lines). It holds words of the requester's, so
	// it is escaped again before it is shown.
	Hint string `json:"hint,omitempty"`
	// NoGrant, set by the daemon, says why no standing grant may be made
	// for the request ([Grantable]): a privileged run's file whose
	// content could not be captured ([Stage.Uncaptured]), or an
	// interpreter of a privileged run that someone other than root may
	// change.
	NoGrant string `json:"no_grant,omitempty"`
	// ApproverPower, set by the daemon, says in words why the run is
	// root's equal although it is not root: the account (or group) it runs
	// as may approve rootgate requests, by controlling an attached
	// approver's terminal or session or by being admitted to attach one
	// (see [ApproverPowerLine]). Such a prompt is put only to approvers
	// the run's account cannot control, and no standing grant or rule may
	// be made from it. "" for any other run.
	ApproverPower string `json:"approver_power,omitempty"`
	// Shape identifies everything a standing grant must match about the
	// request (the daemon's grant shape, uid and time limit included) and
	// the requester's executable; "" for none. A [Broker] with
	// GroupWithin groups requests of the same Shape. It is not sent to
	// approvers.
	Shape string `json:"-"`
}

// NamedRun is the identity a request that names one runs with.
type NamedRun struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"` // the run's primary group
	// Group is run_as_group's group name, when the request named one.
	Group string `json:"group,omitempty"`
}

// An Approver decides about one request. Approve blocks until there is a
// decision or ctx ends; when ctx ends first (the requester went away or the
// daemon is stopping), it withdraws its prompt and returns Withdrawn.
type Approver interface {
	Approve(ctx context.Context, p *Prompt) Decision
}

// ApproverFunc adapts a function to [Approver].
type approverFunc func(ctx context.Context, p *Prompt) Decision

// Approve implements [Approver] by calling f.
func (f approverFunc) Approve(ctx context.Context, p *Prompt) Decision { return f(ctx, p) }

// WithdrawnMessage is what a requester whose request went away is told.
const WithdrawnMessage = "request withdrawn"

// ErrPromptTimeout is the cause of a prompt context that reached its
// prompt timeout.
var ErrPromptTimeout = errors.New("approval prompt timed out")

// Nobody is the Approver used when no person can be asked: it denies at once.
type Nobody struct{}

var _ Approver = Nobody{}

// Approve implements [Approver].
func (Nobody) Approve(context.Context, *Prompt) Decision {
	return refusal(Deny, wire.ErrNoApprover, "no approver")
}
