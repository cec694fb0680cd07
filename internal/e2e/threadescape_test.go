package e2e

import (
	"testing"

	"github.com/rootgate/rootgate/internal/testutil"
)

// TestEscapeWithExitedFirstThread: a process of a run whose first thread
// has exited (the exit system call, not exit_group) while another runs on
// is killed at the end of its run. cgroup.kill signals each process of
// the cgroup through its first thread, which never acts on it: such a
// process of a run of uid nobody outlived the run's end (the daemon
// waited 10 s twice for its cgroup to empty, then answered and left the
// cgroup behind). Without a cgroup, having left its session by a double
// fork with its environment, tag and all, it read as a zombie with no
// environment, and the sweep took it for an orphan that had ended.
func TestEscapeWithExitedFirstThread(t *testing.T) {
	t.Parallel()
	const nobody = 65534
	// The escapee starts a thread and ends its first one; the stage
	// prints its pid and start time once that thread shows as exited.
	script := testutil.ExitedFirstThreadPerl
	for _, path := range containments {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, opts{Args: path.args})
			openToAll(t, d)
			r := wantOK(t, sendAs(t, d.Sock, nobody, nobody, []uint32{}, request(map[string]any{"pipeline": [][]string{{"perl", "-e", script}}, "privileged": false})))
			e, err := testutil.ParseEscapee(r.Stdout)
			if err != nil {
				t.Fatalf("the run did not start its escapee: %v: %s", err, r.raw)
			}
			if n := e.LiveThreads(); n > 0 {
				e.Kill()
				t.Fatalf("the escapee %d outlived its run with %d threads", e.PID, n)
			}
		})
	}
}
