package main

import (
	"bytes"
	"errors"
	"os/exec"
	"os/user"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// addRunAsAccount creates the account name (its own group, no home) and
// removes it when the test ends.
func addRunAsAccount(t *testing.T, name string) {
	t.Helper()
	_ = exec.Command("userdel", "-r", name).Run() // a leftover of a killed run
	var out []byte
	var err error
	// Concurrent useradds may hold /etc/passwd's lock for a moment.
	if !testutil.Poll(10*time.Second, func() bool {
		out, err = exec.Command("useradd", "-M", "-U", "-s", "/bin/sh", name).CombinedOutput()
		return err == nil
	}) {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if !testutil.Poll(10*time.Second, func() bool { return exec.Command("userdel", name).Run() == nil }) {
			t.Errorf("userdel %s failed", name)
		}
	})
	if _, err := user.Lookup(name); err != nil {
		t.Fatal(err)
	}
}

// runAsPolicy allows id as the account rgrc1 only, and id -gn as rgrc1
// with the group root only.
const runAsPolicy = `allow privileged,runas=rgrc1 id -un
allow privileged,runas=rgrc1,rungroup=root id -gn
`

// TestRunUser: `rootgate run --user` and `--group` reach a real daemon as
// run_as and run_as_group: the command runs as that account (and group)
// where the policy names it, is put to a person (none here: denied, exit
// 77) where it does not, and an account that does not exist is an error
// (exit 70) with the daemon's words.
func TestRunUser(t *testing.T) {
	addRunAsAccount(t, "rgrc1")
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: testutil.ShortDir(t), Policy: runAsPolicy})
	bin := rgtest.Rootgate(t)
	run := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"run", "--socket", d.Sock}, args...)...)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			t.Fatal(err)
		}
		return o.String(), e.String(), code
	}
	for _, tc := range []struct {
		name         string
		args         []string
		stdout, errs string
		code         int
	}{
		{"user", []string{"--user", "rgrc1", "--", "id", "-un"}, "rgrc1\n", "", 0},
		{"user and group", []string{"--user", "rgrc1", "--group", "root", "--", "id", "-gn"}, "root\n", "", 0},
		{"user, no rule", []string{"--user", "rgrc1", "--", "id", "-gn"}, "",
			"rootgate: denied: no approver attached: run \"sudo rootgate approve\" in a terminal\n", exitDenied},
		{"root, the rule names rgrc1", []string{"--", "id", "-un"}, "",
			"rootgate: denied: no approver attached: run \"sudo rootgate approve\" in a terminal\n", exitDenied},
		{"no such user", []string{"--user", "rgrcnone", "--", "id", "-un"}, "",
			"rootgate: error: cannot run as user \"rgrcnone\": no such user\n", exitError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stdout, stderr, code := run(tc.args...)
			if stdout != tc.stdout || stderr != tc.errs || code != tc.code {
				t.Fatalf("rootgate run %s: exit %d, stdout %q, stderr %q; want exit %d, %q, %q",
					strings.Join(tc.args, " "), code, stdout, stderr, tc.code, tc.stdout, tc.errs)
			}
		})
	}
	// rootgate audit show says which account each request named, and
	// what it ran as.
	out, err := exec.Command(bin, "audit", "show", "--file", rgtest.AuditPath(d.Dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("audit show: %v\n%s", err, out)
	}
	for _, want := range []string{
		`run as:    the account rgrc1 (run_as)` + "\n",
		`run as:    the account rgrc1 (run_as) with the group root (run_as_group)` + "\n",
		`run as:    rgrc1 (uid `,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("audit show lacks %q:\n%s", want, out)
		}
	}
}

// TestMCPExecuteUser: the MCP execute tool's user argument runs the
// command as that account; check answers for that account; user with
// privileged false is refused before anything is sent.
func TestMCPExecuteUser(t *testing.T) {
	addRunAsAccount(t, "rgrc1")
	dir := testutil.ShortDir(t)
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: dir, Policy: runAsPolicy})
	e := &mcpEnv{dir: dir, sock: d.Sock, asock: d.ApproverSock(), bin: rgtest.Rootgate(t), daemon: d}
	c := e.startMCP(t, 0)

	_, text, r := c.execute(t, map[string]any{"argv": []string{"id", "-un"}, "user": "rgrc1", "reason": "e2e: run as rgrc1"})
	if r.Status != "ok" || r.Stdout == nil || r.Stdout.Text != "rgrc1\n" {
		t.Fatalf("execute as rgrc1:\n%s", text)
	}
	// The same command as root: the rule names rgrc1 only.
	_, text, r = c.execute(t, map[string]any{"argv": []string{"id", "-un"}, "reason": "e2e: run as root"})
	if r.Status != "denied" {
		t.Fatalf("execute as root:\n%s", text)
	}
	_, text, r = c.execute(t, map[string]any{"argv": []string{"id", "-un"}, "user": "rgrc1", "privileged": false, "reason": "e2e: both"})
	if r.Status != "error" || !strings.Contains(r.Message, "user needs privileged true") {
		t.Fatalf("execute with user and privileged false:\n%s", text)
	}
	_, text, cr := c.checkCall(t, map[string]any{"argv": []string{"id", "-un"}, "user": "rgrc1"})
	if cr.Check != "allow" {
		t.Fatalf("check as rgrc1:\n%s", text)
	}
	_, text, cr = c.checkCall(t, map[string]any{"argv": []string{"id", "-un"}})
	if cr.Check != "ask" {
		t.Fatalf("check as root:\n%s", text)
	}
}
