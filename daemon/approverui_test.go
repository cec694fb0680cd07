package daemon_test

import (
	"fmt"
	"os/user"
	"strconv"
	"testing"
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
