package approval

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// answerAfter answers d once release is closed, or Withdrawn with the
// cause when ctx ends first; it records the cause it saw.
type scripted struct {
	release chan struct{}
	d       Decision
	mu      sync.Mutex
	cause   string
	asked   bool
}

func (s *scripted) Approve(ctx context.Context, p *Prompt) Decision {
	s.mu.Lock()
	s.asked = true
	s.mu.Unlock()
	select {
	case <-s.release:
		return s.d
	case <-ctx.Done():
		s.mu.Lock()
		s.cause = context.Cause(ctx).Error()
		s.mu.Unlock()
		return Decision{Verdict: Withdrawn, Message: "request withdrawn"}
	}
}

func newScripted(v Verdict) *scripted {
	return &scripted{release: make(chan struct{}), d: Decision{Verdict: v, Message: v.String()}}
}

func prompt(uid int) *Prompt { return &Prompt{ID: "x", Requester: Requester{UID: uid}} }

func TestBrokerFirstAnswerWins(t *testing.T) {
	var b Broker
	a1, a2 := newScripted(Allow), newScripted(Deny)
	b.Attach(&Member{UID: 0, Name: "root on pts/1", Approver: a1})
	b.Attach(&Member{UID: 0, Name: "root on pts/2", Approver: a2})
	close(a1.release)
	d := b.Approve(context.Background(), prompt(1000))
	if d.Verdict != Allow {
		t.Fatalf("got %+v", d)
	}
	if a2.cause != "approved by root on pts/1" {
		t.Errorf("the other approver saw %q", a2.cause)
	}
}

func TestBrokerEligibility(t *testing.T) {
	var b Broker
	alice := newScripted(Allow)
	root := newScripted(Deny)
	// alice's own approver, and a root approver that alice's uid can
	// control (say, sudo rootgate approve in her tmux).
	detachAlice := b.Attach(&Member{UID: 1000, Name: "alice", Approver: alice, Controllers: []int{1000}})
	detachSudo := b.Attach(&Member{UID: 0, Name: "root via alice", Approver: root, Controllers: []int{0, 1000}})
	close(alice.release)
	close(root.release)
	// Neither is shown alice's request, and she is told why.
	d := b.Approve(context.Background(), prompt(1000))
	if want := wire.NoEligibleApproverError(1000, "").Error(); d.Verdict != Deny || d.Message != want || alice.asked || root.asked {
		t.Fatalf("got %+v, want %q; alice asked %v, root asked %v", d, want, alice.asked, root.asked)
	}
	if b.CanAsk(1000) {
		t.Error("CanAsk(1000) with only approvers uid 1000 controls")
	}
	// Another user's request goes to both; root's too (root gains nothing
	// by approving itself).
	if !b.CanAsk(1001) || !b.CanAsk(0) {
		t.Error("CanAsk false for a requester that controls no approver")
	}
	if d := b.Approve(context.Background(), prompt(1001)); d.Verdict != Allow && d.Verdict != Deny {
		t.Fatalf("got %+v", d)
	}
	// An approver alice cannot control decides her requests.
	detachAlice()
	detachSudo()
	other := newScripted(Deny)
	close(other.release)
	b.Attach(&Member{UID: 0, Name: "root", Approver: other, Controllers: []int{0}})
	if d := b.Approve(context.Background(), prompt(1000)); d.Verdict != Deny || d.Message != "deny" || !other.asked {
		t.Fatalf("got %+v", d)
	}
}

func TestBrokerUnsafeSelfApproval(t *testing.T) {
	b := Broker{UnsafeSelfApproval: true}
	var seen *Prompt
	b.Attach(&Member{UID: 0, Name: "root via alice", Controllers: []int{0, 1000}, Approver: approverFunc(func(_ context.Context, p *Prompt) Decision {
		seen = p
		return Decision{Verdict: Allow}
	})})
	if !b.CanAsk(1000) {
		t.Fatal("CanAsk(1000) false under UnsafeSelfApproval")
	}
	p := prompt(1000)
	d := b.Approve(context.Background(), p)
	if d.Verdict != Allow || !d.SelfApproval || seen == nil || !seen.SelfApproval {
		t.Fatalf("got %+v, prompt %+v", d, seen)
	}
	if p.SelfApproval {
		t.Error("the caller's prompt was marked")
	}
	if !strings.HasPrefix(Render(seen), "rootgate approval request\n"+SelfApprovalBanner) {
		t.Errorf("no banner:\n%s", Render(seen))
	}
	// Another user's request is asked without the mark.
	d = b.Approve(context.Background(), prompt(1001))
	if d.SelfApproval || seen.SelfApproval || strings.Contains(Render(seen), "UNSAFE") {
		t.Fatalf("marked a request of a uid that does not control the approver: %+v", d)
	}
}

// TestNoEligibleEscapesUser: the requester's user name in the answer
// is escaped, as everywhere it may reach a terminal.
func TestNoEligibleEscapesUser(t *testing.T) {
	var b Broker
	b.Attach(&Member{UID: 0, Name: "root via alice", Approver: newScripted(Allow), Controllers: []int{1000}})
	p := prompt(1000)
	p.Requester.User = "a\x1b[2Jb"
	d := b.Approve(context.Background(), p)
	if want := wire.NoEligibleApproverError(1000, `a\x1b[2Jb`).Error(); d.Message != want || d.Code != wire.CodeNoEligibleApprover {
		t.Errorf("got %q (%s), want %q", d.Message, d.Code, want)
	}
}

func TestBrokerNoMembers(t *testing.T) {
	var b Broker
	if d := b.Approve(context.Background(), prompt(1)); d.Verdict != Deny || d.Message != wire.ErrNoApprover.Error() || d.Code != wire.CodeNoApprover {
		t.Fatalf("got %+v", d)
	}
}

func TestBrokerTimeout(t *testing.T) {
	b := Broker{Timeout: 50 * time.Millisecond}
	a := newScripted(Allow)
	b.Attach(&Member{Name: "root", Approver: a})
	d := b.Approve(context.Background(), prompt(1))
	if d.Verdict != Expired || d.Message != "no approval decision within 50ms" {
		t.Fatalf("got %+v", d)
	}
	if a.cause != "timed out" {
		t.Errorf("approver saw %q", a.cause)
	}
}

func TestBrokerWithdrawn(t *testing.T) {
	var b Broker
	a := newScripted(Allow)
	b.Attach(&Member{Name: "root", Approver: a})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := b.Approve(ctx, prompt(1)); d.Verdict != Withdrawn {
		t.Fatalf("got %+v", d)
	}
}

func TestBrokerLeaversNeverApprove(t *testing.T) {
	var b Broker
	gone1, gone2 := newScripted(Unavailable), newScripted(Unavailable)
	gone1.d.Message = "approver disconnected"
	b.Attach(&Member{Name: "a", Approver: gone1})
	b.Attach(&Member{Name: "b", Approver: gone2})
	close(gone1.release)
	close(gone2.release)
	d := b.Approve(context.Background(), prompt(1))
	if d.Verdict != Deny || (d.Message != "every approver left before deciding (approver disconnected)" && d.Message != "every approver left before deciding (unavailable)") {
		t.Fatalf("got %+v", d)
	}
	// One leaves, the other still decides.
	var b2 Broker
	left, stays := newScripted(Unavailable), newScripted(Allow)
	b2.Attach(&Member{Name: "a", Approver: left})
	b2.Attach(&Member{Name: "b", Approver: stays})
	close(left.release)
	go func() {
		// Released once asked, or after the wait's bound, when the
		// Approve below fails the test if it was never asked.
		testutil.Poll(20*time.Second, func() bool {
			left.mu.Lock()
			defer left.mu.Unlock()
			return left.asked
		})
		close(stays.release)
	}()
	if d := b2.Approve(context.Background(), prompt(1)); d.Verdict != Allow {
		t.Fatalf("got %+v", d)
	}
	left.mu.Lock()
	defer left.mu.Unlock()
	if !left.asked {
		t.Fatal("the member that left was never asked")
	}
}

// TestBrokerNeverAsksOwnUID: a member is not asked about requests from its
// own uid even when whoever attached it left that uid out of Controllers.
func TestBrokerNeverAsksOwnUID(t *testing.T) {
	var b Broker
	a := newScripted(Allow)
	close(a.release) // answers at once when asked
	b.Attach(&Member{UID: 1000, Name: "alice on pts/1", Approver: a})
	if d := b.Approve(context.Background(), prompt(1000)); d.Verdict == Allow || a.asked {
		t.Fatalf("a member approved its own uid's request: %+v", d)
	}
	if d := b.Approve(context.Background(), prompt(1001)); d.Verdict != Allow {
		t.Fatalf("another uid's request: %+v", d)
	}
}

// TestBrokerRunAsEligibility: a request to run as an account that
// controls an approver is not put to it (the run could type the answer
// to the next request into it), nor counted against the requester; one
// run as root, or from root, is put to anyone; an account that
// controlled a member once is remembered after it detached.
func TestBrokerRunAsEligibility(t *testing.T) {
	var b Broker
	op := newScripted(Allow)
	close(op.release)
	// sudo rootgate approve in the operator's (uid 1000) tmux.
	detach := b.Attach(&Member{UID: 0, Name: "root via op", Approver: op, Controllers: []int{0, 1000}})
	runAs := func(requester int, uid uint32) *Prompt {
		p := prompt(requester)
		p.Named, p.RunAs = &NamedRun{UID: uid, GID: uid}, "op"
		return p
	}
	d := b.Approve(context.Background(), runAs(1001, 1000))
	if want := wire.NoEligibleApproverRunAsError(1000, "op").Error(); d.Verdict != Deny || d.Message != want || d.Code != wire.CodeNoEligibleApprover || op.asked {
		t.Fatalf("a run as the operator: got %+v, want %q; asked %v", d, want, op.asked)
	}
	// The requester's own control is told first.
	if d := b.Approve(context.Background(), runAs(1000, 1000)); d.Message != wire.NoEligibleApproverError(1000, "").Error() {
		t.Fatalf("the operator's own run as itself: %+v", d)
	}
	for _, p := range []*Prompt{runAs(1001, 1002), runAs(0, 1000), prompt(1001)} {
		op.asked = false
		if d := b.Approve(context.Background(), p); d.Verdict != Allow || !op.asked {
			t.Fatalf("requester %d, run as %+v: %+v", p.Requester.UID, p.Named, d)
		}
	}
	if !b.Controls(1000) || !b.Controls(0) || b.Controls(1001) {
		t.Error("Controls does not follow the member's controllers")
	}
	detach()
	if !b.Controls(1000) {
		t.Error("a detached member's controller is forgotten")
	}
	// A root approver the operator cannot control is asked.
	root := newScripted(Deny)
	close(root.release)
	b.Attach(&Member{UID: 0, Name: "root", Approver: root, Controllers: []int{0}})
	if d := b.Approve(context.Background(), runAs(1001, 1000)); d.Verdict != Deny || d.Message != "deny" || !root.asked {
		t.Fatalf("a run as the operator, root's approver attached: %+v", d)
	}
}
