// Package rgtest is the real-binary harness of rootgate's tests: it builds
// rootgate and rootgated once per test process, starts a rootgated on a
// private socket and stops it with its audit log verified, and runs
// `rootgate approve` on a pseudo-terminal or in a tmux window of its own.
// Only tests import it.
//
// A package whose tests use it calls [Main] from its TestMain, which
// removes the binaries when the tests end.
package rgtest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Main runs the tests of m and removes the binaries built for them; a
// TestMain calls os.Exit(rgtest.Main(m)). The tests of this harness spend
// their time waiting for processes, not computing, so unless -test.parallel
// is given, up to Parallel of them run at once rather than GOMAXPROCS.
//
// Started through sudo from a user's terminal, it runs the tests detached
// from that user (see detach.go), so that they run as from root's login.
func Main(m *testing.M) int {
	if code, done := detached(); done {
		return code
	}
	code := run(m)
	reportCode(code)
	return code
}

func run(m *testing.M) int {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		_ = flag.Set("test.parallel", strconv.Itoa(Parallel))
	}
	code := m.Run()
	if bins.dir != "" {
		os.RemoveAll(bins.dir)
	}
	return code
}

// Parallel is how many parallel tests Main lets run at once by default.
const Parallel = 8

var bins struct {
	once                sync.Once
	dir                 string
	rootgate, rootgated string
	err                 error
}

// Race reports whether this test binary was built with the race detector.
// The binaries are built with it too, so the daemon is checked as well.
func Race() bool {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range info.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

// Binaries returns the paths of the real rootgated and rootgate, built on
// the first call (with -race when this test binary has it) into a
// directory anyone may read, since tests run the client as other users.
func Binaries(t testing.TB) (rootgated, rootgate string) {
	t.Helper()
	bins.once.Do(build)
	if bins.err != nil {
		t.Fatalf("build the binaries: %v", bins.err)
	}
	return bins.rootgated, bins.rootgate
}

// Rootgated is the path of the real rootgated ([Binaries]).
func Rootgated(t testing.TB) string { d, _ := Binaries(t); return d }

// Rootgate is the path of the real rootgate ([Binaries]).
func Rootgate(t testing.TB) string { _, c := Binaries(t); return c }

func build() {
	root, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		bins.err = fmt.Errorf("go env GOMOD: %v", err)
		return
	}
	mod := filepath.Dir(strings.TrimSpace(string(root)))
	dir, err := os.MkdirTemp("", "rootgate-bin")
	if err == nil {
		err = os.Chmod(dir, 0o755)
	}
	if err != nil {
		bins.err = err
		return
	}
	bins.dir = dir
	// Without VCS stamping the binaries report version "dev", as test
	// binaries do, whatever the state of the checkout.
	args := []string{"build", "-buildvcs=false", "-o", dir + "/"}
	if Race() {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/rootgate", "./cmd/rootgated")...)
	cmd.Dir = mod
	if out, err := cmd.CombinedOutput(); err != nil {
		bins.err = fmt.Errorf("go build: %v\n%s", err, out)
		return
	}
	bins.rootgated = filepath.Join(dir, "rootgated")
	bins.rootgate = filepath.Join(dir, "rootgate")
}
