package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestSudoEnvAssignments: "sudo TZ=Europe/Paris printenv TZ" means, to
// sudo and its users, printenv with TZ set. Sent as it stands, its first
// word was the command, and one with a slash a path in the current
// directory, which the requester controls: an agent that made
// ./TZ=Europe/Paris there had root run it, behind a command line (and a
// prompt's argv) that reads as printenv. Leading NAME=value words are
// the run's env, checked against the allowlist; the command is what
// follows them.
func TestSudoEnvAssignments(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: testutil.ShortDir(t)})
	work := t.TempDir()
	if err := os.Mkdir(filepath.Join(work, "TZ=Europe"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(work, "TZ=Europe", "Paris"), []byte("#!/bin/sh\necho the agent\\'s script ran as $(id -un)\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sudo := func(args ...string) (string, string, error) {
		cmd := sudoCmd(t, d, args...)
		cmd.Dir = work
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		return o.String(), e.String(), err
	}
	out, errs, err := sudo("TZ=Europe/Paris", "LC_ALL=C.UTF-8", "printenv", "TZ", "LC_ALL")
	if err != nil || out != "Europe/Paris\nC.UTF-8\n" {
		t.Fatalf("sudo TZ=Europe/Paris LC_ALL=C.UTF-8 printenv TZ LC_ALL: %v, stdout %q, stderr %q", err, out, errs)
	}
	files, err := audit.Files(rgtest.AuditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	var sent [][]string
	_ = audit.ReadAll(files, func(r audit.Read) error {
		if r.Err == nil && r.Record.Kind == audit.KindReceived && r.Record.Request != nil {
			sent = r.Record.Request.Pipeline
		}
		return nil
	})
	if len(sent) != 1 || strings.Join(sent[0], " ") != "printenv TZ LC_ALL" {
		t.Errorf("request's pipeline %q, want printenv TZ LC_ALL", sent)
	}
	// A key the allowlist refuses is refused, not sent as a command.
	out, errs, err = sudo("LD_PRELOAD=/tmp/x.so", "id")
	if err == nil || out != "" || !strings.Contains(errs, "LD_PRELOAD may not be set") {
		t.Errorf("sudo LD_PRELOAD=/tmp/x.so id: %v, stdout %q, stderr %q", err, out, errs)
	}
}
