package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// Runs as a named account (run_as, run_as_group): the requester names an
// account other than root, and must get exactly that account's identity
// and environment, only where the policy or a person admits that
// account, never on the strength of a rule written for root.

// addGroup creates the group name and removes it when the test ends
// (after the accounts made later, which cleanup removes first).
func addGroup(t *testing.T, name string) uint32 {
	t.Helper()
	_ = exec.Command("groupdel", name).Run() // a leftover of a killed run
	var out []byte
	var err error
	if !testutil.Poll(10*time.Second, func() bool {
		out, err = exec.Command("groupadd", name).CombinedOutput()
		return err == nil
	}) {
		t.Fatalf("groupadd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if !testutil.Poll(10*time.Second, func() bool { return exec.Command("groupdel", name).Run() == nil }) {
			t.Errorf("groupdel %s failed", name)
		}
	})
	g, err := user.LookupGroup(name)
	if err != nil {
		t.Fatal(err)
	}
	var gid uint32
	fmt.Sscan(g.Gid, &gid)
	return gid
}

// identityScript prints the run's identity, environment and cwd, one
// item a line.
const identityScript = `id -u; id -g; id -G; echo "HOME=$HOME"; echo "USER=$USER"; echo "LOGNAME=$LOGNAME"; echo "SHELL=$SHELL"; echo "PATH=$PATH"; pwd`

// TestRunAsNamedAccount: a request naming an account (by name, or as
// "#UID") runs every stage with that account's uid, primary gid and
// supplementary groups (as initgroups gives them, not the requester's or
// root's), its HOME, USER, LOGNAME and SHELL from passwd and the
// daemon's fixed PATH; run_as_group replaces only the primary gid. The
// audit log records what was named and what it resolved to.
func TestRunAsNamedAccount(t *testing.T) {
	t.Parallel()
	sup := addGroup(t, "rgrasup")
	other := addGroup(t, "rgraoth")
	acct := addAccount(t, "rgra1", "-m", "-U", "-s", "/bin/sh", "-G", "rgrasup")
	d := startDaemon(t, opts{Policy: "allow privileged,runas=rgra1 sh -c ...\n" +
		"allow privileged,runas=rgra1,rungroup=rgraoth sh -c ...\n" +
		"allow privileged sh -c ...\n"})
	home := "/home/rgra1"
	want := func(gid uint32) string {
		return fmt.Sprintf("%d\n%d\n%s\nHOME=%s\nUSER=rgra1\nLOGNAME=rgra1\nSHELL=/bin/sh\nPATH=%s\n/\n",
			acct.uid, gid, groupsLine(gid, acct.gid, sup), home, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	}
	for _, name := range []string{"rgra1", fmt.Sprintf("#%d", acct.uid)} {
		r := wantOK(t, d.send(map[string]any{"id": "ra-" + name, "run_as": name, "pipeline": [][]string{{"sh", "-c", identityScript}}}))
		if got := string(r.Stdout); got != want(acct.gid) {
			t.Fatalf("run_as %q printed\n%s\nwant\n%s", name, got, want(acct.gid))
		}
	}
	// Every stage of a pipeline is the account.
	r := wantOK(t, d.send(map[string]any{"run_as": "rgra1", "pipeline": [][]string{{"sh", "-c", "id -u"}, {"sh", "-c", "cat; id -u"}}}))
	if got, w := string(r.Stdout), fmt.Sprintf("%d\n%d\n", acct.uid, acct.uid); got != w {
		t.Fatalf("pipeline as rgra1 printed %q, want %q", got, w)
	}
	// run_as_group: that primary gid, the account's groups kept.
	r = wantOK(t, d.send(map[string]any{"id": "ra-group", "run_as": "rgra1", "run_as_group": "rgraoth", "pipeline": [][]string{{"sh", "-c", identityScript}}}))
	if got := string(r.Stdout); got != want(other) {
		t.Fatalf("run_as_group printed\n%s\nwant\n%s", got, want(other))
	}
	// run_as root is the plain privileged run.
	r = wantOK(t, d.send(map[string]any{"run_as": "root", "pipeline": [][]string{{"sh", "-c", "id -u; echo $HOME"}}}))
	if got := string(r.Stdout); got != "0\n/root\n" {
		t.Fatalf("run_as root printed %q", got)
	}

	// The audit log: the request as named, the run as resolved.
	rs := waitTrail(t, d.Dir, "ra-rgra1", "received decided started finished")
	if q := rs[0].Request; q == nil || q.RunAs != "rgra1" || q.RunAsGroup != "" {
		t.Fatalf("received record: %+v", rs[0].Request)
	}
	if run := rs[2].Run; run == nil || run.RunAsUID != acct.uid || run.RunAsGID != acct.gid || run.RunAsUser != "rgra1" || !containsAll(run.Groups, acct.gid, sup) {
		t.Fatalf("started record: %+v", rs[2].Run)
	}
	rs = waitTrail(t, d.Dir, "ra-group", "received decided started finished")
	if q := rs[0].Request; q == nil || q.RunAs != "rgra1" || q.RunAsGroup != "rgraoth" {
		t.Fatalf("received record: %+v", rs[0].Request)
	}
	if run := rs[2].Run; run == nil || run.RunAsUID != acct.uid || run.RunAsGID != other {
		t.Fatalf("started record: %+v", rs[2].Run)
	}
	if rs[1].Decision == nil || rs[1].Decision.PolicyLine != 2 {
		t.Fatalf("decided record: %+v", rs[1].Decision)
	}
}

// groupsLine is `id -G` for a process with primary group gid and the
// supplementary groups groups: the primary first, then the others in the
// order the kernel keeps them (ascending).
func groupsLine(gid uint32, groups ...uint32) string {
	slices.Sort(groups)
	out := []string{fmt.Sprint(gid)}
	for _, g := range groups {
		if g != gid {
			out = append(out, fmt.Sprint(g))
		}
	}
	return strings.Join(out, " ")
}

func containsAll(have []uint32, want ...uint32) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			found = found || h == w
		}
		if !found {
			return false
		}
	}
	return true
}

// TestRunAsPolicyScope: a rule naming runas=ACCOUNT allows that account
// only, neither root nor another account; a rule without runas= (written
// for root, or `any`) admits no named account, so an agent cannot turn
// `allow privileged CMD` into CMD as any account; a deny rule without
// runas= still denies a run as any account. Checked with check requests
// (what the policy decides) and with real runs: what no rule allows is
// put to a person, and with none attached is denied.
func TestRunAsPolicyScope(t *testing.T) {
	t.Parallel()
	addAccount(t, "rgra2", "-M", "-U", "-s", "/bin/sh")
	addAccount(t, "rgra3", "-M", "-U", "-s", "/bin/sh")
	d := startDaemon(t, opts{Policy: "deny any rm ...\n" +
		"allow privileged,runas=rgra2 id -un\n" +
		"allow privileged whoami\n" +
		"allow any,env=* true\n"})
	for _, tc := range []struct {
		name, runAs string
		argv        []string
		check       string
		rule        string
	}{
		{"runas rule, its account", "rgra2", []string{"id", "-un"}, wire.CheckAllow, "allow privileged,runas=rgra2 id -un"},
		{"runas rule, another account", "rgra3", []string{"id", "-un"}, wire.CheckAsk, ""},
		{"runas rule, root", "", []string{"id", "-un"}, wire.CheckAsk, ""},
		{"runas rule, root by name", "root", []string{"id", "-un"}, wire.CheckAsk, ""},
		{"plain rule, root", "", []string{"whoami"}, wire.CheckAllow, "allow privileged whoami"},
		{"plain rule, root by name", "root", []string{"whoami"}, wire.CheckAllow, "allow privileged whoami"},
		{"plain rule, an account", "rgra2", []string{"whoami"}, wire.CheckAsk, ""},
		{"any rule, an account", "rgra2", []string{"true"}, wire.CheckAsk, ""},
		{"deny rule, an account", "rgra2", []string{"rm", "/nonexistent"}, wire.CheckDeny, "deny any rm ..."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			over := map[string]any{"pipeline": [][]string{tc.argv}, "check": true}
			if tc.runAs != "" {
				over["run_as"] = tc.runAs
			}
			r := wantOK(t, d.send(over))
			rule := ""
			if r.DecidedBy != nil {
				rule = r.DecidedBy.Rule
			}
			if r.Check != tc.check || rule != tc.rule {
				t.Fatalf("check: %s, want %s by %q", strings.TrimSpace(r.raw), tc.check, tc.rule)
			}
			// The real request: allowed ones run as the account, the
			// others are not run.
			delete(over, "check")
			r = d.send(over)
			switch tc.check {
			case wire.CheckAllow:
				who := tc.runAs
				if who == "" {
					who = "root"
				}
				if wantOK(t, r); string(r.Stdout) != who+"\n" {
					t.Fatalf("ran as %q, want %q", r.Stdout, who)
				}
			case wire.CheckAsk:
				if r.Status != wire.StatusDenied || r.Code != wire.CodeNoApprover {
					t.Fatalf("got %s, want it put to a person (none attached)", strings.TrimSpace(r.raw))
				}
			case wire.CheckDeny:
				if r.Status != wire.StatusDenied || r.Code != wire.CodeDeniedByPolicy {
					t.Fatalf("got %s, want denied by the policy", strings.TrimSpace(r.raw))
				}
			}
		})
	}
}

// TestRunAsRefused: what cannot run as a named account is refused
// plainly before anyone is asked (the daemon's policy asks about
// everything, and no approver is attached, so a prompt would end in a
// denial, not these errors): run_as with "privileged": false, an
// account or group that does not exist, and a cwd the account cannot
// enter, though root could.
func TestRunAsRefused(t *testing.T) {
	t.Parallel()
	addAccount(t, "rgra4", "-M", "-U", "-s", "/bin/sh")
	d := startDaemon(t, opts{Policy: "ask any\n"})
	private := filepath.Join(shortDir(t), "private")
	if err := os.Mkdir(private, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		over map[string]any
		code string
		msg  string
	}{
		{"unprivileged", map[string]any{"run_as": "rgra4", "privileged": false}, wire.CodeInvalidRequest,
			`run_as needs "privileged": true: a request with "privileged": false runs as its requester`},
		{"forward_agent", map[string]any{"run_as": "rgra4", "privileged": false, "forward_agent": true}, wire.CodeInvalidRequest,
			`run_as needs "privileged": true: a request with "privileged": false runs as its requester`},
		{"no such user", map[string]any{"run_as": "rgranouser"}, wire.CodeNoUser, `cannot run as user "rgranouser": no such user`},
		{"no such uid", map[string]any{"run_as": "#3999999999"}, wire.CodeNoUser, `cannot run as uid 3999999999: no such user`},
		{"no such group", map[string]any{"run_as": "rgra4", "run_as_group": "rgranogroup"}, wire.CodeNoUser, `cannot run as group "rgranogroup": no such group`},
		{"cwd the account cannot enter", map[string]any{"run_as": "rgra4", "cwd": private}, wire.CodeCwd, fmt.Sprintf("cwd %q: permission denied", private)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := d.send(tc.over)
			wantError(t, r, tc.msg)
			if r.Code != tc.code {
				t.Fatalf("code %q, want %q", r.Code, tc.code)
			}
		})
	}
	// Root may enter the directory: it is the account that may not.
	r := d.send(map[string]any{"cwd": private})
	if r.Status != wire.StatusDenied || r.Code != wire.CodeNoApprover {
		t.Fatalf("root in %s: %s", private, strings.TrimSpace(r.raw))
	}
}

// TestRunAsPrompt: a person asked about a run as a named account sees
// it first, above everything else, with its uid and gid, and asked to
// run the command as that account, not as root; approving it runs as
// that account. The real `rootgate approve` on a pty.
func TestRunAsPrompt(t *testing.T) {
	t.Parallel()
	acct := addAccount(t, "rgra5", "-M", "-U", "-s", "/bin/sh")
	d := approverDaemon(t, "--prompt-timeout", "60s")
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	ch := d.ask(map[string]any{"id": "ra-prompt", "run_as": "rgra5", "pipeline": [][]string{{"id", "-un"}}})
	head := fmt.Sprintf("RUN AS rgra5 (uid %d, gid %d)", acct.uid, acct.gid)
	a.See(head)
	a.See(fmt.Sprintf("Run this command as rgra5 (uid %d)?", acct.uid))
	// The line right above the request's header is the run-as line.
	lines := strings.Split(a.Screen.Text(), "\n")
	at := -1
	for i, l := range lines {
		if strings.Contains(l, "rootgate approval request") {
			at = i
		}
	}
	if at < 1 || !strings.Contains(lines[at-1], head) {
		t.Fatalf("the prompt does not start with %q:\n%s", head, a.Screen.Text())
	}
	if strings.Contains(a.Screen.Text(), "ROOT") {
		t.Fatalf("a run as rgra5 is shown as root:\n%s", a.Screen.Text())
	}
	a.pageToEnd()
	a.Key("y")
	r := wantOK(t, <-ch)
	if string(r.Stdout) != "rgra5\n" {
		t.Fatalf("approved run printed %q", r.Stdout)
	}
	rs := waitTrail(t, d.Dir, "ra-prompt", "received decided started finished")
	if run := rs[2].Run; run == nil || run.RunAsUID != acct.uid || run.RunAsUser != "rgra5" {
		t.Fatalf("started record: %+v", rs[2].Run)
	}
}

// TestRunAsGrant: a standing grant given for a run as a named account
// allows that run again, as that account only: the same command as root,
// as another account or with a group named is put to a person.
func TestRunAsGrant(t *testing.T) {
	t.Parallel()
	addAccount(t, "rgra6", "-M", "-U", "-s", "/bin/sh")
	addAccount(t, "rgra7", "-M", "-U", "-s", "/bin/sh")
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	run := [][]string{{"id", "-un"}}
	ch := d.ask(map[string]any{"id": "ra-grant-1", "pipeline": run, "run_as": "rgra6"})
	a.See("RUN AS rgra6")
	a.grantIt(ch)
	if r := wantOK(t, <-ch); string(r.Stdout) != "rgra6\n" {
		t.Fatalf("the granted run printed %q", r.Stdout)
	}
	r := d.send(map[string]any{"id": "ra-grant-2", "pipeline": run, "run_as": "rgra6"})
	wantGrant(t, r, "g1")
	if string(r.Stdout) != "rgra6\n" {
		t.Fatalf("the run the grant allowed printed %q", r.Stdout)
	}
	for _, c := range []struct {
		id   string
		over map[string]any
	}{
		{"ra-grant-root", map[string]any{"pipeline": run}},
		{"ra-grant-other", map[string]any{"pipeline": run, "run_as": "rgra7"}},
		{"ra-grant-group", map[string]any{"pipeline": run, "run_as": "rgra6", "run_as_group": "rgra7"}},
	} {
		c.over["id"] = c.id
		a.wantAsked(d.ask(c.over), c.id)
	}
	if list := grants(t, d.asock()); !strings.Contains(list, "as rgra6 in /") {
		t.Fatalf("rootgate grants:\n%s", list)
	}
}

// TestGroupAloneRunsAsRequester: a request naming a group and no account
// runs as its requester with that group, as sudo -g does, whatever
// client sent it: an agent writing the request itself, run_as left out,
// does not get root with that group, which a rule written for the group
// on root's runs (rungroup= without runas=) would allow. Root asking
// gets root with the group.
func TestGroupAloneRunsAsRequester(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rgrag")
	addGroup(t, "rgragrp")
	d := startDaemon(t, opts{Policy: "allow privileged,rungroup=rgragrp id -un\n" +
		"allow privileged,runas=rgrag,rungroup=rgragrp id -un\n" +
		"allow privileged,runas=rgrag,rungroup=rgragrp id -gn\n"})
	openToAll(t, d)
	line := request(map[string]any{"pipeline": [][]string{{"id", "-un"}}, "run_as_group": "rgragrp"})
	r := wantOK(t, sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, line))
	if got := string(r.Stdout); got != "rgrag\n" {
		t.Fatalf("run_as_group alone from %s ran as %q, want the requester", ag.name, got)
	}
	line = request(map[string]any{"pipeline": [][]string{{"id", "-gn"}}, "run_as_group": "rgragrp"})
	if r := wantOK(t, sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, line)); string(r.Stdout) != "rgragrp\n" {
		t.Fatalf("run_as_group alone ran with group %q, want rgragrp", r.Stdout)
	}
	if r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"id", "-un"}}, "run_as_group": "rgragrp"})); string(r.Stdout) != "root\n" {
		t.Fatalf("run_as_group alone from root ran as %q, want root", r.Stdout)
	}
}
