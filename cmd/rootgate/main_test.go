package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestMain makes this test binary the command rootgate too: for the
// scripts, and for the desktop dialog's child (which runs /proc/self/exe).
func TestMain(m *testing.M) {
	testscript.Main(withBinaries{m}, map[string]func(){
		"rootgate": func() {
			os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		},
	})
}

// withBinaries runs the tests with rgtest.Main, which removes the real
// binaries at the end.
type withBinaries struct{ m *testing.M }

func (w withBinaries) Run() int { return rgtest.Main(w.m) }

// TestScripts runs cmd/rootgate/testdata/*.txt: this package's rootgate
// and the real rootgated (rgtest.Binaries) as commands, on a socket in
// each script's $WORK; $ROOTGATE_BIN is the real rootgate.
func TestScripts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the scripts start rootgated, which needs root")
	}
	rootgated, rootgate := rgtest.Binaries(t)
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata",
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			bin := filepath.Join(e.WorkDir, ".bin")
			if err := os.Mkdir(bin, 0o755); err != nil {
				return err
			}
			if err := os.Symlink(rootgated, filepath.Join(bin, "rootgated")); err != nil {
				return err
			}
			e.Setenv("PATH", bin+string(os.PathListSeparator)+e.Getenv("PATH"))
			dir, err := testutil.NewShortDir()
			if err != nil {
				return err
			}
			e.Defer(func() { os.RemoveAll(dir) })
			e.Setenv("SOCK", dir+"/s")
			// Each script's daemon gets a cgroup parent of its own, as
			// rgtest gives every test daemon: daemons sharing one would
			// take turns at its lock, and the losers fall back.
			cg := "none"
			if own, _, err := cgroup.Own(); err == nil {
				if d, err := os.MkdirTemp(own, "rgscript-"); err == nil {
					cg = d
					e.Defer(func() {
						if c, err := cgroup.Open(d); err == nil {
							c.Remove()
						}
					})
				}
			}
			e.Setenv("CGROUP", cg)
			e.Setenv("ASOCK", dir+"/a")
			e.Setenv("RUNDIR", dir+"/run")
			e.Setenv("ROOTGATE_SOCKET", "")
			// The real rootgate binary, for what only its main does:
			// acting as sudo when called by that name.
			e.Setenv("ROOTGATE_BIN", rootgate)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"waitsock": waitSock,
			"now":      now,
		},
	})
}

// waitsock PATH waits until a daemon accepts connections on PATH.
func waitSock(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: waitsock PATH")
	}
	if !testutil.Poll(30*time.Second, func() bool {
		c, err := net.Dial("unix", args[0])
		if err == nil {
			c.Close()
		}
		return err == nil
	}) {
		ts.Fatalf("nothing listens on %s", args[0])
	}
}

// now VAR [OFFSET] sets VAR to the current time (plus a duration) in RFC 3339.
func now(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: now VAR [OFFSET]")
	}
	t := time.Now()
	if len(args) == 2 {
		d, err := time.ParseDuration(args[1])
		ts.Check(err)
		t = t.Add(d)
	}
	ts.Setenv(args[0], t.UTC().Format(time.RFC3339))
}
