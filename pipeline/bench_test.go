package pipeline

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/rootgate/rootgate/internal/rootpath"
)

// BenchmarkRunTrue and BenchmarkExecTrue set a one-stage run of /bin/true,
// set up as the daemon sets up its runs, beside os/exec's plain spawn of
// it, in one process with no socket (docs/performance.md):
//
//	go test -run '^$' -bench True -count 5 ./pipeline/
func BenchmarkRunTrue(b *testing.B) {
	acct, err := LookupAccount(uint32(os.Geteuid()))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c := &Cmd{Argv: [][]string{{"true"}}, Paths: []string{"/bin/true"}, Env: Env(acct, nil), Account: &acct}
		res, err := c.Run(context.Background())
		if err != nil || res.Stages[0].ExitCode != 0 {
			b.Fatalf("run: %v %+v", err, res)
		}
	}
}

func BenchmarkExecTrue(b *testing.B) {
	for b.Loop() {
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCapture16MiB captures 16 MiB from a pipe at the default cap, as
// a run captures a stream, with a goroutine writing into the pipe. Its
// allocations are the cap and a few small ones; B/op shows a buffer grown
// by copying, MB/s the capture's speed (docs/performance.md):
//
//	go test -run '^$' -bench Capture -benchmem ./pipeline/
func BenchmarkCapture16MiB(b *testing.B) {
	src := pattern(DefaultCap)
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		werr := make(chan error, 1)
		go func() {
			_, err := w.Write(src)
			w.Close()
			werr <- err
		}()
		var c Capture
		drain(r, &c, newBudget(DefaultCap))
		r.Close()
		if err := <-werr; err != nil {
			b.Fatal(err)
		}
		if c.Len() != len(src) || c.Truncated {
			b.Fatalf("captured %d bytes, truncated %v", c.Len(), c.Truncated)
		}
	}
}

// BenchmarkSafeSearchPath is the check of the search path's directories
// that a privileged request of a user other than root needs in its plan,
// at most once a second (SafeSearchPath keeps its answer that long;
// docs/performance.md):
//
//	go test -run '^$' -bench SafeSearchPath ./pipeline/
func BenchmarkSafeSearchPath(b *testing.B) {
	for b.Loop() {
		if path, _ := safeSearchPath(); path == "" {
			b.Fatal("no directory of the search path kept")
		}
	}
}

// BenchmarkInterpreters is the rest of an allow rule's check for a
// privileged request of a user other than root (the daemon's
// othersMayChange, after the path walk): the pinned file's head read,
// and for a dynamic binary its loader (PT_INTERP) read and walked, here
// /bin/true's:
//
//	go test -run '^$' -bench Interpreters -benchmem ./pipeline/
func BenchmarkInterpreters(b *testing.B) {
	p, err := Pin("/bin/true")
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	for b.Loop() {
		if err := p.Interpreters(rootpath.File); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScript runs a one-line #! script three ways, so that what a
// captured script costs is seen beside what it saves no one: by its path
// (a script only root can change), captured and run from its capture
// mounted over its name in a mount namespace of its own, its interpreter
// traced to its open of the script (a script the requester may write,
// run as root), and the capture alone (docs/performance.md):
//
//	go test -run '^$' -bench Script -count 5 ./pipeline/
func BenchmarkScript(b *testing.B) {
	dir := b.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil { // others may change it
		b.Fatal(err)
	}
	script := dir + "/job"
	if err := os.WriteFile(script, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		b.Fatal(err)
	}
	run := func(b *testing.B, capture bool) {
		for b.Loop() {
			exe, pin, err := ResolvePinned(script, "/")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := pin.Capture(!capture, MaxCapture, nil); err != nil {
				b.Fatal(err)
			}
			c := &Cmd{Argv: [][]string{{script}}, Paths: []string{exe.Path}, Pinned: []*Pinned{pin}}
			res, err := c.Run(context.Background())
			pin.Close()
			if err != nil || res.Stages[0].ExitCode != 0 {
				b.Fatalf("run: %v %+v", err, res)
			}
		}
	}
	b.Run("by-path", func(b *testing.B) { run(b, false) })
	b.Run("captured", func(b *testing.B) { run(b, true) })
	b.Run("capture-only", func(b *testing.B) {
		for b.Loop() {
			_, pin, err := ResolvePinned(script, "/")
			if err != nil {
				b.Fatal(err)
			}
			if _, err := pin.Capture(false, MaxCapture, nil); err != nil || pin.Content() == nil {
				b.Fatal(err)
			}
			pin.Close()
		}
	})
}
