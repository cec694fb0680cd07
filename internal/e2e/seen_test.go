package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/wire"
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

// TestGrantForRequesterStillSavesPrompts (issue 27, the legitimate path):
// resolving a privileged request as its non-root requester first does
// not change what a grant holds: a grant on a root-owned program, given
// at the prompt, still runs the same request again without a prompt.
func TestGrantForRequesterStillSavesPrompts(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rggrantok")
	d := startDaemon(t, opts{Policy: "deny any rm -rf /\n", Args: []string{"--prompt-timeout", "60s"}})
	openToAll(t, d)
	a := attachRaw(t, d)
	line := func(id string) string {
		return request(map[string]any{"id": id, "cwd": "/", "pipeline": [][]string{{"id", "-u"}}})
	}
	done := make(chan response, 1)
	go func() {
		r, err := trySendAs(d.Sock, ag.uid, ag.gid, nil, line("grant-ok-1"))
		if err != nil {
			r.Message = err.Error()
		}
		done <- r
	}()
	p := a.prompt()
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 60})
	if r := <-done; r.Status != wire.StatusOK || string(r.Stdout) != "0\n" {
		t.Fatalf("the granted request: %s %s", r.raw, r.Message)
	}
	if r := sendAs(t, d.Sock, ag.uid, ag.gid, nil, line("grant-ok-2")); r.Status != wire.StatusOK || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByGrant {
		t.Fatalf("the same request again: %s, want run by the grant", r.raw)
	}
}
