package rgtest

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/cgroup"
)

// CgroupParent is a cgroup v2 of its own for one test daemon's runs (its
// --cgroup), made under the test process's cgroup: test daemons must not
// share one, as each kills at start the runs' cgroups it finds in its
// own. It is removed, with anything left in it, when t ends (after a
// daemon started later has stopped). "" when this machine has no
// writable cgroup v2.
func CgroupParent(t testing.TB) string {
	t.Helper()
	dir, _ := CgroupParentErr(t)
	return dir
}

// CgroupParentErr is CgroupParent, with the reason when it is "".
func CgroupParentErr(t testing.TB) (string, error) {
	t.Helper()
	own, _, err := cgroup.Own()
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp(own, "rgtest-")
	if err != nil {
		return "", err
	}
	t.Cleanup(func() {
		if c, err := cgroup.Open(dir); err == nil {
			if err := c.Remove(); err != nil {
				t.Errorf("test cgroup: %v", err)
			}
		}
	})
	return dir, nil
}

// hasCgroupFlag reports whether args choose the daemon's cgroup.
func hasCgroupFlag(args []string) bool {
	return slices.ContainsFunc(args, func(a string) bool {
		return a == "--cgroup" || a == "-cgroup" || strings.HasPrefix(a, "--cgroup=") || strings.HasPrefix(a, "-cgroup=")
	})
}
