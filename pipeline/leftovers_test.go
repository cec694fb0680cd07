package pipeline

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// startLeftover starts sleep in a process group of its own, with env,
// and ends it when the test ends.
func startLeftover(t *testing.T, env []string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/usr/bin/sleep", "1000")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	return cmd
}

// alive reports whether pid is a live process, not a zombie.
func alive(pid int) bool {
	f, ok := statFields(pid)
	return ok && f[0] != "Z"
}

// TestKillLeftovers: what a dead daemon's record names is killed, and
// only that: a process holding a run's tag, one in a recorded stage's
// process group; not one holding another tag, nor a group whose leader's
// pid is now another process's (its start time differs from the
// record's), which would be a stranger's after the pids wrapped.
func TestKillLeftovers(t *testing.T) {
	tag, other := NewRunTag(), NewRunTag()
	tagged := startLeftover(t, []string{RunEnvKey + "=" + tag})
	untagged := startLeftover(t, []string{RunEnvKey + "=" + other})
	grouped := startLeftover(t, nil)
	reused := startLeftover(t, nil)
	start := startTime(grouped.Process.Pid)
	if start == 0 {
		t.Fatal("no start time")
	}
	n := KillLeftovers([]string{tag}, []Leader{
		{Pid: grouped.Process.Pid, Start: start},
		{Pid: reused.Process.Pid, Start: startTime(reused.Process.Pid) + 1},
	})
	if n != 2 {
		t.Errorf("killed %d processes, want 2", n)
	}
	if !waitFor(10*time.Second, func() bool { return !alive(tagged.Process.Pid) && !alive(grouped.Process.Pid) }) {
		t.Errorf("the tagged process or the recorded group's is alive")
	}
	if !alive(untagged.Process.Pid) {
		t.Errorf("the process with another run's tag was killed")
	}
	if !alive(reused.Process.Pid) {
		t.Errorf("the group whose leader's pid is another process's was killed")
	}
}
