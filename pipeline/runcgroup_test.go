package pipeline

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// testRunCgroup is a run's cgroup, without limits, in a test parent;
// removed when the test ends.
func testRunCgroup(t *testing.T) *cgroup.Cgroup {
	t.Helper()
	cg, err := cgroup.New(testCgroupParent(t), "run", cgroup.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cg.Remove() })
	return cg
}

// testCgroupParent is a cgroup of its own under this process's cgroup v2
// for one test (rgtest's), removed with what is left in it afterwards.
func testCgroupParent(t *testing.T) string {
	t.Helper()
	dir, err := rgtest.CgroupParentErr(t)
	if err != nil {
		t.Fatal(testutil.NoCgroupV2(err))
	}
	return dir
}

// gone reports whether process pid has ended (or is a zombie).
func gone(pid string) bool {
	st, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(st), ')')
	return i > 0 && i+2 < len(st) && st[i+2] == 'Z'
}

func TestRunCgroupKillsEscapee(t *testing.T) {
	t.Parallel()
	// A grandchild that leaves its session and process group (setsid),
	// double-forks and drops the environment (env -i, so no run tag) is
	// still in the run's cgroup, and dead when Run returns.
	cg := testRunCgroup(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	script := `(setsid env -i /bin/sh -c 'echo $$ > "$1"; exec sleep 1000' sh "$1" </dev/null >/dev/null 2>&1 &); while [ ! -s "$1" ]; do sleep 0.01; done; echo hi`
	res := run(t, &Cmd{Argv: [][]string{{"sh", "-c", script, "sh", pidFile}}, Paths: []string{"/bin/sh"}, Cgroup: cg})
	checkStage(t, res, 0, 0, "")
	if res.KillErr != nil {
		t.Errorf("KillErr = %v", res.KillErr)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid := strings.TrimSpace(string(b))
	if _, err := strconv.Atoi(pid); err != nil {
		t.Fatalf("pid file holds %q", b)
	}
	if !gone(pid) {
		t.Errorf("the escaped grandchild %s is still running after the run", pid)
	}
	if full, err := cg.Populated(); err != nil || full {
		t.Errorf("cgroup populated %v (%v) after the run", full, err)
	}
}

func TestRunCgroupUsage(t *testing.T) {
	t.Parallel()
	// A busy stage's CPU time is counted by its cgroup and returned.
	cg := testRunCgroup(t)
	script := `i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done`
	res := run(t, &Cmd{Argv: [][]string{{"sh", "-c", script}}, Paths: []string{"/bin/sh"}, Cgroup: cg})
	checkStage(t, res, 0, 0, "")
	if res.Usage == nil || res.Usage.CPU <= 0 || res.Usage.User+res.Usage.System <= 0 {
		t.Fatalf("Usage = %+v, want CPU time > 0", res.Usage)
	}
	if res.Usage.CPU > 10*time.Minute {
		t.Errorf("Usage.CPU = %v, implausible", res.Usage.CPU)
	}
}

func TestRunCgroupNoTag(t *testing.T) {
	t.Parallel()
	// With a cgroup, the stages get no run tag: nothing in their
	// environment is rootgate's.
	cg := testRunCgroup(t)
	res := run(t, &Cmd{Argv: [][]string{{"env"}}, Paths: []string{"/usr/bin/env"}, Env: []string{"A=1"}, Cgroup: cg})
	checkStage(t, res, 0, 0, "")
	if got := string(res.Stdout.Bytes()); got != "A=1\n" {
		t.Errorf("environment = %q, want only A=1", got)
	}
}
