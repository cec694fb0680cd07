package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
)

// TestUnfinishedIDReused: a request's id is the requester's word, and the
// replay window forgets it after 2 × --max-skew (2 minutes by default),
// while a run may last longer (--exec-timeout, 5 minutes). A requester
// reusing an id must not make the trail of one run pass for another's:
// an id is refused while its request is in progress, however old, and
// after a daemon dies during a run whose id an earlier run ended with,
// the next daemon still records that run as orphaned. Matched by id
// alone, the earlier run's end passed for it, and the run killed with
// its daemon left no record of that.
func TestUnfinishedIDReused(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	args := []string{"--cgroup", "none", "--max-skew", "1s"}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	m := runMarker()
	killAtEnd(t, m)
	id := "reused-id-" + m
	wantOK(t, a.send(map[string]any{"id": id, "pipeline": [][]string{{"true"}}}))
	windowPasses(t, a, "probe-1-"+m)
	blockedRun(t, a, id, m) // the id again, for a run that will outlast the window
	windowPasses(t, a, "probe-2-"+m)
	wantError(t, a.send(map[string]any{"id": id, "pipeline": [][]string{{"true"}}}), `duplicate request id "`+id+`"`)

	a.Cmd.Process.Kill()
	<-a.Done()
	waitFor(t, "the run's death with its daemon", 10*time.Second, func() bool { return len(procsWith(m)) == 0 })
	startDaemon(t, opts{Dir: dir, Args: args}).alive()
	var got []string
	for _, r := range trail(t, dir, id) {
		if r.Kind != audit.KindRejected { // the refused resends
			got = append(got, string(r.Kind))
		}
	}
	want := "received decided started finished received decided started orphaned"
	if k := strings.Join(got, " "); k != want {
		t.Fatalf("records of %s:\n%s\nwant\n%s", id, k, want)
	}
}
