package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// setAsideDaemon starts a daemon whose allow rule names root's link to a
// file of the requester ag's, whose name holds an escape sequence: the
// rule matches ag's privileged request for the link, and is set aside
// (othersMayChange). It returns the daemon, the link the rule names and
// the real path of ag's file.
func setAsideDaemon(t *testing.T, ag userAccount) (d *daemonProc, link, real string) {
	t.Helper()
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	rootDir := filepath.Join(dir, "root")
	if err := os.Mkdir(rootDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The requester's file, in root's directory, under a name that would
	// recolour the terminal the answer is printed on.
	real = filepath.Join(rootDir, "t\x1b[31mool")
	if err := os.WriteFile(real, []byte("#!/bin/sh\nid -u\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(real, int(ag.uid), -1); err != nil {
		t.Fatal(err)
	}
	link = filepath.Join(rootDir, "tool")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	d = startDaemon(t, opts{Policy: "deny any rm ...\nallow privileged " + link + "\n"})
	openToAll(t, d)
	return d, link, real
}

// TestCheckSaysWhyRuleSetAside: a check of a request an allow rule
// matched but does not decide (the file that runs is the requester's)
// answers ask, and says which rule it was, where it is written and why it
// did not decide; the file's name, which the requester chose, is shown
// with its control characters escaped.
func TestCheckSaysWhyRuleSetAside(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "fdag")
	d, link, real := setAsideDaemon(t, ag)
	c := sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"pipeline": [][]string{{link}}, "check": true}))
	if c.Status != wire.StatusOK || c.Check != wire.CheckAsk {
		t.Fatalf("check: got %s, want %q", c.raw, wire.CheckAsk)
	}
	want := fmt.Sprintf("allow rule %s:2 (allow privileged %s) does not decide this: %s: %s is owned by uid %d, not by root; a person would be asked",
		filepath.Join(d.Dir, "policy"), link, link, strings.ReplaceAll(real, "\x1b", `\x1b`), ag.uid)
	if c.Message != want {
		t.Fatalf("check message:\n got %q\nwant %q", c.Message, want)
	}
	if c.DecidedBy != nil {
		t.Errorf("check: decided_by %+v, but the rule decided nothing", c.DecidedBy)
	}
}

// TestSetAsideRuleLoggedOncePerPrompt: the daemon logs an allow rule it
// set aside once for a request put to a person, with the request's id,
// and never for a check, which a requester may send as often as it likes
// without a person or a record: a flood of checks does not flood the
// journal.
func TestSetAsideRuleLoggedOncePerPrompt(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "fdop")
	d, link, _ := setAsideDaemon(t, ag)
	const logged = "allow rule not applied, a person is asked"
	for range 5 {
		c := sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"pipeline": [][]string{{link}}, "check": true}))
		if c.Check != wire.CheckAsk {
			t.Fatalf("check: got %s, want %q", c.raw, wire.CheckAsk)
		}
	}
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	ch := make(chan response, 1)
	go func() {
		r, err := trySendAs(d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"id": "set-aside-logged", "pipeline": [][]string{{link}}}))
		if err != nil {
			r.raw = err.Error()
		}
		ch <- r
	}()
	a.See("set-aside-logged")
	// The line is written before the prompt is sent, so it is on its
	// way; the checks' lines, had there been any, came before it.
	var lines []string
	testutil.Poll(10*time.Second, func() bool {
		lines = nil
		for _, l := range strings.Split(d.Stderr.String(), "\n") {
			if strings.Contains(l, logged) {
				lines = append(lines, l)
			}
		}
		return len(lines) > 0
	})
	a.wantAsked(ch, "set-aside-logged")
	if len(lines) != 1 || !strings.Contains(lines[0], "id=set-aside-logged") || !strings.Contains(lines[0], "level=WARN") {
		t.Fatalf("want one WARN line %q with the prompted request's id, after 5 checks and one prompt; got %d:\n%s", logged, len(lines), strings.Join(lines, "\n"))
	}
}
