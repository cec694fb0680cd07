package approver

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/approval/remote"
)

// Whatever a status message holds, the idle screen is lines of visible
// text: no escape sequence, control character or invisible rune, one
// line per entry, none wider than the window.
func TestIdleLinesEscapeEverything(t *testing.T) {
	bad := "\x1b]0;title\x07\x1b[2J\r\n  g9  root (uid 0)  ends 23:59:59\t\u202e\u200b\x9b31m\xff"
	now := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	st := &remote.Message{
		Queue:     []remote.QueueItem{{ID: bad, UID: 1000, User: bad, Pipeline: [][]string{{"echo", bad}, {bad}}, Since: now.Add(-time.Minute), Count: 2}},
		Grants:    []remote.GrantInfo{{ID: bad, UID: 1000, User: bad, Pipeline: [][]string{{bad}}, RunAs: bad, Cwd: bad, Ends: now.Add(time.Hour)}},
		Decisions: []remote.DecisionInfo{{ID: bad, UID: 1000, User: bad, Pipeline: [][]string{{bad}}, Time: now, Verdict: bad, By: bad}},
	}
	lines := idleLines(st, now, 300, 100)
	entries := 0
	for _, l := range lines {
		if !utf8.ValidString(l) {
			t.Errorf("invalid UTF-8 in %q", l)
		}
		for _, r := range l {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\u202e' || r == '\u200b' {
				t.Errorf("rune %U in line %q", r, l)
			}
		}
		if strings.Contains(l, "title") {
			entries++
		}
	}
	if entries != 3 {
		t.Errorf("the queue, grant and decision entries are %d lines, want 3:\n%s", entries, strings.Join(lines, "\n"))
	}
	for _, l := range idleLines(st, now, 40, 100) {
		if w := utf8.RuneCountInString(l); w > 40 {
			t.Errorf("a line of %d characters at 40 columns: %q", w, l)
		}
	}
	// A window too short says what it leaves out.
	short := idleLines(st, now, 80, 6)
	if len(short) != 5 || !strings.Contains(short[4], "more lines: enlarge the window") {
		t.Errorf("at 6 rows:\n%s", strings.Join(short, "\n"))
	}
}

// A requester's id, spaces and all, comes after the daemon's columns,
// quoted and cut short, in the queue and in the decisions alike.
func TestIdleLinesIDAfterDaemonColumns(t *testing.T) {
	id := "7f3a  denied    by person root (uid 0) on pts/1  cloudsdk (uid 1000)  id" + strings.Repeat(" ", 40)
	now := time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC)
	st := &remote.Message{
		Queue:     []remote.QueueItem{{ID: id, UID: 1000, User: "agent", Pipeline: [][]string{{"true"}}, Since: now}},
		Decisions: []remote.DecisionInfo{{ID: id, UID: 1000, User: "agent", Pipeline: [][]string{{"true"}}, Time: now, Verdict: "allow", By: "rule /p:1"}},
	}
	rows := 0
	for _, l := range idleLines(st, now, 300, 100) {
		i := strings.Index(l, "7f3a")
		if i < 0 {
			continue
		}
		rows++
		if !strings.Contains(l, "agent (uid 1000)") || strings.Index(l, "agent (uid 1000)") > i ||
			!strings.Contains(l, "id '7f3a  denied    by pe…  true") {
			t.Errorf("the id is not quoted, cut and after the daemon's columns: %q", l)
		}
	}
	if rows != 2 {
		t.Errorf("%d rows show the id, want 2", rows)
	}
}
