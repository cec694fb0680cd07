package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// execOnlyProgram puts the program good in a tmpfs of owner's (where a
// page written through a shared mapping is never written back, so nothing
// ever updates the file's times) as the file tool, owned by owner and
// execute-only for everyone else (0711), and beside it, as other, the
// program the requester will write in its place.
func execOnlyProgram(t *testing.T, owner testUser, good, evil []byte) (tool, other string) {
	t.Helper()
	dir := testutil.Tmpfs(t, filepath.Join(shortDir(t), "fs"), "4m")
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(dir, int(owner.uid), int(owner.gid)); err != nil {
		t.Fatal(err)
	}
	tool, other = filepath.Join(dir, "tool"), filepath.Join(dir, "other")
	writeFile(t, tool, string(good), &owner)
	if err := os.Chmod(tool, 0o711); err != nil {
		t.Fatal(err)
	}
	writeFile(t, other, string(evil), &owner)
	return tool, other
}

// sha256Hex is the SHA-256 of b in lowercase hex.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// TestApprovalBindsExecOnlyImage: TestApprovalBindsImage for a run as
// another account that may not read the program. The requester's own
// program, execute-only for others (0711), is asked to run as an account
// of no rights of its own; the daemon opens it with that account's
// identity, which may execute it but not read it, so it is captured
// reading with the requester's identity, and the prompt shows its
// SHA-256. After that, before the approval, the requester rewrites the
// file in place through a MAP_SHARED mapping it held dirty all along (no
// size, time or inode changes). What runs, as the account, is the program
// shown. (Not captured, the file ran from a copy made when the run
// started, and that was the rewritten program.)
func TestApprovalBindsExecOnlyImage(t *testing.T) {
	t.Parallel()
	good, evil := imagePrograms(t)
	d := approverDaemon(t, "--prompt-timeout", "30s")
	a := attachRaw(t, d)
	openToAll(t, d)
	agent := addTestUser(t, "rgxoa")
	runAs := addAccount(t, "rgxob", "-M", "-U", "-s", "/bin/sh")
	tool, other := execOnlyProgram(t, agent, good, evil)
	m := startMapper(t, agent, tool)

	ch := askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": [][]string{{tool}}, "run_as": runAs.name}))
	p := a.prompt()
	c := p.Request.Stages[0].Content
	if c == nil || c.SHA256 != sha256Hex(good) || c.Size != int64(len(good)) || p.Request.Stages[0].Uncaptured {
		t.Errorf("the prompt shows the content %+v (uncaptured: %v), want the program's SHA-256 %s", c, p.Request.Stages[0].Uncaptured, sha256Hex(good))
	}
	m.copyOver(tool, other)
	if b, err := os.ReadFile(tool); err != nil || !bytes.Equal(b, evil) {
		t.Fatalf("the rewrite did not take (%v)", err)
	}
	a.decide(p, true)
	r := <-ch
	if want := fmt.Sprintf("approved-image uid %d\n", runAs.uid); r.Status != wire.StatusOK || string(r.Stdout) != want {
		t.Fatalf("got %s (stdout %q), want the program shown run as %s: %q", r.raw, r.Stdout, runAs.name, want)
	}
	if st := startedStages(t, d, p.ID); len(st) != 1 || st[0].SHA256 != sha256Hex(good) {
		t.Errorf("the started record's stages %+v, want the SHA-256 shown", st)
	}
}

// TestGrantBindsExecOnlyImage: TestGrantBindsContent for the program of
// TestApprovalBindsExecOnlyImage. A standing grant is given for the
// requester's execute-only program run as another account; the requester
// then rewrites it through the shared mapping. The grant does not cover
// the new program: the next request is put to a person, who is shown the
// new program's SHA-256. (With nothing captured, the file's identity in
// the grant held no content hash, and the rewritten program ran as the
// account, decided by the grant, no one asked.)
func TestGrantBindsExecOnlyImage(t *testing.T) {
	t.Parallel()
	good, evil := imagePrograms(t)
	d := approverDaemon(t, "--prompt-timeout", "30s")
	a := attachRaw(t, d)
	openToAll(t, d)
	agent := addTestUser(t, "rgxga")
	runAs := addAccount(t, "rgxgb", "-M", "-U", "-s", "/bin/sh")
	tool, other := execOnlyProgram(t, agent, good, evil)
	m := startMapper(t, agent, tool)
	line := func() string {
		return request(map[string]any{"pipeline": [][]string{{tool}}, "run_as": runAs.name})
	}
	want := fmt.Sprintf("approved-image uid %d\n", runAs.uid)

	ch := askAs(d, agent, []uint32{}, line())
	p := a.prompt()
	if c := p.Request.Stages[0].Content; c == nil || c.SHA256 != sha256Hex(good) {
		t.Errorf("the prompt shows the content %+v, want the program's SHA-256 %s", c, sha256Hex(good))
	}
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 600})
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != want {
		t.Fatalf("got %s (stdout %q), want the program run", r.raw, r.Stdout)
	}
	// The grant holds for the very same program.
	if r := <-askAs(d, agent, []uint32{}, line()); r.Status != wire.StatusOK || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByGrant || string(r.Stdout) != want {
		t.Fatalf("got %s (stdout %q), want the grant to run it again", r.raw, r.Stdout)
	}

	m.copyOver(tool, other)
	msgs := a.prompts()
	ch = askAs(d, agent, []uint32{}, line())
	deadline := time.After(30 * time.Second)
	for {
		select {
		case r := <-ch:
			t.Fatalf("the rewritten program was decided without a person: %s (stdout %q)", r.raw, r.Stdout)
		case <-deadline:
			t.Fatal("no prompt and no answer within 30 s")
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("the approver's connection ended")
			}
			if m.Type != remote.MsgPrompt {
				continue // the granted runs' results
			}
			if c := m.Request.Stages[0].Content; c == nil || c.SHA256 != sha256Hex(evil) {
				t.Errorf("the prompt shows %+v, want the new program's SHA-256 %s", c, sha256Hex(evil))
			}
			a.decide(m, false)
			if r := <-ch; r.Status != wire.StatusDenied || strings.Contains(string(r.Stdout), "REWRITTEN") {
				t.Fatalf("got %s, want it denied by the person asked", r.raw)
			}
			return
		}
	}
}

// TestUncapturedImageAlwaysAsked: a program that neither the run's
// account nor the requester may read (another user's, 0711, which that
// user may rewrite at will) cannot be captured, so nothing binds what
// runs to what a person approved. A run of it as another account is put
// to a person, whose prompt says that its content could not be captured
// and why no standing grant may be given; the grant is refused, and an
// allow rule for it does not decide it. Approved once, it runs.
func TestUncapturedImageAlwaysAsked(t *testing.T) {
	t.Parallel()
	good, evil := imagePrograms(t)
	agent := addTestUser(t, "rgxua")
	runAs := addAccount(t, "rgxub", "-M", "-U", "-s", "/bin/sh")
	owner := addAccount(t, "rgxuc", "-M", "-U", "-s", "/bin/sh")
	tool, _ := execOnlyProgram(t, owner, good, evil)
	d := startDaemon(t, opts{Policy: "allow privileged,runas=" + runAs.name + " " + tool + "\nask any\n", Args: []string{"--prompt-timeout", "30s"}})
	a := attachRaw(t, d)
	openToAll(t, d)

	ch := askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": [][]string{{tool}}, "run_as": runAs.name}))
	p := a.prompt()
	st := p.Request.Stages[0]
	if st.Content != nil || !st.Uncaptured {
		t.Errorf("the prompt shows the content %+v, uncaptured %v; want it said not captured", st.Content, st.Uncaptured)
	}
	why := "the content of " + tool + " could not be captured"
	if !strings.HasPrefix(p.Request.NoGrant, why) {
		t.Errorf("the prompt's no_grant is %q, want it to say %q", p.Request.NoGrant, why)
	}
	if text := approval.RenderWhole(p.Request); !strings.Contains(text, "NOT CAPTURED") || !strings.Contains(text, "WARNING:     "+why) {
		t.Errorf("the prompt does not say the content was not captured:\n%s", text)
	}
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 600})
	if m := a.next(); m.Type != remote.MsgError || !strings.HasPrefix(m.Message, "decision refused: no standing grant for this request: "+why) {
		t.Fatalf("got %+v, want the grant refused", m)
	}
	a.decide(p, true)
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != fmt.Sprintf("approved-image uid %d\n", runAs.uid) {
		t.Fatalf("got %s (stdout %q), want the program run as %s", r.raw, r.Stdout, runAs.name)
	}
	// Asked again, it is put to a person again: no grant was made, and
	// the rule does not decide it.
	ch = askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": [][]string{{tool}}, "run_as": runAs.name}))
	p = promptAfterResults(a)
	a.decide(p, false)
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want it denied by the person asked", r.raw)
	}
}

// TestExecOnlyScriptCapturedAsRequester: the requester's script, 0711,
// asked to run as an account that may execute it but not read it, is
// captured reading with the requester's identity, as its program is
// (TestApprovalBindsExecOnlyImage): the prompt shows its text, and the
// run, as the account, runs that text under the script's name.
func TestExecOnlyScriptCapturedAsRequester(t *testing.T) {
	t.Parallel()
	const script = "#!/bin/sh\necho \"$0 as $(id -u)\"\n"
	d := approverDaemon(t, "--prompt-timeout", "30s")
	a := attachRaw(t, d)
	openToAll(t, d)
	agent := addTestUser(t, "rgxsa")
	runAs := addAccount(t, "rgxsb", "-M", "-U", "-s", "/bin/sh")
	tool, _ := execOnlyProgram(t, agent, []byte(script), nil)

	ch := askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": [][]string{{tool}}, "run_as": runAs.name}))
	p := a.prompt()
	if c := p.Request.Stages[0].Content; c == nil || string(c.Text) != script || c.SHA256 != sha256Hex([]byte(script)) {
		t.Errorf("the prompt shows the content %+v, want the script's text", c)
	}
	a.decide(p, true)
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != fmt.Sprintf("%s as %d\n", tool, runAs.uid) {
		t.Fatalf("got %s (stdout %q), want the script run as %s", r.raw, r.Stdout, runAs.name)
	}
}
