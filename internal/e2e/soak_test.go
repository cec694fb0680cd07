package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/daemon"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestSoakHeap is the heap profile of docs/performance.md, "Memory over
// many requests": ROOTGATE_SOAK=N sends N sequential pings (100000 there)
// to an in-process server on the real clock, and writes heap profiles
// after 10,000 and after N to ROOTGATE_SOAK_DIR (default: the test's
// temporary directory), for `go tool pprof -top -base`. It takes minutes,
// so it is off unless asked for: it is not on the CI path.
func TestSoakHeap(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ROOTGATE_SOAK"))
	if n <= 0 {
		t.Skip("ROOTGATE_SOAK=N runs it (docs/performance.md)")
	}
	out := os.Getenv("ROOTGATE_SOAK_DIR")
	if out == "" {
		out = t.TempDir()
	}
	s := startServer(t, "allow any\n", daemon.Config{Now: time.Now})
	d := &daemonProc{&rgtest.Daemon{T: t, Sock: s.sock}}
	profile := func(at int) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		t.Logf("after %d requests: heap in use %d KiB, %d objects", at, m.HeapInuse>>10, m.HeapObjects)
		f, err := os.Create(filepath.Join(out, fmt.Sprintf("heap-%d.pb.gz", at)))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= n; i++ {
		if r := d.send(map[string]any{"action": "ping", "pipeline": nil}); r.Message != "pong" {
			t.Fatalf("request %d: %s", i, r.raw)
		}
		if i == 10000 || i == n {
			profile(i)
		}
	}
	t.Logf("profiles in %s", out)
}
