package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// TestStageSessionsKeepRunsApart: a stage running as root may share the
// daemon's session (no terminal there), but a stage run as another
// account leads a session of its own, since SIGCONT may be sent to any
// process of one's session whatever its owner. The attack: a privileged
// run is stopped; another account's run sends it SIGCONT. It must be
// refused, and the stopped run stay stopped.
func TestStageSessionsKeepRunsApart(t *testing.T) {
	t.Parallel()
	addAccount(t, "rgsess1", "-M", "-s", "/bin/sh")
	d := startDaemon(t, opts{Policy: "allow privileged,runas=rgsess1 sh -c ...\nallow privileged sh -c ...\n"})
	pidFile := filepath.Join(t.TempDir(), "stopped.pid")
	stopped := make(chan response, 1)
	go func() {
		stopped <- d.send(map[string]any{"id": "sess-stopped", "pipeline": [][]string{{"sh", "-c", "echo $$ > " + pidFile + "; kill -STOP $$; echo resumed"}}})
	}()
	var pid int
	if !testutil.Poll(20*time.Second, func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return state(pid) == "T"
	}) {
		t.Fatalf("the privileged run did not stop (pid %d, state %q)", pid, state(pid))
	}
	t.Cleanup(func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		<-stopped
	})

	r := wantOK(t, d.send(map[string]any{"id": "sess-cont", "run_as": "rgsess1", "pipeline": [][]string{{"sh", "-c", fmt.Sprintf("kill -CONT %d 2>/dev/null && echo sent || echo refused", pid)}}}))
	if string(r.Stdout) != "refused\n" {
		t.Fatalf("another account's run could signal the privileged run: %s", r.raw)
	}
	if s := state(pid); s != "T" {
		t.Fatalf("the privileged run is %q, want still stopped (T)", s)
	}
}

// state is the state letter of process pid (/proc/PID/stat), or "".
func state(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+3 > len(s) {
		return ""
	}
	return s[i+2 : i+3]
}
