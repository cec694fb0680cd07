package daemon

import (
	"errors"
	"strings"
	"syscall"

	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"
)

// A daemon out of descriptors or memory must say so, not blame the
// request: an open of the cwd that fails with EMFILE is not a missing
// cwd, and an account lookup that cannot open /etc/passwd is not a user
// that does not exist. Two things keep it honest. The descriptors are
// budgeted: each connection, and each request by the size of its
// pipeline, takes its share of the soft RLIMIT_NOFILE (which the Go
// runtime raises to the hard limit at start) before it opens anything,
// less fdReserve kept for the daemon's own (its sockets, the audit log
// and replay file, an approver's connection, the journal), so that what
// is past the budget is answered busy before it fails half-way. And an
// error met while checking a request is taken for the daemon's lack, not
// the request's fault, when it or a probe says the kernel is out of
// something (lacking).

// fdReserve is the descriptors the budget leaves to the daemon's own use.
const fdReserve = 24

// requestFDs is what a request of stages stages may hold open at once,
// beyond its connection: its peer's pidfd, its cwd, its passwd lookup,
// its cgroup's directory; and per stage, the executable pinned, its
// pidfd and its three pipes' ends while it starts.
func requestFDs(stages int) int64 { return 4 + 6*int64(max(stages, 1)) }

// newFDBudget is the budget of descriptors under the soft limit.
func newFDBudget() (*semaphore.Weighted, int64) {
	var lim unix.Rlimit
	n := int64(1 << 20)
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(n) {
		n = int64(lim.Cur)
	}
	n = max(n-fdReserve, 1)
	return semaphore.NewWeighted(n), n
}

// lackErrnos are the kernel's ways of saying it lacks a resource.
var lackErrnos = []syscall.Errno{unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.EAGAIN, unix.ENOBUFS}

// lacking reports whether err, met while checking a request, is the
// daemon's lack of descriptors or memory rather than the request's
// fault: err says so (wrapped, or in the text of a C library's error,
// which os/user's cgo lookups give unwrapped), or the daemon cannot
// open a file now.
func lacking(err error) bool {
	for _, e := range lackErrnos {
		if errors.Is(err, e) || err != nil && strings.Contains(err.Error(), e.Error()) {
			return true
		}
	}
	fd, perr := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if perr != nil {
		return errors.Is(perr, unix.EMFILE) || errors.Is(perr, unix.ENFILE) || errors.Is(perr, unix.ENOMEM)
	}
	unix.Close(fd)
	return false
}

// honest gives err, a check's claim about a request, or ErrLacking when
// the daemon's lack made the check fail.
func honest(err error) error {
	if err != nil && lacking(err) {
		return wire.ErrLacking
	}
	return err
}
