// Package approval decides whether a validated request may run.
//
// Three kinds of [Approver] live here: [Policy] (the operator's standing
// rules, see docs/policy.md), [Terminal] (a huh form on a terminal the
// daemon holds) and [Nobody] (no person can be asked, so the answer is no).
// The package knows nothing about sockets or processes: it is handed a
// [Prompt] that describes a request completely and answers with a
// [Decision].
package approval

import (
	"context"
	"time"
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
)

func (v Verdict) String() string {
	switch v {
	case Allow:
		return "allow"
	case Expired:
		return "timeout"
	case Withdrawn:
		return "withdrawn"
	}
	return "deny"
}

// Decision is an approver's answer.
type Decision struct {
	Verdict Verdict
	// Message is the one sentence the requester is told when the verdict is
	// not Allow (e.g. "denied by operator root on /dev/pts/3").
	Message string
	// By says who decided, for the audit trail (e.g. "tty /dev/pts/3",
	// "policy line 4").
	By string
}

// Requester is the peer that sent the request, as the kernel reported it.
type Requester struct {
	UID, GID, PID int
	User          string // user name of UID, or the number when unknown
	Exe           string // /proc/PID/exe at accept, "" when unreadable
}

// Stage is one command of the pipeline as it will run.
type Stage struct {
	Argv   []string // as requested; Argv[0] as written
	Path   string   // resolved absolute path that will be executed
	Target string   // where Path leads when it is a symlink, else ""
}

// Prompt is everything an approver is shown about a request. Every string
// in it except Path/Target comes from the requester and must be displayed
// literally and escaped.
type Prompt struct {
	ID           string
	Host         string
	Session      string
	Version      string // client's version
	Time         time.Time
	Reason       string
	Requester    Requester
	Stages       []Stage
	Privileged   bool
	RunAs        string // user name the run will have
	Cwd          string
	Env          map[string]string
	Stdin        []byte
	ForwardAgent bool
	RunTimeout   time.Duration // the run's time limit
}

// An Approver decides about one request. Approve blocks until there is a
// decision or ctx ends; when ctx ends first (the requester went away or the
// daemon is stopping), it withdraws its prompt and returns Withdrawn.
type Approver interface {
	Approve(ctx context.Context, p *Prompt) Decision
}

// NoApproverMessage is the protocol's text for a request no one can be asked
// about.
const NoApproverMessage = `no approver attached: run "sudo rootgate approve" in a terminal`

// Nobody is the Approver used when no person can be asked: it denies at once.
type Nobody struct{}

var _ Approver = Nobody{}

// Approve implements [Approver].
func (Nobody) Approve(context.Context, *Prompt) Decision {
	return Decision{Verdict: Deny, Message: NoApproverMessage, By: "no approver"}
}
