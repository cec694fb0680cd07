package e2e

import (
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

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

	// Two prompts asked for at once reach the approver in either order:
	// each is asked about on its own, showing its own limit, and its
	// answer decides it alone. tl-short is approved (its run is killed at
	// its 1 s limit), tl-long denied.
	ask := func(id, limit string) {
		t.Helper()
		a.See("id:      " + id)
		at := a.Pos
		a.See(limit)
		if txt := a.Screen.Text(); strings.Contains(txt[at:], "IDENTICAL REQUESTS") {
			t.Fatalf("a request with another time limit was grouped with %s:\n%s", id, txt)
		}
	}
	first := "tl-long"
	testutil.WaitFor(t, "the first prompt", 30*time.Second, func() bool {
		txt := a.Screen.Text()[a.Pos:]
		s, l := strings.Index(txt, "id:      tl-short"), strings.Index(txt, "id:      tl-long")
		if s >= 0 && (l < 0 || s < l) {
			first = "tl-short"
		}
		return s >= 0 || l >= 0
	})
	approveShort := func() {
		ask("tl-short", "Time limit:  1s")
		a.notAnsweredKey(short, "y")
		if r := <-short; r.Status != wire.StatusTimeout || r.Code != wire.CodeRunTimeout {
			t.Fatalf("tl-short: got %s, want its run killed at its 1s limit", r.raw)
		}
		pending(t, long, "tl-long after tl-short's y")
	}
	denyLong := func() {
		ask("tl-long", "Time limit:  300s")
		a.notAnsweredKey(long, "n")
		if r := <-long; r.Status != wire.StatusDenied || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson {
			t.Fatalf("tl-long: got %s, want a person's denial", r.raw)
		}
		pending(t, short, "tl-short after tl-long's n")
	}
	if first == "tl-short" {
		approveShort()
		denyLong()
	} else {
		denyLong()
		approveShort()
	}
}

// Runes whose width Go's grapheme measure and the terminal disagree on:
// a spacing mark (U+0903) joins the cluster before it for the former and
// takes a cell of its own in tmux (glibc's wcwidth), a run of Hangul
// leading jamo is one 2-cell cluster for the former and 2 cells each in
// tmux. An argument of them measured short wrapped on the terminal into
// screenfuls and scrolled the request, its command and who asks out of
// the window; y counted with only the requester's tail and the form on
// screen.
func TestPromptWidthTricksKeepCommandOnScreen(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	ta := rgtest.StartTmuxApprover(t, d.asock(), 80, 24)
	// Attached: the idle screen is drawn before the client connects.
	ta.Wait("attached to rootgated")
	for _, c := range []struct{ id, pad string }{
		{"wide-mc", strings.Repeat("\u0903", 3000)},
		{"wide-jamo", strings.Repeat("\u1100", 1500)},
	} {
		ch := d.ask(map[string]any{"id": c.id, "pipeline": [][]string{{"echo", "HIDDEN-MARKER", c.pad, "  [1] apt-get update"}}, "privileged": true})
		// The prompt accepts keys, with the request's first line, who
		// asks and the command all in the window, each row its own line.
		ta.WaitRows(c.id+"'s prompt with its command on screen", func(rows []string) bool {
			return hasRow(rows, "rootgate approval request") && hasRow(rows, "Asked by root (uid 0") &&
				hasRow(rows, "  [1] echo HIDDEN-MARKER ") && hasRow(rows, "page to the end of the request before y counts")
		})
		ta.Key("n")
		if r := <-ch; r.Status != wire.StatusDenied {
			t.Fatalf("%s: got %s, want the operator's denial", c.id, r.raw)
		}
	}
}

// hasRow reports whether a row starts with prefix.
func hasRow(rows []string, prefix string) bool {
	return slices.ContainsFunc(rows, func(r string) bool { return strings.HasPrefix(strings.TrimLeft(r, " "), strings.TrimLeft(prefix, " ")) })
}

// The idle screen of a second approver lists the request waiting at the
// first. Its arguments of Hangul leading jamo, one 2-cell grapheme to
// uniseg and two cells each to tmux, wrapped on the terminal over
// screenfuls: the screen's header
// and sections scrolled away and rows started with the requester's text,
// which could pass for the screen's own entries (a decision, a grant).
func TestIdleScreenWidthTricksKeepItsLines(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	argv := []string{"echo", "HIDDEN-MARKER"}
	for range 20 { // the status keeps 24 words of 120 characters
		argv = append(argv, strings.Repeat("\u1100", 120))
	}
	ch := d.ask(map[string]any{"id": "idle-wide", "pipeline": [][]string{argv}, "privileged": true})
	a.See("┊ id:      idle-wide") // its prompt, not a's idle screen as it gathers
	b := rgtest.StartTmuxApprover(t, d.asock(), 160, 24)
	b.WaitRows("the idle screen with the request queued, every line on screen", func(rows []string) bool {
		return hasRow(rows, "── rootgate approve · idle") && hasRow(rows, "Waiting for a person (1):") &&
			hasRow(rows, "  root (uid 0)  waiting ") && slices.ContainsFunc(rows, func(r string) bool { return strings.Contains(r, "id idle-wide  echo HIDDEN-MARKER") }) && hasRow(rows, "Standing grants (0):") &&
			hasRow(rows, "Last decisions (newest first):")
	})
	a.See("before y counts · n or Esc deny")
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("idle-wide: got %s, want the operator's denial", r.raw)
	}
}

// A standing grant given on a prompt that showed "Time limit: 1s" (the
// requester's "timeout") must not run the same command with the daemon's
// whole --exec-timeout, which no one was shown: a request of another
// time limit is asked about again.
func TestGrantKeepsItsTimeLimit(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	run := [][]string{{"echo", "granted-limit"}}
	ch := d.ask(map[string]any{"id": "gl-1", "pipeline": run, "privileged": true, "timeout": 1})
	a.See("gl-1")
	a.See("Time limit:  1s")
	a.notAnsweredKey(ch, "g")
	a.See("STANDING GRANT for 15 min")
	a.See("Time limit:")
	a.See("GRANT: y approve and grant for 15 min")
	a.Key("y")
	wantOK(t, <-ch)
	// The same limit: the grant decides.
	wantGrant(t, d.send(map[string]any{"id": "gl-same", "pipeline": run, "privileged": true, "timeout": 1}), "g1")
	// No limit asked for (the daemon's 300s): a person is asked, and the
	// hint says what differs.
	ch = d.ask(map[string]any{"id": "gl-longer", "pipeline": run, "privileged": true})
	var got *response
	waitFor(t, "gl-longer to be put to a person", 30*time.Second, func() bool {
		select {
		case r := <-ch:
			got = &r
			return true
		default:
		}
		txt := a.Screen.Text()
		return strings.Contains(txt[min(a.Pos, len(txt)):], "┊ id:      gl-longer")
	})
	if got != nil {
		t.Fatalf("gl-longer, of a longer time limit than the grant's, was answered without asking: %s", got.raw)
	}
	a.See("┊ id:      gl-longer")
	a.See("Time limit:  300s")
	a.See("would have covered it but for the time limit: granted 1s, here 300s")
	a.wantAsked(ch, "gl-longer")
}

// The group banner says the requests are the same in all shown under
// Requester, which names the program that asks (its executable, per the
// kernel): a request from another program of the same uid, here
// `rootgate run` beside the test binary, must not hide in the group.
func TestPromptGroupKeepsProgramsApart(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s", "--max-pending", "8", "--group-within", "3s"}})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	first := d.ask(map[string]any{"id": "gp-test", "pipeline": [][]string{{"echo", "two-programs"}}, "privileged": true})
	d.waitLog("asking for approval", "gp-test")
	out := &syncBuffer{}
	cmd := exec.Command(rootgateBin, "run", "--socket", d.Sock, "--", "echo", "two-programs")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	waitFor(t, "rootgate run's request to be put to a person", 30*time.Second, func() bool {
		return strings.Count(d.Stderr.String(), "asking for approval") == 2
	})

	a.See("┊ id:      gp-test")
	a.notAnswered(first, "no key yet")
	if txt := a.Screen.Text(); strings.Contains(txt[strings.LastIndex(txt, "gp-test"):], "IDENTICAL REQUESTS") {
		t.Fatalf("a request from another program was grouped with the one shown:\n%s", txt)
	}
	a.Key("n")
	if r := <-first; r.Status != wire.StatusDenied {
		t.Fatalf("gp-test: got %s, want the operator's denial", r.raw)
	}
	// rootgate run's request is asked about on its own, naming its program.
	a.See("exe " + rootgateBin)
	a.notAnsweredKey(nil, "n")
	if err := <-done; err == nil {
		t.Fatalf("rootgate run succeeded after a denial:\n%s", out.String())
	}
	done <- nil // for the cleanup
}
