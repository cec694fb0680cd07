package approval

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Member is an approver a [Broker] may ask, with the identity that decides
// which requests it may see.
type Member struct {
	UID      int    // the approver's uid (a terminal's owner, a client's peer uid)
	Name     string // for messages, e.g. "root on pts/3"
	Approver Approver
	Agent    string // the SSH agent socket this approver offers, or ""
}

// Broker asks every eligible member about a request at once; the first
// answer wins and the others are withdrawn with who decided. A member is
// eligible unless its uid is the requester's (an agent could drive its own
// user's processes); root members are always eligible. The zero value has
// no members and a 60 s timeout.
type Broker struct {
	// Timeout bounds how long a request waits for an answer; 0 means 60s.
	Timeout time.Duration

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

// Eligible reports whether an approver with uid may decide about a request
// from requester.
func Eligible(approver, requester int) bool {
	return approver == 0 || approver != requester
}

// eligible lists the members that may decide about p: those of another
// uid (or root), and for a forward_agent request only those offering an
// agent, since the approver's agent is what the run gets.
func (b *Broker) eligible(p *Prompt) []*Member {
	b.mu.Lock()
	defer b.mu.Unlock()
	var ms []*Member
	for m := range b.members {
		if Eligible(m.UID, p.Requester.UID) && (!p.ForwardAgent || m.Agent != "") {
			ms = append(ms, m)
		}
	}
	return ms
}

// CanAsk reports whether a member eligible for requester's requests is
// attached, so that a request the policy does not decide could be put to
// a person now.
func (b *Broker) CanAsk(requester int) bool {
	return len(b.eligible(&Prompt{Requester: Requester{UID: requester}})) > 0
}

// OffersAgent reports whether an approver eligible for requester offers an
// SSH agent.
func (b *Broker) OffersAgent(requester int) bool {
	return len(b.eligible(&Prompt{ForwardAgent: true, Requester: Requester{UID: requester}})) > 0
}

func (b *Broker) timeout() time.Duration {
	if b.Timeout > 0 {
		return b.Timeout
	}
	return 60 * time.Second
}

// errExpired is the cause given to members when the broker's time is up.
var errExpired = errors.New("timed out")

// Approve implements [Approver]: Allow or Deny from the first member to
// answer; Expired when none answered in time; Withdrawn when ctx ended;
// Deny with [NoApproverMessage] when no eligible member is attached, or
// with "every approver left before deciding" when all that were asked
// went away or could not ask.
func (b *Broker) Approve(ctx context.Context, p *Prompt) Decision {
	ms := b.eligible(p)
	if len(ms) == 0 {
		return Nobody{}.Approve(ctx, p)
	}
	timeout := b.timeout()
	askCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(timeout, func() { cancel(errExpired) })
	defer timer.Stop()

	type answer struct {
		m *Member
		d Decision
	}
	answers := make(chan answer, len(ms))
	for _, m := range ms {
		go func() { answers <- answer{m, m.Approver.Approve(askCtx, p)} }()
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
				d.Member = a.m
				winner = &d
				verb := "approved"
				if d.Verdict == Deny {
					verb = "denied"
				}
				cancel(fmt.Errorf("%s by %s", verb, a.m.Name))
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
		return Decision{Verdict: Expired, Message: fmt.Sprintf("no approval decision within %ds", int(timeout.Round(time.Second)/time.Second)), By: "timeout"}
	}
	msg := "every approver left before deciding"
	if lastFailure != "" {
		msg += " (" + lastFailure + ")"
	}
	return Decision{Verdict: Deny, Message: msg, By: "no approver"}
}
