package daemon

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/wire"
)

// capturedBudget bounds the content the daemon captures for requests
// (pipeline.Pinned.Capture: a script or program someone other than root
// may change, copied before anyone is asked) and holds until the
// request's run ends or it is refused: at most capturedTotal bytes at
// once, and capturedShare of them for one uid. A request whose capture
// does not fit is answered busy at once rather than waiting with what it
// captured already. Only requesters other than root have content
// captured (a run with root's own rights runs what root can change
// anyway). docs/performance.md, "Memory kept for answers".
type capturedBudget struct {
	mu   sync.Mutex
	used int64
	uids map[int]int64
}

const (
	// capturedTotal is what all captures may hold at once: two requests'
	// whole allowance (pipeline.MaxCapture, 64 MiB).
	capturedTotal = 2 * pipeline.MaxCapture
	// capturedShare is one uid's part of it: one request's allowance.
	capturedShare = pipeline.MaxCapture
)

// errCapturesSpent is wrapped by take's error: the budget is spent.
var errCapturesSpent = errors.New("the budget of captured content is spent")

// take reserves n bytes for uid, or says why it cannot.
func (b *capturedBudget) take(uid int, n int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > capturedTotal || b.uids[uid]+n > capturedShare {
		return fmt.Errorf("%w%.0w", wire.CapturedBusyError(uid, capturedTotal, capturedShare), errCapturesSpent)
	}
	if b.uids == nil {
		b.uids = map[int]int64{}
	}
	b.used += n
	b.uids[uid] += n
	return nil
}

// give returns n bytes uid reserved.
func (b *capturedBudget) give(uid int, n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= n
	if b.uids[uid] -= n; b.uids[uid] <= 0 {
		delete(b.uids, uid)
	}
}
