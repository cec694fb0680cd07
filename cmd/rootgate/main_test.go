package main

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"
	"github.com/rootgate/rootgate/cmd/internal/daemoncmd"
)

func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"rootgate": func() {
			os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
		},
		"rootgated": func() { os.Exit(daemoncmd.Main(os.Args[1:])) },
	})
}

// TestScripts runs cmd/rootgate/testdata/*.txt: the real client and daemon
// as commands, on a socket in each script's $WORK.
func TestScripts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the scripts start rootgated, which needs root")
	}
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata",
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			// A short socket path: sun_path holds 108 bytes.
			dir, err := os.MkdirTemp("/tmp", "rgs")
			if err != nil {
				return err
			}
			e.Defer(func() { os.RemoveAll(dir) })
			e.Setenv("SOCK", dir+"/s")
			e.Setenv("ASOCK", dir+"/a")
			e.Setenv("RUNDIR", dir+"/run")
			e.Setenv("ROOTGATE_SOCKET", "")
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
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.Dial("unix", args[0]); err == nil {
			c.Close()
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	ts.Fatalf("nothing listens on %s", args[0])
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
