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
	// Signed: every approval from this member carries a passkey's
	// assertion over the request, which the daemon checks before the
	// approval reaches the broker (a passkey relay, `rootgate web`). No
	// uid controlling its session can make that signature, so it is
	// eligible for every requester; what it can do alone is deny.
	Signed bool
}

// DefaultPromptTimeout is how long a request waits for an answer when
// [Broker.Timeout] is zero, and how long a [Terminal] or [Desktop] prompt
// waits when its own Timeout is.
const DefaultPromptTimeout = 60 * time.Second

// DefaultGroupWithin is how long rootgated gathers identical requests
// into one prompt ([Broker].GroupWithin).
const DefaultGroupWithin = 300 * time.Millisecond

// Broker asks every eligible member about a request at once; the first
// answer wins and the others are withdrawn with who decided. A member is
// eligible unless the requester's uid is among its Controllers (an agent
// could type the answer into a terminal its uid controls), or the uid of
// the account a request names to run as (other than root) is (the run
// could type the answer to the next request); a request from root may be
// put to anyone. The zero value has no members and the
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
	// GroupWithin, when positive, groups prompts: a request whose
	// [Prompt.Shape] is set waits this long before it is put to anyone,
	// and every request of the same shape that arrives meanwhile joins
	// it. The group is shown once, its [Prompt.Group] saying how many it
	// holds, and the one answer decides them all. A request of that shape
	// arriving once the prompt is out is not covered by it: it starts a
	// group of its own, asked after.
	GroupWithin time.Duration
	// OnChange, when set, is called whenever a request starts or stops
	// waiting for a person, without the broker's lock held.
	OnChange func()

	mu      sync.Mutex // guards the fields that follow
	members map[*Member]struct{}
	// controlled holds every uid that could control a member attached
	// since the broker began (its Controllers and its UID): an account
	// that could control an approver once is taken to be able to again
	// (the operator detaches and reattaches in the same tmux).
	controlled map[int]bool
	open       map[string]*group   // groups still gathering, by shape
	waiting    map[*group]struct{} // groups waiting for a person
}

// A group is one prompt and the requests it decides: one, or several of
// the same shape gathered within GroupWithin.
type group struct {
	p     *Prompt // the first request's still in it: the one shown
	shape string
	since time.Time
	ps    []*Prompt // the requests in it, the first one first
	live  int       // how many of them still wait for its decision
	open  bool      // still gathering: a request of its shape joins it
	count int       // how many the prompt said it decides (set before done closes)

	ctx    context.Context // ends when the last request in it goes away
	cancel context.CancelCauseFunc
	done   chan struct{} // closed once d is set
	d      Decision
}

// Waiting is a request (or a group of identical ones) waiting for a
// person, as [Broker.Waiting] lists it.
type Waiting struct {
	Prompt *Prompt   // the one shown
	Since  time.Time // when the first of them arrived
	Count  int       // how many requests it holds
}

// Waiting lists the requests waiting for a person now, oldest first.
func (b *Broker) Waiting() []Waiting {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Waiting, 0, len(b.waiting))
	for g := range b.waiting {
		out = append(out, Waiting{Prompt: g.p, Since: g.since, Count: max(len(g.ps), g.count)})
	}
	slices.SortFunc(out, func(a, b Waiting) int { return a.Since.Compare(b.Since) })
	return out
}

func (b *Broker) changed() {
	if b.OnChange != nil {
		b.OnChange()
	}
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
	if b.controlled == nil {
		b.controlled = map[int]bool{}
	}
	b.controlled[m.UID] = true
	for _, u := range m.Controllers {
		b.controlled[u] = true
	}
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		delete(b.members, m)
	}
}

// Controls reports whether uid could control the terminal or session of
// a member attached now or since the broker began (its own uid counts),
// and so could answer that member's prompts.
func (b *Broker) Controls(uid int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.controlled[uid]
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

// controls reports whether uid could drive or write m's terminal or
// session: m's own uid, or one of its controllers.
func controls(m *Member, uid int) bool {
	return m.UID == uid || slices.Contains(m.Controllers, uid)
}

// runUID is the uid of p's run when it names an account other than root
// and the requester is not root, else -1: such a run must not be put to
// an approver its account controls, or the run could type the answer to
// the next request into it ([Prompt.ApproverPower]). A run as root is
// root's own: every approver is root's to control anyway.
func runUID(p *Prompt) int {
	if p.Requester.UID == 0 || p.Named == nil || p.Named.UID == 0 {
		return -1
	}
	return int(p.Named.UID)
}

// asked is a member chosen for a request; unsafe when only
// UnsafeSelfApproval made it eligible.
type asked struct {
	m      *Member
	unsafe bool
}

// Why a member was left out of a request's eligible ones.
const (
	leftNone      = iota
	leftRequester // the requester controls it
	leftRun       // the account the request runs as controls it
)

// eligible lists the members that may decide about p: those neither the
// requester nor the account a named run runs as can control (see
// eligible and runUID), and for a forward_agent request only those
// offering an agent, since the approver's agent is what the run gets.
// left says why a member was left out when one was only because such a
// uid controls it: leftRequester before leftRun.
func (b *Broker) eligible(p *Prompt) (ms []asked, left int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	run := runUID(p)
	for m := range b.members {
		if p.ForwardAgent && m.Agent == "" {
			continue
		}
		why := leftNone
		switch {
		case m.Signed:
		case !eligible(m, p.Requester.UID):
			why = leftRequester
		case run >= 0 && controls(m, run):
			why = leftRun
		}
		if why == leftNone {
			ms = append(ms, asked{m: m})
			continue
		}
		if b.UnsafeSelfApproval {
			ms = append(ms, asked{m: m, unsafe: true})
			continue
		}
		if left == leftNone || why < left {
			left = why
		}
	}
	return ms, left
}

// noEligible is the refusal of p when every member was left out, left
// saying why (see eligible).
func noEligible(p *Prompt, left int) Decision {
	if left == leftRun {
		return refusal(Deny, wire.NoEligibleApproverRunAsError(int(p.Named.UID), termsafe.Sanitize(p.RunAs)), "no eligible approver")
	}
	return refusal(Deny, wire.NoEligibleApproverError(p.Requester.UID, termsafe.Sanitize(p.Requester.User)), "no eligible approver")
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
// not ask. A request decided with others of its shape (GroupWithin) gets
// the group's decision with [Decision.Group] set, and [Decision.GroupOf]
// naming the request shown unless it is that one.
func (b *Broker) Approve(ctx context.Context, p *Prompt) Decision {
	if d, ok := b.NoneToAsk(p); ok {
		return d
	}
	grouping := b.GroupWithin > 0 && p.Shape != ""
	b.mu.Lock()
	var g *group
	if grouping {
		g = b.open[p.Shape]
	}
	first := g == nil
	if first {
		// The group's asking outlives the request that opened it while
		// others in it still wait.
		gctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		g = &group{p: p, shape: p.Shape, since: time.Now(), open: grouping, ctx: gctx, cancel: cancel, done: make(chan struct{})}
		if grouping {
			if b.open == nil {
				b.open = map[string]*group{}
			}
			b.open[p.Shape] = g
		}
		if b.waiting == nil {
			b.waiting = map[*group]struct{}{}
		}
		b.waiting[g] = struct{}{}
	}
	g.ps = append(g.ps, p)
	g.live++
	b.mu.Unlock()
	b.changed()
	if first {
		go b.decideGroup(g)
	}
	select {
	case <-g.done:
	case <-ctx.Done():
		select {
		case <-g.done: // decided as the request went away: the decision stands
		default:
			b.leave(ctx, g, p)
			return Decision{Verdict: Withdrawn, Message: WithdrawnMessage, By: "requester"}
		}
	}
	d := g.d
	if g.count > 1 {
		d.Group = g.count
		if p != g.p {
			d.GroupOf = g.p.ID
		}
	}
	return d
}

// NoneToAsk returns the refusal for a request no member may be asked
// about now, and true; or false. The daemon asks it before it records a
// request, which then reaches no person; [Broker.Approve] asks again
// itself, as members come and go, and decides.
func (b *Broker) NoneToAsk(p *Prompt) (Decision, bool) {
	ms, left := b.eligible(p)
	switch {
	case len(ms) > 0:
		return Decision{}, false
	case left != leftNone:
		return noEligible(p, left), true
	}
	return Nobody{}.Approve(context.Background(), p), true
}

// leave takes request p, whose context ctx ended, out of g: while g
// gathers it no longer counts (and if it was to be shown, the next one
// is); once the last request in g has gone, g's prompt is withdrawn.
func (b *Broker) leave(ctx context.Context, g *group, p *Prompt) {
	b.mu.Lock()
	if g.open {
		if i := slices.Index(g.ps, p); i >= 0 {
			g.ps = slices.Delete(g.ps, i, i+1)
		}
		if g.p == p && len(g.ps) > 0 {
			g.p = g.ps[0]
		}
	}
	g.live--
	last := g.live == 0
	b.mu.Unlock()
	if last {
		g.cancel(context.Cause(ctx))
	}
	b.changed()
}

// decideGroup gathers g for GroupWithin, puts it to the members and
// hands the decision to the requests in it.
func (b *Broker) decideGroup(g *group) {
	if g.open {
		t := time.NewTimer(b.GroupWithin)
		select {
		case <-t.C:
		case <-g.ctx.Done():
			t.Stop()
		}
	}
	b.mu.Lock()
	if g.open {
		g.open = false
		if b.open[g.shape] == g {
			delete(b.open, g.shape)
		}
	}
	n := len(g.ps)
	g.count = n
	p := g.p
	b.mu.Unlock()
	if n > 1 {
		c := *p
		c.Group = n
		p = &c
	}
	var d Decision
	if n == 0 { // every request in it went away while it gathered
		d = Decision{Verdict: Withdrawn, Message: WithdrawnMessage, By: "requester"}
	} else if d2, ok := b.NoneToAsk(p); ok {
		d = d2
	} else {
		d = b.ask(g.ctx, p)
	}
	b.mu.Lock()
	g.d = d
	delete(b.waiting, g)
	b.mu.Unlock()
	close(g.done)
	g.cancel(nil)
	b.changed()
}

// ask puts p to every eligible member at once and returns the first
// answer (see Approve).
func (b *Broker) ask(ctx context.Context, p *Prompt) Decision {
	ms, left := b.eligible(p)
	if len(ms) == 0 {
		if left != leftNone {
			return noEligible(p, left)
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
