package approval

import (
	"context"
	"sync"
	"testing"
	"time"
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
	detachAlice := b.Attach(&Member{UID: 1000, Name: "alice", Approver: alice})
	detach := b.Attach(&Member{UID: 0, Name: "root", Approver: root})
	close(alice.release)
	close(root.release)
	// alice never sees her own request; root decides it.
	if d := b.Approve(context.Background(), prompt(1000)); d.Verdict != Deny || alice.asked {
		t.Fatalf("got %+v, alice asked %v", d, alice.asked)
	}
	// Without root, nobody eligible is left for alice's request.
	detach()
	if d := b.Approve(context.Background(), prompt(1000)); d.Verdict != Deny || d.Message != NoApproverMessage {
		t.Fatalf("got %+v", d)
	}
	// Root approvers may approve root's requests (alice, who may too, is
	// detached so that root's answer is the only one).
	detachAlice()
	b.Attach(&Member{UID: 0, Name: "root", Approver: root})
	if d := b.Approve(context.Background(), prompt(0)); d.Verdict != Deny || d.Message != "deny" {
		t.Fatalf("got %+v", d)
	}
}

func TestBrokerNoMembers(t *testing.T) {
	var b Broker
	if d := b.Approve(context.Background(), prompt(1)); d.Verdict != Deny || d.Message != NoApproverMessage {
		t.Fatalf("got %+v", d)
	}
}

func TestBrokerTimeout(t *testing.T) {
	b := Broker{Timeout: 50 * time.Millisecond}
	a := newScripted(Allow)
	b.Attach(&Member{Name: "root", Approver: a})
	d := b.Approve(context.Background(), prompt(1))
	if d.Verdict != Expired || d.Message != "no approval decision within 0s" {
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
		for {
			left.mu.Lock()
			asked := left.asked
			left.mu.Unlock()
			if asked {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(stays.release)
	}()
	if d := b2.Approve(context.Background(), prompt(1)); d.Verdict != Allow {
		t.Fatalf("got %+v", d)
	}
}
