package approver

import (
	"fmt"
	"strings"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/termsafe"
)

// The idle screen: what `rootgate approve` shows on its terminal while no
// prompt is up, below its status lines, drawn again in place on each
// change (a status message, a status line printed above it, a resize):
// the requests waiting for a person, the standing grants, the last
// decisions with who made them. Every word of
// a requester's (ids, argv, user names) goes through termsafe, as in a
// prompt, so nothing on it can be a terminal control sequence.

// headingMark opens the idle screen's headings: its first line, and
// each daemon's when there are several. No other line starts with it.
const headingMark = "── "

// idleLines is the idle screen for status st (nil: none came yet) at
// now, in a window width cells wide and height rows high: each line cut
// to width, and at most height-1 lines.
func idleLines(st *remote.Message, now time.Time, width, height int) []string {
	return idleScreen([]daemonStatus{{st: st}}, now, width, height)
}

// daemonStatus is one daemon's part of the idle screen: its last status
// (nil: none came yet), whether the client is connected to it now (down:
// not), and, when the client is attached to several, its label (host
// name and socket, already escaped), heading its part.
type daemonStatus struct {
	label string
	st    *remote.Message
	down  bool
}

// idleScreen is the idle screen for the statuses of every daemon
// attached, in order, as idleLines draws one.
func idleScreen(sts []daemonStatus, now time.Time, width, height int) []string {
	out := []string{headingMark + "rootgate approve · idle · keys typed here are ignored: they answer nothing"}
	for _, ds := range sts {
		if ds.label != "" {
			out = append(out, headingMark+"from rootgated on "+ds.label)
		}
		if ds.down {
			out = append(out, "(not connected to rootgated: it is not running, or its socket cannot be reached; retrying)")
			continue
		}
		out = append(out, idleBody(ds.st, now)...)
	}
	if height > 1 && len(out) > height-1 {
		cut := len(out) - (height - 2)
		out = append(out[:height-2], fmt.Sprintf("… %d more lines: enlarge the window to see them", cut))
	}
	for i, l := range out {
		out[i] = cutTo(l, width)
	}
	return out
}

// idleBody is what the idle screen says of one daemon's status st.
func idleBody(st *remote.Message, now time.Time) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch {
	case st == nil:
		add("(connected; no status from rootgated yet: a version older than this client's sends none)")
	default:
		add("Waiting for a person (%d):", len(st.Queue))
		for _, q := range st.Queue {
			count := ""
			if q.Count > 1 {
				count = fmt.Sprintf("  ×%d identical", q.Count)
			}
			add("  %s  waiting %s%s  %s  %s", who(q.User, q.UID),
				age(now.Sub(q.Since)), count, idText(q.ID), pipelineText(q.Pipeline))
		}
		if len(st.Queue) == 0 {
			add("  none")
		}
		add("Standing grants (%d):", len(st.Grants))
		for _, g := range st.Grants {
			ends := "ends " + g.Ends.Local().Format("15:04:05")
			if !now.Before(g.Ends) {
				ends = "ENDED " + g.Ends.Local().Format("15:04:05")
			}
			add("  %s  %s  %s  uses %d  %s  (as %s in %s)", termsafe.Sanitize(g.ID), who(g.User, g.UID), ends, g.Uses,
				pipelineText(g.Pipeline), g.RunsAs(), termsafe.Quote(g.Cwd))
		}
		if len(st.Grants) == 0 {
			add("  none")
		}
		add("Last decisions (newest first):")
		for _, d := range st.Decisions {
			count := ""
			if d.Count > 1 {
				count = fmt.Sprintf(" (one answer for %d identical)", d.Count)
			}
			add("  %s  %-9s by %s%s  %s  %s  %s", d.Time.Local().Format("15:04:05"),
				termsafe.Sanitize(d.Verdict), termsafe.Sanitize(d.By), count, who(d.User, d.UID), idText(d.ID), pipelineText(d.Pipeline))
		}
		if len(st.Decisions) == 0 {
			add("  none yet")
		}
		if st.More > 0 {
			add("(%d more queued requests or grants not listed here: rootgate grants lists every grant)", st.More)
		}
		if st.Hidden > 0 {
			add("(%d more of requesters who can control this terminal, not shown)", st.Hidden)
		}
	}
	return out
}

// idCells is the most cells a request's id takes on the idle screen:
// enough for a short name, or for a UUID's first three groups, which
// tell one request from the others on the screen.
const idCells = 24

// idText is a request's id for the idle screen: "id " and the id quoted
// as one shell word, cut to idCells and ended with "…" when longer. The
// id is the requester's own, up to 128 characters, spaces allowed: shown
// bare and first on a row, one padded with spaces said "denied by
// person …" there and pushed the daemon's columns off the window's edge.
// It comes after the daemon's columns, labelled, quoted and short, so
// it can neither pass for them nor push them off.
func idText(id string) string {
	q := termsafe.Quote(id)
	if termsafe.Cells(q) > idCells {
		q, _ = termsafe.Cut(q, idCells-2)
		q += "…"
	}
	return "id " + q
}

// who is a requester for the idle screen.
func who(user string, uid int) string {
	return fmt.Sprintf("%s (uid %d)", termsafe.Sanitize(user), uid)
}

// pipelineText is a pipeline for the idle screen, each word quoted as a
// prompt quotes it.
func pipelineText(p [][]string) string {
	parts := make([]string, len(p))
	for i, argv := range p {
		parts[i] = approval.QuoteArgv(argv)
	}
	return strings.Join(parts, " | ")
}

// age is a duration for the idle screen, in whole seconds.
func age(d time.Duration) string {
	return max(d, 0).Truncate(time.Second).String()
}

// cutTo cuts s, safe text (no control sequences), to width cells (at
// least 20) as [termsafe.Cells] counts them, ending it with "…" when it
// did: a requester's argument measured short would wrap on the terminal
// and start rows with its own text, passing for entries of the screen.
func cutTo(s string, width int) string {
	width = max(width, 20)
	if termsafe.Cells(s) <= width {
		return s
	}
	kept, _ := termsafe.Cut(s, width-2)
	return kept + "…"
}
