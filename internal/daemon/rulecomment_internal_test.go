package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/wire"
)

// TestRuleCommentClipsTheCommand: the comment above a saved rule quotes
// the request's command cut short, so that a request of a megabyte of
// arguments cannot fill the drop-in file, whose size is limited, and
// make every later save fail.
func TestRuleCommentClipsTheCommand(t *testing.T) {
	argv := []string{"echo"}
	for range 1000 {
		argv = append(argv, strings.Repeat("a", 1000))
	}
	p := &runPlan{req: &wire.Request{ID: "big"}}
	prompt := &approval.Prompt{Stages: []approval.Stage{{Argv: argv}}}
	d := &approval.Decision{Member: &approval.Member{Name: "root"}}
	c := ruleComment(p, prompt, d, time.Now())
	if len(c) > 16<<10 {
		t.Fatalf("the comment of a saved rule is %d bytes for a 1 MB command", len(c))
	}
	if !strings.Contains(c, "echo 'aaaa") || !strings.Contains(c, "words)") {
		t.Errorf("the comment does not show the command's start and what was cut: %.300s", c)
	}
}
