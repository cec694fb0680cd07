package daemon

import (
	"context"
	"sync"

	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sync/semaphore"
)

// keptBudget bounds the output the daemon keeps for answers not yet
// written: a run's stderr (up to wire.MaxCapture for all its stages
// together; its stdout goes into the answer as it comes, and a streamed
// run keeps nothing). Each run takes what it may keep
// before it starts and gives back what it did not keep once it is over;
// the rest is given back once its answer is written, or its requester is
// gone, however slowly the requester reads. The whole is --max-runs
// times 16 MiB (128 MiB by default), so a run slot freed
// by a finished run whose answer is still being read does not let
// another run add its output beside it: a run waits, as for a run slot,
// until the answers before it are written. A uid other than root holds
// at most half of it (at least 16 MiB), as it does of the run slots
// (runShares), so one
// requester reading slowly over many connections does not hold it all.
// docs/performance.md, "Memory kept for answers".
type keptBudget struct {
	all   *semaphore.Weighted
	total int64
	share int64 // of a uid other than root

	mu   sync.Mutex // guards uids
	uids map[int]*keptShare
}

// keptShare is one uid's share, and how many of its requests hold or
// wait for it.
type keptShare struct {
	sem   *semaphore.Weighted
	users int
}

func newKeptBudget(total, share int64) *keptBudget {
	return &keptBudget{all: semaphore.NewWeighted(total), total: total, share: share, uids: map[int]*keptShare{}}
}

// kept is what one request holds of a keptBudget.
type kept struct {
	b    *keptBudget
	u    *keptShare // nil for root
	uid  int
	n    int64
	once sync.Once
}

// acquire waits until uid may keep n bytes more, or ctx ends (its error
// then).
func (b *keptBudget) acquire(ctx context.Context, uid int, n int64) (*kept, error) {
	// Never more than a uid's share holds (root's too, though it has
	// no share of its own to wait for: n is at most one run's stderr).
	n = min(n, b.share, b.total)
	k := &kept{b: b, uid: uid, n: n}
	if uid != 0 {
		b.mu.Lock()
		u := b.uids[uid]
		if u == nil {
			u = &keptShare{sem: semaphore.NewWeighted(b.share)}
			b.uids[uid] = u
		}
		u.users++
		b.mu.Unlock()
		k.u = u
		if err := u.sem.Acquire(ctx, n); err != nil {
			b.done(k)
			return nil, err
		}
	}
	if err := b.all.Acquire(ctx, n); err != nil {
		if k.u != nil {
			k.u.sem.Release(n)
			b.done(k)
		}
		return nil, err
	}
	return k, nil
}

func (b *keptBudget) done(k *kept) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k.u.users--; k.u.users == 0 {
		delete(b.uids, k.uid)
	}
}

// keep gives back what k holds beyond n, what its run did keep.
func (k *kept) keep(n int64) {
	if n >= k.n {
		return
	}
	k.give(k.n - n)
	k.n = n
}

func (k *kept) give(n int64) {
	if n <= 0 {
		return
	}
	k.b.all.Release(n)
	if k.u != nil {
		k.u.sem.Release(n)
	}
}

// release gives back all k holds: its answer is written, or no one is
// left to read it.
func (k *kept) release() {
	k.once.Do(func() {
		k.give(k.n)
		if k.u != nil {
			k.b.done(k)
		}
	})
}

// keptTotal is the budget of a daemon of maxRuns run slots: a run's
// stderr (wire.MaxCapture, 16 MiB) for each.
func keptTotal(maxRuns int) int64 { return int64(maxRuns) * wire.MaxCapture }

// ownRest bounds what the daemon holds besides what it keeps for answers
// and the content it captured: the Go runtime, request lines, the
// connections' buffers, and the garbage its soft memory limit (48 MiB)
// lets build; docs/performance.md measures under 64 MiB, and this is
// twice that.
const ownRest = 128 << 20

// ownMemoryMax is the memory.max of the daemon's own cgroup
// (cgroup.Runs.BoundOwnMemory): the output it keeps for answers and the content it
// captured for requests not yet run, at most, and the rest with room.
// Past it the kernel's OOM killer stops the daemon alone (systemd starts
// it again), never another process of the machine.
func ownMemoryMax(maxRuns int) int64 { return keptTotal(maxRuns) + capturedTotal + ownRest }

// keptUIDShare is a uid's share of keptTotal: as many runs' stderr as it
// has run slots (runShares), half of them.
func keptUIDShare(maxRuns int) int64 { return int64(max(maxRuns/2, 1)) * wire.MaxCapture }

// keepFor is what req's run may keep for its answer: its stderr, up to
// wire.MaxCapture for all its stages; its stdout goes into the answer as
// it comes (answerLine), and a run that asked for streamed output keeps
// neither, each of its streams going to the client as frames as it is
// read.
func keepFor(req *wire.Request) int64 {
	if req.Stream != 0 {
		return 0
	}
	return wire.MaxCapture
}
