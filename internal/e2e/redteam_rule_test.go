package e2e

import (
	"os"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
)

// The rule editor (r) sized and wrapped its text field by Go's grapheme
// measure: an argument of spacing marks (U+0903), one cell to it and one
// cell each to tmux, made the field one row tall, hiding the start of the
// rule, and that row wrapped on the terminal; the prompt's redraw moves up
// by the lines it wrote, so each redraw left rows of the old screen above
// the new one until they filled the window.
func TestRuleEditorWidthTricksKeepItsLines(t *testing.T) {
	t.Parallel()
	d := ruleDaemon(t)
	ta := rgtest.StartTmuxApprover(t, d.asock(), 80, 60)
	// Attached: the idle screen is drawn before the client connects.
	ta.Wait("attached to rootgated")
	ch := d.ask(map[string]any{"id": "rule-wide", "pipeline": [][]string{{"echo", "HIDDEN-MARKER", strings.Repeat("\u0903", 300)}}, "privileged": true})
	ta.WaitRows("the prompt, whole", func(rows []string) bool {
		return hasRow(rows, " y approve · n or Esc deny")
	})
	ta.Key("r")
	ta.Wait("RULE: edit it")
	ta.Key("x") // a key redraws the view
	// The whole rule shows, below the command, once.
	ta.WaitRows("the editor holding the whole rule, each row its own line", func(rows []string) bool {
		return hasRow(rows, "SAVE A POLICY RULE: edit the rule below") && hasRow(rows, "  [1] echo HIDDEN-MARKER ") &&
			hasRow(rows, "│ allow privileged,user=root,cwd=/,stdin=none echo HIDDEN-MARKER") && hasRow(rows, " RULE: edit it · Enter check it")
	})
	ta.Key("\x03") // ctrl+c denies
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want the operator's denial", r.raw)
	}
}

// A request from root is put to every approver, one its uid's agent can
// type into included. The rule saved from its prompt (r) is not bound to
// the requester once user= is dropped: an approver controlled by uid X
// (here run as nobody, admitted with --approver) saved, on root's
// request, a rule that let X run the same command as root without anyone
// asked, though no request of X's is ever put to that approver.
func TestRuleFromRootsPromptNotForController(t *testing.T) {
	t.Parallel()
	const nobody = 65534
	d := startDaemon(t, opts{Policy: "# asks about everything\ndeny any rm -rf /\n", Args: []string{"--prompt-timeout", "60s", "--approver", "nobody"}})
	openToAll(t, d)
	a := startApprover(t, d.asock(), nobody)
	a.See("attached to rootgated")
	run := [][]string{{"echo", "self-rule"}}
	const rule = "allow privileged,user=root,cwd=/,stdin=none echo self-rule"
	ch := d.ask(map[string]any{"id": "root-asks", "pipeline": run, "privileged": true})
	a.See("root-asks")
	a.startRule(ch, rule)
	a.editRule(len(rule), "allow privileged,cwd=/,stdin=none echo self-rule") // every requester
	a.Key(keyEnter)
	a.See(dropIn(d))
	a.See("RULE: y approve and save this rule")
	a.Key("y")
	wantOK(t, <-ch) // the person approved root's request once
	if b, err := os.ReadFile(dropIn(d)); err == nil && strings.Contains(string(b), "self-rule") {
		t.Fatalf("%s holds the rule:\n%s", dropIn(d), b)
	}
	// nobody's own request is put to no one: its approver is its own.
	r, err := trySendAs(d.Sock, nobody, nobody, []uint32{}, request(map[string]any{"id": "nobody-asks", "pipeline": run, "privileged": true}))
	if err != nil || r.Status == wire.StatusOK {
		t.Fatalf("nobody's request: %v %s, want it refused", err, r.raw)
	}
	a.See("rule NOT saved: the rule would let uid 65534 (nobody), who can control this approver's terminal or session, run this without asking")
}
