package daemon_test

import (
	"fmt"
	"os/user"
	"strconv"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// What the approver sees of a request, against a requester that shapes
// its request so that the screen says less than the run gets: the real
// rootgated, the real `rootgate approve` on a pty or in tmux.

// TestPromptNamesGroupOfGroupAloneRequest: a request naming a group and
// no account (`rootgate sudo -g shadow`) runs as its requester with
// that group. The approver's question, the Run-as line and, once
// granted, the grant's row on the idle screen all name the group: a
// question asking only "as auiag (uid N)?" would have the operator
// approve a read of /etc/shadow as an ordinary run of the requester's.
func TestPromptNamesGroupOfGroupAloneRequest(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "auiag", "-M", "-U", "-s", "/bin/sh")
	g, err := user.LookupGroup("shadow")
	if err != nil {
		t.Fatalf("the group shadow: %v", err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	d := promptDaemon(t)
	openToAll(t, d)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	ch := askAs(d, ag, []uint32{ag.gid}, request(map[string]any{"id": "aui-group", "run_as_group": "shadow",
		"pipeline": [][]string{{"id", "-gn"}}}))
	a.See(fmt.Sprintf("Run this command as auiag (uid %d) WITH GROUP shadow (gid %d)?", ag.uid, gid))
	a.See(fmt.Sprintf("the requester's own account WITH GROUP shadow (gid %d), a group it may not have", gid))
	a.grantIt(ch)
	if r := wantOK(t, <-ch); string(r.Stdout) != "shadow\n" {
		t.Fatalf("the approved run printed %q, want its group shadow", r.Stdout)
	}
	a.idleShows("Standing grants (1):", "(as auiag WITH GROUP shadow in ")
}

// TestIdleScreenIDCannotFakeColumns: a request's id is the requester's,
// up to 128 characters with spaces. Padded to say "denied by person"
// where the verdict stands and pushing the daemon's columns off the
// window's edge, it made a run the policy allowed read, on the idle
// screen of `rootgate approve` in a tmux window, as denied by a person.
// The row must still show the real verdict and decider, and the id only
// quoted and cut short, after them.
func TestIdleScreenIDCannotFakeColumns(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "allow any echo ruled\nask any\n"})
	ta := rgtest.StartTmuxApprover(t, d.asock(), 120, 30)
	ta.Wait("Last decisions (newest first):")
	fake := "7f3a  denied    by person root (uid 0) on pts/1  cloudsdk (uid 1000)  id" + strings.Repeat(" ", 40)
	wantOK(t, d.send(map[string]any{"id": fake, "pipeline": [][]string{{"echo", "ruled"}}}))
	rows := ta.Wait("7f3a")
	var row string
	for _, r := range rows {
		if strings.Contains(r, "7f3a") {
			row = r
		}
	}
	verdict := strings.Index(row, "allow     by rule "+d.Dir)
	id := strings.Index(row, "id '7f3a  denied")
	if verdict < 0 || id < verdict || strings.Count(row, "denied") != 1 || strings.Contains(row, "cloudsdk") {
		t.Fatalf("the decision's row does not show the rule's allow first and the id quoted and cut after it: %q\nthe window:\n%s",
			row, strings.Join(rows, "\n"))
	}
}
