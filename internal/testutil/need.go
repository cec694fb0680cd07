package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The tests run as root and call root's tools (useradd, groupadd,
// mkfs.ext2, dpkg's helpers, debootstrap) by name, as root's login shell
// finds them. Run through sudo env "PATH=$PATH" from a user's terminal,
// they get the user's PATH, which on Debian has no sbin directory: a test
// process running as root puts the sbin directories at the end of its
// PATH, so the tests run the same either way.
func init() {
	if os.Geteuid() != 0 {
		return
	}
	path, ok := os.LookupEnv("PATH")
	if !ok {
		// A test binary run as a helper with an exact environment (a
		// run's stage that prints what it got): leave it as it is.
		return
	}
	for _, dir := range []string{"/usr/local/sbin", "/usr/sbin", "/sbin"} {
		if !onPath(dir) {
			if path != "" {
				path += ":"
			}
			path += dir
			os.Setenv("PATH", path)
		}
	}
}

// TestCommand is how the README's test command installs what the tests
// use, named in the one line a test fails with when something is missing.
const TestCommand = "the README's test command installs it (sudo apt-get install"

// NeedTool returns the path of program name on PATH, or fails t with one
// line naming it, its Debian package pkg and the README's test command.
func NeedTool(t testing.TB, name, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err == nil {
		return p
	}
	t.Fatal(MissingTool(name, pkg))
	return ""
}

// MissingTool is the line NeedTool fails with for name of package pkg.
func MissingTool(name, pkg string) string {
	return fmt.Sprintf("%s is needed and not on PATH: %s %s)", name, TestCommand, pkg)
}

func onPath(dir string) bool {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if filepath.Clean(d) == dir {
			return true
		}
	}
	return false
}

// NoCgroupV2 is the line a test that needs a writable cgroup v2 fails
// with, err saying what is missing.
func NoCgroupV2(err error) string {
	why := "unknown"
	if err != nil {
		why = strings.TrimSpace(err.Error())
	}
	return "this test needs a writable cgroup v2 (the unified hierarchy at /sys/fs/cgroup, as systemd 247 or newer mounts it by default, and root allowed to make cgroups in it), which this machine does not give (" +
		why + "); no package installs it: run the tests on such a machine, or in a container booted with systemd and its own cgroup2 tree"
}
