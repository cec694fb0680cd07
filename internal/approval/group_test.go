package approval

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// shown is an approver that records the prompts it is shown and answers
// each with d once release is closed (Withdrawn when its ctx ends first).
type shown struct {
	release chan struct{}
	d       Decision
	mu      sync.Mutex
	prompts []*Prompt
	ended   []string // causes of the prompts withdrawn
}

func (s *shown) Approve(ctx context.Context, p *Prompt) Decision {
	s.mu.Lock()
	s.prompts = append(s.prompts, p)
	s.mu.Unlock()
	select {
	case <-s.release:
		return s.d
	case <-ctx.Done():
		s.mu.Lock()
		s.ended = append(s.ended, context.Cause(ctx).Error())
		s.mu.Unlock()
		return Decision{Verdict: Withdrawn}
	}
}

func (s *shown) asked() []*Prompt {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Prompt(nil), s.prompts...)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.WaitFor(t, what, 20*time.Second, cond)
}

func waitingCount(b *Broker) int {
	w := b.Waiting()
	if len(w) != 1 {
		return -len(w)
	}
	return w[0].Count
}

// A request that leaves while its group gathers is not counted; one that
// leaves once the prompt is out does not withdraw it from the others;
// only when all have left is the prompt withdrawn.
func TestBrokerGroupLeavers(t *testing.T) {
	b := &Broker{GroupWithin: 2 * time.Second}
	a := &shown{release: make(chan struct{}), d: Decision{Verdict: Allow}}
	b.Attach(&Member{UID: 0, Name: "root on pts/1", Approver: a})
	ctxs := make([]context.Context, 3)
	cancels := make([]context.CancelFunc, 3)
	ds := make([]chan Decision, 3)
	for i, id := range []string{"r1", "r2", "r3"} {
		ctxs[i], cancels[i] = context.WithCancel(context.Background())
		ds[i] = make(chan Decision, 1)
		p := &Prompt{ID: id, Requester: Requester{UID: 1000}, Shape: "s"}
		go func() { ds[i] <- b.Approve(ctxs[i], p) }()
		waitUntil(t, id+" in the group", func() bool { return waitingCount(b) == i+1 })
	}
	// Another shape is never in the group.
	other := make(chan Decision, 1)
	go func() {
		other <- b.Approve(context.Background(), &Prompt{ID: "o", Requester: Requester{UID: 1000}, Shape: "t"})
	}()
	cancels[1]()
	if d := <-ds[1]; d.Verdict != Withdrawn {
		t.Fatalf("r2, gone while gathering: %+v", d)
	}
	waitUntil(t, "the prompts to be shown", func() bool { return len(a.asked()) == 2 })
	for _, p := range a.asked() {
		switch p.ID {
		case "r1":
			if p.Group != 2 {
				t.Fatalf("r1's prompt says %d requests, want 2 (r2 left)", p.Group)
			}
		case "o":
			if p.Group != 0 {
				t.Fatalf("another shape's prompt says group %d", p.Group)
			}
		default:
			t.Fatalf("prompt %q shown", p.ID)
		}
	}
	// The request shown leaves: the prompt stays for r3.
	cancels[0]()
	if d := <-ds[0]; d.Verdict != Withdrawn {
		t.Fatalf("r1: %+v", d)
	}
	// A late request of the shape is a group of its own.
	late := make(chan Decision, 1)
	go func() {
		late <- b.Approve(context.Background(), &Prompt{ID: "late", Requester: Requester{UID: 1000}, Shape: "s"})
	}()
	waitUntil(t, "the late request's own prompt", func() bool { return len(a.asked()) == 3 })
	if p := a.asked()[2]; p.ID != "late" || p.Group != 0 {
		t.Fatalf("the late request was shown as %q, group %d", p.ID, p.Group)
	}
	close(a.release)
	d := <-ds[2]
	if d.Verdict != Allow || d.Group != 2 || d.GroupOf != "r1" {
		t.Fatalf("r3: %+v, want allow as 1 of 2 shown as r1", d)
	}
	if d := <-late; d.Verdict != Allow || d.Group != 0 || d.GroupOf != "" {
		t.Fatalf("late: %+v", d)
	}
	<-other
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ended) != 0 {
		t.Fatalf("prompts withdrawn while a request still waited: %v", a.ended)
	}
}

// When every request in a group has gone, its prompt is withdrawn.
func TestBrokerGroupAllLeave(t *testing.T) {
	b := &Broker{GroupWithin: time.Second}
	a := &shown{release: make(chan struct{})}
	b.Attach(&Member{UID: 0, Name: "root on pts/1", Approver: a})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Decision, 2)
	for _, id := range []string{"r1", "r2"} {
		p := &Prompt{ID: id, Requester: Requester{UID: 1000}, Shape: "s"}
		go func() { done <- b.Approve(ctx, p) }()
	}
	waitUntil(t, "both in one group", func() bool { return waitingCount(b) == 2 })
	waitUntil(t, "the prompt", func() bool { return len(a.asked()) == 1 })
	cancel()
	<-done
	<-done
	waitUntil(t, "the prompt to be withdrawn", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.ended) == 1
	})
	waitUntil(t, "the queue to empty", func() bool { return len(b.Waiting()) == 0 })
}

// The request to be shown leaves while its group gathers: the next one
// is shown instead, counted alone.
func TestBrokerGroupFirstLeaves(t *testing.T) {
	b := &Broker{GroupWithin: time.Second}
	a := &shown{release: make(chan struct{}), d: Decision{Verdict: Allow}}
	b.Attach(&Member{UID: 0, Name: "root on pts/1", Approver: a})
	ctx1, cancel1 := context.WithCancel(context.Background())
	d1, d2 := make(chan Decision, 1), make(chan Decision, 1)
	go func() { d1 <- b.Approve(ctx1, &Prompt{ID: "r1", Requester: Requester{UID: 1000}, Shape: "s"}) }()
	waitUntil(t, "r1 waiting", func() bool { return waitingCount(b) == 1 })
	go func() {
		d2 <- b.Approve(context.Background(), &Prompt{ID: "r2", Requester: Requester{UID: 1000}, Shape: "s"})
	}()
	waitUntil(t, "r2 in r1's group", func() bool { return waitingCount(b) == 2 })
	cancel1()
	<-d1
	waitUntil(t, "the prompt", func() bool { return len(a.asked()) == 1 })
	if p := a.asked()[0]; p.ID != "r2" || p.Group != 0 {
		t.Fatalf("shown %q with group %d, want r2 alone", p.ID, p.Group)
	}
	close(a.release)
	if d := <-d2; d.Verdict != Allow || d.Group != 0 || d.GroupOf != "" {
		t.Fatalf("r2: %+v", d)
	}
}
