package daemon_test

import (
	"strings"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// A requester that sends the same command twice, the first with a short
// time limit ("timeout"), the second with none, within the grouping
// window: the prompt shows the first one's time limit, and one y must
// never run the second with the daemon's whole --exec-timeout, which no
// one was shown.
func TestPromptGroupKeepsTimeLimitsApart(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s", "--max-pending", "8", "--group-within", "3s"}})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	run := [][]string{{"sleep", "2"}}
	short := d.ask(map[string]any{"id": "tl-short", "pipeline": run, "privileged": true, "timeout": 1})
	d.waitLog("asking for approval", "tl-short")
	long := d.ask(map[string]any{"id": "tl-long", "pipeline": run, "privileged": true})
	d.waitLog("asking for approval", "tl-long")

	a.See("tl-short")
	a.See("Time limit:  1s")
	a.notAnswered(short, "no key yet")
	if txt := a.Screen.Text(); strings.Contains(txt[strings.LastIndex(txt, "tl-short"):], "IDENTICAL REQUESTS") {
		t.Fatalf("a request with another time limit was grouped with the one shown:\n%s", txt)
	}
	a.Key("y")
	if r := <-short; r.Status != wire.StatusTimeout || r.Code != wire.CodeRunTimeout {
		t.Fatalf("tl-short: got %s, want its run killed at its 1s limit", r.raw)
	}
	// The other is asked about on its own, showing its own limit.
	pending(t, long, "tl-long after tl-short's y")
	a.See("tl-long")
	a.See("Time limit:  300s")
	a.wantAsked(long, "tl-long")
}
