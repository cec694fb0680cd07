package cgroup

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil"
	"golang.org/x/sys/unix"
)

// testRunCgroup is a run's cgroup, without limits, in a test parent;
// removed when the test ends.
func testRunCgroup(t *testing.T) *Cgroup {
	t.Helper()
	cg, err := New(testCgroupParent(t), "run", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cg.Remove() })
	return cg
}

// testCgroupParent makes a cgroup of its own under this process's cgroup
// v2 for one test, and removes it (and what is left in it) afterwards.
func testCgroupParent(t *testing.T) string {
	t.Helper()
	own, _, err := Own()
	if err != nil {
		t.Fatal(testutil.NoCgroupV2(err))
	}
	dir, err := os.MkdirTemp(own, "rootgate-test-")
	if err != nil {
		t.Fatal(testutil.NoCgroupV2(err))
	}
	t.Cleanup(func() {
		if c, err := Open(dir); err == nil {
			if err := c.Remove(); err != nil {
				t.Error(err)
			}
		}
	})
	return dir
}

func TestWriteLimits(t *testing.T) {
	// The limit files are written as the kernel reads them. A fake
	// cgroup directory: this machine's cgroup v2 has no memory or pids
	// controller, so the real files cannot be there.
	for _, tc := range []struct {
		name  string
		lim   Limits
		files []string
		want  map[string]string
	}{
		{"none", Limits{}, []string{"memory.max", "pids.max"}, map[string]string{"memory.max": "max", "pids.max": "max"}},
		{"memory", Limits{Memory: 512 << 20}, []string{"memory.max", "pids.max", "memory.swap.max"},
			map[string]string{"memory.max": "536870912", "memory.swap.max": "0", "pids.max": "max"}},
		{"memory without swap", Limits{Memory: 4096}, []string{"memory.max"}, map[string]string{"memory.max": "4096"}},
		{"tasks", Limits{Tasks: 100}, []string{"memory.max", "pids.max"}, map[string]string{"memory.max": "max", "pids.max": "100"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tc.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("max"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := WriteLimits(dir, tc.lim); err != nil {
				t.Fatal(err)
			}
			for f, want := range tc.want {
				b, _ := os.ReadFile(filepath.Join(dir, f))
				if string(b) != want {
					t.Errorf("%s = %q, want %q", f, b, want)
				}
			}
		})
	}
	// A limit whose controller is missing (no file) is an error, never
	// silently not set.
	if err := WriteLimits(t.TempDir(), Limits{Tasks: 5}); err == nil {
		t.Error("WriteLimits without pids.max: no error")
	}
}

func TestLimitsString(t *testing.T) {
	for lim, want := range map[Limits]string{
		{}:                         "none",
		{Memory: 512 << 20}:        "memory 512M",
		{Memory: 1000, Tasks: 100}: "memory 1000, tasks 100",
		{Tasks: 7}:                 "tasks 7",
	} {
		if got := lim.String(); got != want {
			t.Errorf("%+v: %q, want %q", lim, got, want)
		}
	}
}

// TestCgroupKillReadsHeldDirectory: a process whose first thread has
// exited, in a cgroup below the run's, is killed by Kill even when
// something else is mounted over the run's cgroup path meanwhile: the
// cgroup.procs lists are read through the held directory, not the path
// (which would name the tmpfs's files, list nothing, and leave the
// process to outlive the run, as cgroup.kill signals it through its
// exited first thread).
func TestCgroupKillReadsHeldDirectory(t *testing.T) {
	t.Parallel()
	cg := testRunCgroup(t)
	sub := filepath.Join(cg.Path, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	subfd, err := unix.Open(sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(subfd)
	// The grandchild starts a thread and ends its first one; the script
	// prints its pid and start time once that thread shows as exited.
	script := testutil.ExitedFirstThreadPerl
	// Its output to a file: the process keeps the file open, so a pipe
	// would never end.
	outFile := filepath.Join(t.TempDir(), "out")
	f, err := os.Create(outFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("perl", "-e", script)
	cmd.Stdout = f
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: subfd}
	err = cmd.Run()
	f.Close()
	if err != nil {
		t.Fatalf("perl: %v", err)
	}
	out, err := os.ReadFile(outFile)
	if err != nil {
		t.Fatal(err)
	}
	e, err := testutil.ParseEscapee(out)
	if err != nil {
		t.Fatalf("perl: %v", err)
	}
	t.Cleanup(e.Kill)

	if err := syscall.Mount("tmpfs", cg.Path, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	mounted := true
	unmount := func() {
		if mounted {
			mounted = false
			if err := syscall.Unmount(cg.Path, 0); err != nil {
				t.Errorf("unmount %s: %v", cg.Path, err)
			}
		}
	}
	t.Cleanup(unmount) // before the cgroup is removed
	if err := os.WriteFile(filepath.Join(cg.Path, "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	kerr := cg.Kill()
	unmount()
	if n := e.LiveThreads(); n > 0 {
		t.Fatalf("the process %d with an exited first thread outlived Kill with %d threads (Kill: %v)", e.PID, n, kerr)
	}
	if kerr != nil {
		t.Fatalf("Kill: %v", kerr)
	}
}
