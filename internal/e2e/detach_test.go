package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestTestsDetachFromSudoUser: run through sudo from a user's terminal,
// the tests run as from root's login (rgtest.Main runs them detached from
// that user), so an approver they start is not taken as one that user
// controls. This test runs itself again with SUDO_UID=65534, as sudo run
// by nobody would set it: the approver it starts is asked about nobody's
// requests; with the detaching turned off (RGTEST_NO_DETACH=1), it is not.
func TestTestsDetachFromSudoUser(t *testing.T) {
	if os.Getenv("RG_DETACH_PROBE") == "1" {
		d := approverDaemon(t)
		a := startApprover(t, d.asock(), 0)
		a.See("attached to rootgated")
		// The lines that follow the attach line (who is not asked) are
		// on the screen once the daemon's first status is.
		a.See("Waiting for a person")
		os.Stdout.WriteString("PROBE SCREEN\n" + a.Screen.Text() + "\nPROBE END\n")
		return
	}
	t.Parallel()
	const refused = "requests from uid 65534 (nobody) are not shown here"
	for _, c := range []struct {
		env     []string
		refused bool
	}{{nil, false}, {[]string{"RGTEST_NO_DETACH=1"}, true}} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestTestsDetachFromSudoUser$", "-test.v", "-test.count=1")
		cmd.Env = append(append(os.Environ(), "RG_DETACH_PROBE=1", "SUDO_UID=65534", "SUDO_GID=65534", "SUDO_USER=nobody"), c.env...)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "PROBE SCREEN") {
			t.Fatalf("%v: %v\n%s", c.env, err, out)
		}
		if got := strings.Contains(string(out), refused); got != c.refused {
			t.Errorf("%v: the approver says %q: %v, want %v\n%s", c.env, refused, got, c.refused, out)
		}
		if detached := strings.Contains(string(out), "running the tests detached"); detached == c.refused {
			t.Errorf("%v: detached %v\n%s", c.env, detached, out)
		}
	}
}
