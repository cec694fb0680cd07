package peerid

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/pipeline"
	"golang.org/x/sys/unix"
)

// TestRunSignsEnvTag: a process whose environment holds a run's tag
// (pipeline.RunEnvKey) is found to be part of a run by the walk that
// computes an approver's controller set; one without it is not.
func TestRunSignsEnvTag(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"PATH=/usr/bin:/bin", pipeline.RunEnvKey + "=0123abcd"}, "it has " + pipeline.RunEnvKey + " in its environment"},
		{[]string{pipeline.RunEnvKey + "=0123abcd", "PATH=/usr/bin:/bin"}, "it has " + pipeline.RunEnvKey + " in its environment"},
		{[]string{"PATH=/usr/bin:/bin", "X" + pipeline.RunEnvKey + "=0123abcd"}, ""},
	} {
		cmd := exec.Command("sleep", "60")
		cmd.Env = tc.env
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Until the child has run sleep, its environment is still ours.
		testutil.WaitFor(t, "the child to run sleep", 10*time.Second, func() bool {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", cmd.Process.Pid))
			return strings.HasPrefix(string(b), "sleep\x00")
		})
		pidfd, err := unix.PidfdOpen(cmd.Process.Pid, 0)
		if err != nil {
			t.Fatal(err)
		}
		run := &RunSigns{}
		_, err = controllersPinned(pidfd, cmd.Process.Pid, run)
		unix.Close(pidfd)
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if run.Why != tc.want {
			t.Errorf("env %s: found %q, want %q", strings.Join(tc.env, " "), run.Why, tc.want)
		}
	}
}
