package approval

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/wire"
)

// Member is an approver a [Broker] may ask, with the identity that decides
// which requests it may see.
type Member struct {
	UID      int    // the approver's uid (a terminal's owner, a client's peer uid)
	Name     string // for messages, e.g. "root on pts/3"
	Approver Approver
	Agent    string // the SSH agent socket this approver offers, or ""
	Via      string // how it is reached: "terminal" (the daemon's own), "remote"
	// Controllers are the uids that could drive or write this approver's
	// terminal or session (its process ancestry, login uid, SUDO_UID and
	// the owners of its terminals), sorted; see daemon.Controllers. A
	// request from one of them is not put to it.
	Controllers []int
}

// DefaultPromptTimeout is how long a request waits for an answer when
// [Broker.Timeout] is zero, and how long a [Terminal] or [Desktop] prompt
// waits when its own Timeout is.
const DefaultPromptTimeout = 60 * time.Second

// Broker asks every eligible member about a request at once; the first
// answer wins and the others are withdrawn with who decided. A member is
// eligible unless the requester's uid is among its Controllers (an agent
// could type the answer into a terminal its uid controls); a request from
// root may be put to anyone. The zero value has no members and the
// timeout [DefaultPromptTimeout].
type Broker struct {
	// Timeout bounds how long a request waits for an answer; 0 means
	// [DefaultPromptTimeout].
	Timeout time.Duration
	// UnsafeSelfApproval keeps members eligible whose Controllers include
	// the requester. Their prompts carry [Prompt.SelfApproval] (a banner
	// saying the requester could have typed the answer) and a decision
	// from one of them says so ([Decision.SelfApproval]). It guards
	// against mistakes only, never against a hostile requester.
	UnsafeSelfApproval bool

	mu      sync.Mutex // guards the fields that follow
	members map[*Member]struct{}
}

var _ Approver = (*Broker)(nil)

// Attach adds m; the returned function removes it again. Requests already
// being decided are not shown to a member attached after they began.
func (b *Broker) Attach(m *Member) (detach func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.members == nil {
		b.members = map[*Member]struct{}{}
	}
	b.members[m] = struct{}{}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.members, m)
	}
}

// Len reports how many members are attached.
func (b *Broker) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.members)
}

// eligible reports whether m, whose terminal or session the uids
// m.Controllers can drive, may decide about a request from requester:
// never when requester is m's own uid or among its controllers, except
// that root's requests may be put to anyone (root gains nothing by
// approving itself). m's own uid counts even when a caller left it out of
// Controllers.
func eligible(m *Member, requester int) bool {
	return requester == 0 || (m.UID != requester && !slices.Contains(m.Controllers, requester))
}

// asked is a member chosen for a request; unsafe when only
// UnsafeSelfApproval made it eligible.
type asked struct {
	m      *Member
	unsafe bool
}

// eligible lists the members that may decide about p: those the requester
// cannot control (see eligible), and for a forward_agent request only
// those offering an agent, since the approver's agent is what the run
// gets. controlled reports whether some member was left out only because
// the requester controls it.
func (b *Broker) eligible(p *Prompt) (ms []asked, controlled bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for m := range b.members {
		if p.ForwardAgent && m.Agent == "" {
			continue
		}
		if eligible(m, p.Requester.UID) {
			ms = append(ms, asked{m: m})
			continue
		}
		if b.UnsafeSelfApproval {
			ms = append(ms, asked{m: m, unsafe: true})
			continue
		}
		controlled = true
	}
	return ms, controlled
}

// CanAsk reports whether a member eligible for requester's requests is
// attached, so that a request the policy does not decide could be put to
// a person now.
func (b *Broker) CanAsk(requester int) bool {
	ms, _ := b.eligible(&Prompt{Requester: Requester{UID: requester}})
	return len(ms) > 0
}

// OffersAgent reports whether an approver eligible for requester offers an
// SSH agent.
func (b *Broker) OffersAgent(requester int) bool {
	ms, _ := b.eligible(&Prompt{ForwardAgent: true, Requester: Requester{UID: requester}})
	return len(ms) > 0
}

// Uninvolved lists controllers without root, for telling an approver whose
// requests it will not be asked about ("uid 1000 (alice)"); "" when none.
func Uninvolved(controllers []int, name func(int) string) string {
	var parts []string
	for _, u := range controllers {
		if u == 0 {
			continue
		}
		s := "uid " + strconv.Itoa(u)
		if n := name(u); n != "" && n != strconv.Itoa(u) {
			s += " (" + n + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

func (b *Broker) timeout() time.Duration {
	if b.Timeout > 0 {
		return b.Timeout
	}
	return DefaultPromptTimeout
}

// errExpired is the cause given to members when the broker's time is up.
var errExpired = errors.New("timed out")

// Approve implements [Approver]: Allow or Deny from the first member to
// answer; Expired when none answered in time; Withdrawn when ctx ended;
// Deny with [wire.ErrNoApprover] when no eligible member is attached,
// [wire.NoEligibleApproverError] when the requester controls every one, or
// [wire.ApproversLeftError] when all that were asked went away or could
// not ask.
func (b *Broker) Approve(ctx context.Context, p *Prompt) Decision {
	ms, controlled := b.eligible(p)
	if len(ms) == 0 {
		if controlled {
			return refusal(Deny, wire.NoEligibleApproverError(p.Requester.UID, termsafe.Sanitize(p.Requester.User)), "no eligible approver")
		}
		return Nobody{}.Approve(ctx, p)
	}
	timeout := b.timeout()
	askCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(timeout, func() { cancel(errExpired) })
	defer timer.Stop()

	type answer struct {
		a asked
		d Decision
	}
	answers := make(chan answer, len(ms))
	for _, a := range ms {
		pa := p
		if a.unsafe {
			c := *p
			c.SelfApproval = true
			pa = &c
		}
		go func() { answers <- answer{a, a.m.Approver.Approve(askCtx, pa)} }()
	}
	var winner *Decision
	var lastFailure string
	expired := false
	for range ms {
		a := <-answers
		switch a.d.Verdict {
		case Allow, Deny:
			if winner == nil {
				d := a.d
				d.Member = a.a.m
				d.SelfApproval = a.a.unsafe
				winner = &d
				verb := "approved"
				if d.Verdict == Deny {
					verb = "denied"
				}
				cancel(fmt.Errorf("%s by %s", verb, a.a.m.Name))
			}
		case Unavailable:
			lastFailure = a.d.Message
		case Expired:
			expired = true
		}
	}
	switch {
	case winner != nil:
		return *winner
	case ctx.Err() != nil:
		return Decision{Verdict: Withdrawn, Message: "request withdrawn", By: "requester"}
	case expired || errors.Is(context.Cause(askCtx), errExpired):
		return refusal(Expired, wire.PromptTimeoutError(timeout), "timeout")
	}
	return refusal(Deny, wire.ApproversLeftError(lastFailure), "no approver")
}

// refusal is a Decision of verdict v, by by, that tells the requester
// err's message and code.
func refusal(v Verdict, err error, by string) Decision {
	return Decision{Verdict: v, Message: err.Error(), Code: wire.CodeOf(err), By: by}
}
