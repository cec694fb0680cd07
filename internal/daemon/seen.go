package daemon

import (
	"errors"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sys/unix"
)

// errChangedWhileResolved: a path resolved to another file for the run's
// identity than for the requester's, a moment before.
var errChangedWhileResolved = errors.New("changed while it was resolved; try again")

// requesterFirst wraps open, which opens the cwd and the executables of a
// privileged request with the run's identity (root's, or a named
// account's), so that nothing is opened with that identity that the
// requester could not open itself: the cwd and every executable are first
// resolved with the requester's own file system identity, and any error
// is the one the requester's own view gives (a path under a directory it
// cannot search fails alike whether or not it exists there). Then open
// runs, and what it found must be the very files the requester found; a
// path switched in between is refused. A check request, which nobody
// decides, thus learns nothing of the file system the requester could
// not learn itself.
func (p *runPlan) requesterFirst(open func() error) func() error {
	return func() error {
		seen := &runPlan{req: p.req, peer: p.peer, account: p.account, named: p.named,
			stages: make([]approval.Stage, len(p.stages)), search: p.search, leftOut: p.leftOut, resolveOnly: true}
		defer seen.close()
		requester := p.requester()
		if err := pipeline.AsUser(&requester, seen.open); err != nil {
			return err
		}
		if err := open(); err != nil {
			return err
		}
		if !sameFile(seen.dir.Fd(), p.dir.Fd()) {
			return cwdChanged(p.req.Cwd)
		}
		for i := range p.pinned {
			if i >= len(seen.pinned) || !seen.pinned[i].Same(p.pinned[i]) {
				return stageChanged(i + 1)
			}
		}
		return nil
	}
}

// sameFile reports whether descriptors a and b are of the same file.
func sameFile(a, b uintptr) bool {
	var sa, sb unix.Stat_t
	if unix.Fstat(int(a), &sa) != nil || unix.Fstat(int(b), &sb) != nil {
		return false
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino
}

// cwdChanged and stageChanged refuse a request whose cwd, or stage's
// executable, resolved to another file for the run than for the requester.
func cwdChanged(cwd string) error  { return wire.CwdError(cwd, errChangedWhileResolved) }
func stageChanged(stage int) error { return wire.ResolveError(stage, errChangedWhileResolved) }
