package pipeline

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestInterpreterThatNeverOpensItsScript: a captured script whose #!
// line names a root program that blocks before it would open the script
// (flock, waiting for a lock held here) is killed once maxTraceTime has
// passed, and the run is refused; no stage is left. Before the bound, the
// stage's start waited for ever, outside any time limit of the run.
func TestInterpreterThatNeverOpensItsScript(t *testing.T) {
	if _, err := os.Stat("/usr/bin/flock"); err != nil {
		t.Fatal("no /usr/bin/flock (util-linux): the README's test command's Debian has it")
	}
	old := maxTraceTime
	maxTraceTime = 300 * time.Millisecond
	t.Cleanup(func() { maxTraceTime = old })

	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // others may change it: captured
		t.Fatal(err)
	}
	lock := filepath.Join(dir, "lock")
	lf, err := os.Create(lock)
	if err != nil {
		t.Fatal(err)
	}
	defer lf.Close()
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "job")
	if err := os.WriteFile(script, []byte("#!/usr/bin/flock "+lock+"\necho ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	exe, pin, err := ResolvePinned(script, "/")
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	if _, err := pin.Capture(false, MaxCapture, nil); err != nil {
		t.Fatal(err)
	}
	if pin.mode != fromMount {
		t.Fatalf("mode %v, want fromMount", pin.mode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := (&Cmd{Argv: [][]string{{script}}, Paths: []string{exe.Path}, Pinned: []*Pinned{pin}}).Run(ctx)
	if err == nil || !errors.Is(err, errNoOpen) || !strings.Contains(err.Error(), "within 300ms") {
		t.Fatalf("run: %v, %+v; want it refused: its interpreter did not open it within 300ms", err, res)
	}
	if ps := processesNamed(t, "flock"); len(ps) != 0 {
		t.Errorf("flock left running: %v", ps)
	}
}

// processesNamed lists the pids of this process's children named name.
func processesNamed(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		fields := strings.Fields(string(b))
		if len(fields) > 3 && fields[1] == "("+name+")" && fields[3] == strconv.Itoa(os.Getpid()) {
			out = append(out, fields[0])
		}
	}
	return out
}
