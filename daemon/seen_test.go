package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckDoesNotProbeAsRoot (issue 27): a check request (nobody decides
// it) from a non-root requester resolves its cwd and executables with the
// requester's own identity, so its answer tells nothing of a directory
// the requester cannot search: a path there that exists and one that does
// not give the same error. Resolved as root, the first is found (a check
// answers allow or ask) and the second is "not an existing directory".
func TestCheckDoesNotProbeAsRoot(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rgprobe")
	d := startDaemon(t, opts{Policy: "allow any,env=* true\n"})
	openToAll(t, d)
	hidden := filepath.Join(d.Dir, "hidden") // root's, 0700
	if err := os.Mkdir(hidden, 0o700); err != nil {
		t.Fatal(err)
	}
	there := filepath.Join(hidden, "there")
	if err := os.Mkdir(there, 0o755); err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(there, "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	absent := filepath.Join(hidden, "absent")
	ask := func(cwd, exe string) string {
		t.Helper()
		r := sendAs(t, d.Sock, ag.uid, ag.gid, nil, request(map[string]any{"check": true, "cwd": cwd, "pipeline": [][]string{{exe}}}))
		// The answer with the path itself left out.
		msg := strings.NewReplacer(there, "PATH", absent, "PATH").Replace(r.Message)
		return r.Status + " " + r.Code + ": " + msg
	}
	if a, b := ask(there, "true"), ask(absent, "true"); a != b || !strings.HasPrefix(a, "error") {
		t.Errorf("cwd in a directory the requester cannot search: %q when it exists, %q when not; want the same error", a, b)
	}
	if a, b := ask("/", tool), ask("/", filepath.Join(absent, "tool")); a != b || !strings.HasPrefix(a, "error") {
		t.Errorf("executable in a directory the requester cannot search: %q when it exists, %q when not; want the same error", a, b)
	}
	// What the requester can see still resolves.
	if a := ask("/", "true"); !strings.HasPrefix(a, "ok") {
		t.Errorf("a check the requester can resolve: %q, want ok", a)
	}
}
