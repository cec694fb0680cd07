package e2e

import (
	"fmt"
	"os/exec"
	"os/user"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/charmbracelet/x/ansi"
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
	acc := startApproverArgs(t, d.asock(), 0, "--accessible")
	acc.See("attached to rootgated")

	ch := askAs(d, ag, []uint32{ag.gid}, request(map[string]any{"id": "aui-group", "run_as_group": "shadow",
		"pipeline": [][]string{{"id", "-gn"}}}))
	question := fmt.Sprintf("Run this command as auiag (uid %d) WITH GROUP shadow (gid %d)?", ag.uid, gid)
	a.See(question)
	acc.See("That is the whole request. " + question)
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
	d := startDaemon(t, opts{Policy: "allow any echo ruled\n"})
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

// resizeTmux resizes ta's window to cols×rows.
func resizeTmux(t *testing.T, ta *rgtest.Tmux, cols, rows int) {
	t.Helper()
	if out, err := exec.Command("tmux", "-S", ta.Sock, "resize-window", "-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows)).CombinedOutput(); err != nil {
		t.Fatalf("tmux resize-window: %v: %s", err, out)
	}
}

// squeezed is the window's rows joined with their spaces taken out: a
// line the prompt wrapped at a narrow window's edge, read whole.
func squeezed(rows []string) string {
	return strings.ReplaceAll(strings.Join(rows, ""), " ", "")
}

// TestPromptTooNarrowRefusesY: in a window narrower than the prompt's
// layout needs, rows of the request were cut at the edge without a word
// (at 12 columns the Requester line came out as fragments) while y
// still approved. The prompt must say the window is too small and how
// many columns it needs, and refuse y, one column short of that too; at
// that width it shows the request whole and y approves. The window is
// tall enough that the whole request fits its pager: y is refused for
// want of room, not of paging. The real `rootgate approve` in tmux.
func TestPromptTooNarrowRefusesY(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	const height = 400
	ta := rgtest.StartTmuxApprover(t, d.asock(), 12, height)
	ta.WaitRows("the approver attached", func(rows []string) bool {
		return strings.Contains(squeezed(rows), "attachedtorootgated")
	})
	ch := d.ask(map[string]any{"id": "narrow", "privileged": true, "pipeline": [][]string{{"id", "-un"}}})

	needRe := regexp.MustCompile(`(yrefused:)?windowtoosmalltoshowtherequest:enlargeitto(\d+)columns\(ithas(\d+)\)`)
	// keyLine is the latest drawing's key line, when it says the window
	// is too small: whether it says y was refused, the columns it needs
	// and those it has. Earlier drawings stay above it, reflowed.
	keyLine := func(rows []string) (refused bool, need, has int, ok bool) {
		m := needRe.FindAllStringSubmatch(squeezed(rows), -1)
		if len(m) == 0 {
			return false, 0, 0, false
		}
		l := m[len(m)-1]
		need, _ = strconv.Atoi(l[2])
		has, _ = strconv.Atoi(l[3])
		return l[1] != "", need, has, true
	}
	// refusedAt waits until the window, cols wide, says it is too small,
	// types y and waits until it is refused; it returns the columns the
	// prompt says it needs.
	refusedAt := func(cols int) int {
		t.Helper()
		var need int
		ta.WaitRows(fmt.Sprintf("the prompt to say %d columns are too few", cols), func(rows []string) bool {
			refused, n, has, ok := keyLine(rows)
			need = n
			return ok && !refused && has == cols
		})
		ta.Key("y")
		ta.WaitRows("y refused", func(rows []string) bool {
			refused, _, has, ok := keyLine(rows)
			return ok && refused && has == cols
		})
		pending(t, ch, fmt.Sprintf("y at %d columns", cols))
		return need
	}
	need := refusedAt(12)
	if need <= 12 || need > 40 {
		t.Fatalf("the prompt says it needs %d columns", need)
	}
	resizeTmux(t, ta, need-1, height)
	if n := refusedAt(need - 1); n != need {
		t.Fatalf("at %d columns the prompt needs %d, at 12 %d", need-1, n, need)
	}

	// At the width it needs: no longer too small, the whole request on
	// screen, its Requester line wrapped whole onto rows that fit.
	resizeTmux(t, ta, need, height)
	// The latest drawing starts at its header; its key line, cut by fit
	// with a mark, starts " y appro".
	var rows []string
	ta.WaitRows("the prompt to accept y at its width", func(all []string) bool {
		at := -1
		for i, r := range all {
			if strings.HasPrefix(r, "rootgate approv") {
				at = i
			}
		}
		if at < 0 {
			return false
		}
		rows = all[at:]
		return slices.ContainsFunc(rows, func(r string) bool { return strings.HasPrefix(r, " y appro") })
	})
	var requester []string
	for i, r := range rows {
		if w := ansi.StringWidth(r); w > need {
			t.Errorf("row %d is %d cells wide in a window of %d: %q", i, w, need, r)
		}
		switch {
		case strings.HasPrefix(r, "  Requester:"):
			requester = append(requester, strings.TrimPrefix(r, "  Requester:"))
		case len(requester) == i-slices.IndexFunc(rows, func(r string) bool { return strings.HasPrefix(r, "  Requester:") }) &&
			strings.HasPrefix(r, "      ↳ "):
			requester = append(requester, strings.TrimPrefix(r, "      ↳ "))
		}
	}
	if got := squeezed(requester); !strings.HasPrefix(got, "root(uid0,gid0,pid") || !strings.HasSuffix(got, "perthekernel") {
		t.Fatalf("the Requester line reads %q (spaces taken out): rows\n%s", got, strings.Join(rows, "\n"))
	}
	ta.Key("y")
	if r := wantOK(t, <-ch); string(r.Stdout) != "root\n" {
		t.Fatalf("the approved run printed %q", r.Stdout)
	}
}
