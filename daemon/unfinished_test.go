package daemon_test

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
)

// TestUnfinishedRunRecordedOrphaned: the record of a run's end is synced
// after the answer is sent, so a daemon that dies (SIGKILL, a crash, a
// power cut) may leave a trail that ends at started, with no cgroup left
// to tell (here: --cgroup none). The next daemon on the same audit log
// records the run as orphaned, its outcome unknown, once; a later daemon
// does not record it again.
func TestUnfinishedRunRecordedOrphaned(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	args := []string{"--cgroup", "none"}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	m := runMarker()
	t.Cleanup(func() {
		for _, pid := range procsWith(m) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// A finished run before it, whose trail is whole.
	done := wantOK(t, a.send(map[string]any{"pipeline": [][]string{{"true"}}}))
	id := "unfinished-" + m
	c, err := net.Dial("unix", a.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(request(map[string]any{"id": id, "pipeline": [][]string{{"sleep", m}}}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run", 10*time.Second, func() bool { return len(procsWith(m)) == 1 })
	a.Cmd.Process.Kill()
	<-a.Done()
	waitFor(t, "the run's death with its daemon", 10*time.Second, func() bool { return len(procsWith(m)) == 0 })

	b := startDaemon(t, opts{Dir: dir, Args: args})
	rs := trail(t, dir, id)
	if k := kinds(rs); k != "received decided started "+string(audit.KindOrphaned) {
		t.Fatalf("records of %s: %s", id, k)
	}
	if o := rs[3]; !strings.Contains(o.Error, "unknown") || o.Peer != nil {
		t.Errorf("orphaned record: error %q, peer %v", o.Error, o.Peer)
	}
	if k := kinds(trail(t, dir, done.ID)); k != "received decided started finished" {
		t.Errorf("records of the finished run %s: %s", done.ID, k)
	}
	if !strings.Contains(b.Stderr.String(), "event=orphaned") {
		t.Errorf("the orphan is not in the log:\n%s", b.Stderr)
	}
	wantOK(t, b.send(map[string]any{"pipeline": [][]string{{"true"}}}))
	b.Stop()

	// The next daemon finds nothing left to record.
	startDaemon(t, opts{Dir: dir, Args: args}).alive()
	if k := kinds(trail(t, dir, id)); k != "received decided started "+string(audit.KindOrphaned) {
		t.Errorf("records of %s after a third daemon: %s", id, k)
	}
}
