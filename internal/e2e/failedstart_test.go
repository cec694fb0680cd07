package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestOrphanedAfterFailedStart: a daemon dies during a run (SIGKILL, a
// crash), and the next one on its audit log fails to start (here: its
// runtime directory is another user's) after it opened the log. A later
// daemon reads the trail back to the opened record of the last daemon
// that is gone, taking its start for one that already looked at what came
// before; written before the failed daemon looked, that record hid the
// lost run, which was then never recorded. A daemon writes its opened
// record only once it has recorded the runs left unfinished before it.
func TestOrphanedAfterFailedStart(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	args := []string{"--cgroup", "none"}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	m := runMarker()
	killAtEnd(t, m)
	id := "failed-start-" + m
	blockedRun(t, a, id, m)
	a.Cmd.Process.Kill()
	<-a.Done()
	waitFor(t, "the run's death with its daemon", 10*time.Second, func() bool { return len(procsWith(m)) == 0 })

	bad := filepath.Join(dir, "badrun")
	if err := os.Mkdir(bad, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(bad, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(rgtest.Rootgated(t), "--socket", filepath.Join(dir, "s2"), "--approver-socket", "", "--runtime-dir", bad,
		"--policy", filepath.Join(dir, "policy"), "--audit", auditPath(dir), "--cgroup", "none").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "runtime directory") {
		t.Fatalf("a daemon on a runtime directory of nobody's: %v\n%s", err, out)
	}

	startDaemon(t, opts{Dir: dir, Args: args}).alive()
	if k := kinds(trail(t, dir, id)); k != "received decided started "+string(audit.KindOrphaned) {
		t.Fatalf("records of %s: %s, want the run recorded as orphaned", id, k)
	}
}
