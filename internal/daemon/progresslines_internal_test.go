package daemon

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// TestProgressLinesHeld: a progress line other than approval is held; a
// later line, or the answer, that comes first drops it, and an approval
// line is written at once. Held lines are written once their hold has
// passed, in order, and none after the answer.
func TestProgressLinesHeld(t *testing.T) {
	t.Parallel()
	lines := func(b *testutil.SyncBuffer) []string {
		return strings.Fields(strings.ReplaceAll(b.String(), `"`, ""))
	}
	t.Run("superseded and ended: nothing but approval", func(t *testing.T) {
		var b testutil.SyncBuffer
		p := &progressLines{w: &b, hold: time.Hour, log: slog.New(slog.DiscardHandler)}
		p.send("a", wire.ProgressReceived, time.Minute)
		p.send("a", wire.ProgressApproval, time.Minute)
		p.send("a", wire.ProgressRunning, time.Minute)
		p.end()
		p.send("a", wire.ProgressApproval, time.Minute)
		if got := lines(&b); len(got) != 1 || got[0] != "{id:a,progress:approval,within:60}" {
			t.Fatalf("wrote %q, want the first approval line alone", got)
		}
	})
	t.Run("held past its hold: written", func(t *testing.T) {
		var b testutil.SyncBuffer
		p := &progressLines{w: &b, hold: time.Nanosecond, log: slog.New(slog.DiscardHandler)}
		p.send("a", wire.ProgressRunning, 2*time.Second)
		testutil.Poll(30*time.Second, func() bool { return len(lines(&b)) > 0 })
		p.end()
		if got := lines(&b); len(got) != 1 || got[0] != "{id:a,progress:running,within:2}" {
			t.Fatalf("wrote %q, want the running line", got)
		}
	})
}
