package daemon

import (
	"context"
	"sync"
	"time"
)

// activity tracks what keeps a server busy, for [Server.WaitIdle].
type activity struct {
	mu      sync.Mutex
	n       int           // request connections and approvers in flight
	since   time.Time     // when n last fell to zero (or the server started)
	changed chan struct{} // nudged (cap 1) whenever n falls to zero
}

func newActivity(now time.Time) *activity {
	return &activity{since: now, changed: make(chan struct{}, 1)}
}

// begin marks a connection or approver as in flight; the returned func
// marks its end.
func (a *activity) begin(now func() time.Time) (end func()) {
	a.mu.Lock()
	a.n++
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.n--; a.n == 0 {
			a.since = now()
			select {
			case a.changed <- struct{}{}:
			default:
			}
		}
	}
}

// WaitIdle blocks until the server has been idle for d without a break,
// and the replay window (2 × MaxSkew) of the last request accepted is over,
// and returns nil; or returns ctx's error if ctx ends first. Idle means no
// request connection in flight (a run lives within its request's
// connection, so no run either) and no approver attached. The window is
// not added to d: with the defaults (10m, a 2m window) the daemon exits 10
// minutes after its last connection ended. The window's rule keeps a
// daemon that exits when idle from forgetting request ids while a replay
// of them could still pass the time check; the window is also kept in
// RuntimeDir, so this is a second line of defence.
func (s *Server) WaitIdle(ctx context.Context, d time.Duration) error {
	for {
		s.act.mu.Lock()
		busy := s.act.n > 0
		until := s.act.since.Add(d)
		s.act.mu.Unlock()
		if last := s.replay.LastExpiry(); last.After(until) {
			until = last
		}
		var wake <-chan time.Time
		var timer *time.Timer
		if !busy {
			left := until.Sub(s.cfg.Now())
			if left <= 0 {
				return nil
			}
			timer = time.NewTimer(left)
			wake = timer.C
		}
		// Busy: wait for the last connection or approver to end. Idle:
		// wait out the rest of d, then look again, since a request may
		// have come and gone meanwhile.
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.act.changed:
		case <-wake:
		}
		if timer != nil {
			timer.Stop()
		}
	}
}
