package daemon

import (
	"sync"
	"time"

	"github.com/rootgate/rootgate/wire"
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
