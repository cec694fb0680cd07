package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sync/semaphore"
)

// promptLimit keeps one requester (a uid) from flooding the people who
// approve: at most maxPending of its requests wait for a person at once,
// and at most rate are put to a person per minute. Requests a policy rule
// decides are not counted; they bother no one.
type promptLimit struct {
	maxPending int
	rate       int // per minute

	mu   sync.Mutex // guards uids
	uids map[int]*uidPrompts
}

// uidPrompts is one uid's prompt traffic.
type uidPrompts struct {
	pending int
	recent  []time.Time // when its prompts of the last minute began, oldest first
}

func newPromptLimit(maxPending, rate int) *promptLimit {
	return &promptLimit{maxPending: maxPending, rate: rate, uids: map[int]*uidPrompts{}}
}

// begin admits one prompt for uid at now, or says why not. On success the
// caller must call the returned function once the prompt is decided.
func (l *promptLimit) begin(uid int, now time.Time) (end func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	u := l.uids[uid]
	if u == nil {
		u = &uidPrompts{}
		l.uids[uid] = u
	}
	cut := 0
	for cut < len(u.recent) && now.Sub(u.recent[cut]) >= time.Minute {
		cut++
	}
	u.recent = u.recent[cut:]
	switch {
	case u.pending >= l.maxPending:
		l.forgetLocked(uid, u)
		return nil, wire.TooManyPendingError(uid, l.maxPending)
	case len(u.recent) >= l.rate:
		l.forgetLocked(uid, u)
		return nil, wire.PromptRateError(uid, l.rate)
	}
	u.pending++
	u.recent = append(u.recent, now)
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		u.pending--
		l.forgetLocked(uid, u)
	}, nil
}

// forgetLocked drops u when nothing of it is left to remember, so the map
// holds only uids with recent traffic. Run with l.mu held.
func (l *promptLimit) forgetLocked(uid int, u *uidPrompts) {
	if u.pending == 0 && len(u.recent) == 0 {
		delete(l.uids, uid)
	}
}

// connShares caps the connections one uid has in flight, so one requester
// holding idle connections cannot take every slot of the global cap. Root
// has no share: it is bound by the global cap alone.
type connShares struct {
	max int

	mu   sync.Mutex // guards uids
	uids map[int]int
}

func newConnShares(max int) *connShares { return &connShares{max: max, uids: map[int]int{}} }

// take claims a slot for uid, or reports false when its share is used up.
// On success the caller must call the returned function when the
// connection is done.
func (c *connShares) take(uid int) (release func(), ok bool) {
	if uid == 0 {
		return func() {}, true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.uids[uid] >= c.max {
		return nil, false
	}
	c.uids[uid]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.uids[uid]--; c.uids[uid] == 0 {
			delete(c.uids, uid)
		}
	}, true
}

// runShares caps the runs one uid other than root has in progress, so one
// requester's long runs (a `journalctl -f` a rule allows, sent again and
// again) cannot take every run slot and hold everyone else's approved
// requests back. A uid's run past its share waits for one of its own to
// end, before it waits for a slot of the global cap.
type runShares struct {
	max int64

	mu   sync.Mutex // guards uids
	uids map[int]*runShare
}

// runShare is one uid's share, and how many of its runs hold or wait for it.
type runShare struct {
	sem   *semaphore.Weighted
	users int
}

func newRunShares(max int) *runShares {
	return &runShares{max: int64(max), uids: map[int]*runShare{}}
}

// acquire waits until uid may start one more run, or ctx ends (its error
// then). On success the caller must call release when the run is over.
func (r *runShares) acquire(ctx context.Context, uid int) (release func(), err error) {
	if uid == 0 {
		return func() {}, nil
	}
	r.mu.Lock()
	u := r.uids[uid]
	if u == nil {
		u = &runShare{sem: semaphore.NewWeighted(r.max)}
		r.uids[uid] = u
	}
	u.users++
	r.mu.Unlock()
	done := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if u.users--; u.users == 0 {
			delete(r.uids, uid)
		}
	}
	if err := u.sem.Acquire(ctx, 1); err != nil {
		done()
		return nil, err
	}
	return func() { u.sem.Release(1); done() }, nil
}
