package e2e

import (
	"path/filepath"
	"testing"
)

// TestIdleScreenDaemonDown: the idle screen of `rootgate approve` says
// that no daemon is connected when none is, rather than guessing at an
// older daemon: started before rootgated, and again after it stopped.
func TestIdleScreenDaemonDown(t *testing.T) {
	t.Parallel()
	none := startApprover(t, filepath.Join(t.TempDir(), "nothing.sock"), 0)
	none.idleShows("(not connected to rootgated: it is not running, or its socket cannot be reached; retrying)")

	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	a.idleShows("Waiting for a person (0):")
	d.Stop()
	a.See("connection to rootgated lost")
	a.idleShows("(not connected to rootgated")
}
