package daemon_test

import (
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
	ta.Wait("keys typed here are ignored")
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
			hasRow(rows, "│ allow privileged,user=root echo HIDDEN-MARKER") && hasRow(rows, " RULE: edit it · Enter check it")
	})
	ta.Key("\x03") // ctrl+c denies
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want the operator's denial", r.raw)
	}
}
