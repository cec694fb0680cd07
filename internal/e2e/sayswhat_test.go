package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/wire"
)

// Tests of what a response says about what happened (issue 14): who
// decided, the person's deny note, the daemon's clock on a time refusal,
// a run killed by the daemon stopping, and check requests.

// TestDecidedByPolicy: a request a policy rule decides names the rule's
// text and its file and line, whether it allows or denies.
func TestDecidedByPolicy(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "# rules\ndeny any false ...\nallow any echo ...\n"})
	policy := filepath.Join(d.Dir, "policy")

	r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"echo", "hi"}}}))
	want := wire.DecidedBy{By: wire.DecidedByPolicy, Rule: "allow any echo ...", Source: policy + ":3"}
	if r.DecidedBy == nil || *r.DecidedBy != want {
		t.Fatalf("allowed: got %s, want decided_by %+v", r.raw, want)
	}
	r = d.send(map[string]any{"pipeline": [][]string{{"false", "x"}}})
	want = wire.DecidedBy{By: wire.DecidedByPolicy, Rule: "deny any false ...", Source: policy + ":2"}
	if r.Code != wire.CodeDeniedByPolicy || r.DecidedBy == nil || *r.DecidedBy != want {
		t.Fatalf("denied: got %s, want decided_by %+v", r.raw, want)
	}
}

// TestDenyNoteReachesRequester: a person who denies through the approver
// protocol can add a note; the requester reads it in decided_by, with
// the terminal escapes and control characters it held removed and cut at
// 200 characters. The person is named with their uid and where they sit.
func TestDenyNoteReachesRequester(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := attachRaw(t, d)

	ch := d.ask(map[string]any{"reason": "note test"})
	p := a.prompt()
	no := false
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &no,
		Note: "use \x1b]52;c;ZWNobyBwd25lZA==\x07apt\u202e instead,\n\tnot dpkg -i" + strings.Repeat(" x", 300)})
	r := <-ch
	if r.Code != wire.CodeDeniedByOperator || r.DecidedBy == nil {
		t.Fatalf("got %s, want a denial with decided_by", r.raw)
	}
	by := *r.DecidedBy
	if by.By != wire.DecidedByPerson || by.Approver != "root (uid 0) on raw" || by.Via != "remote" {
		t.Fatalf("decided_by %+v, want root (uid 0) on raw via remote", by)
	}
	if !strings.HasPrefix(by.Note, "use ]52;c;ZWNobyBwd25lZA== apt instead, not dpkg -i x x") {
		t.Fatalf("note %q: escapes or blanks kept", by.Note)
	}
	if n := len([]rune(by.Note)); n > wire.MaxNoteLen || n < wire.MaxNoteLen-1 {
		t.Fatalf("note is %d characters, want it cut at %d", n, wire.MaxNoteLen)
	}
	if strings.ContainsAny(by.Note, "\x1b\x07\n\t\u202e") {
		t.Fatalf("note %q holds a control character", by.Note)
	}

	// An approval names the person too; a note sent with it goes nowhere.
	ch = d.ask(map[string]any{"reason": "note test", "pipeline": [][]string{{"echo", "ran"}}})
	p = a.prompt()
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Note: "fine"})
	r = wantOK(t, <-ch)
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson || r.DecidedBy.Approver != "root (uid 0) on raw" || r.DecidedBy.Note != "" {
		t.Fatalf("approved: got %s", r.raw)
	}
}

// TestStaleTimeSaysDaemonClock: a request refused for its time carries the
// daemon's clock, in whole seconds UTC, so a client can tell skew from a
// stale request.
func TestStaleTimeSaysDaemonClock(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	for _, tm := range []string{"2020-01-01T00:00:00Z", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)} {
		before := time.Now().Add(-time.Second)
		r := d.send(map[string]any{"time": tm})
		if r.Code != wire.CodeStaleTime {
			t.Fatalf("time %s: got %s, want stale_time", tm, r.raw)
		}
		got, err := time.Parse(time.RFC3339, r.DaemonTime)
		if err != nil || !strings.HasSuffix(r.DaemonTime, "Z") || strings.Contains(r.DaemonTime, ".") {
			t.Fatalf("daemon_time %q: not RFC 3339 whole seconds UTC (%v)", r.DaemonTime, err)
		}
		if got.Before(before.Truncate(time.Second)) || got.After(time.Now()) {
			t.Fatalf("daemon_time %s is not the daemon's clock (now %s)", got, time.Now())
		}
	}
	// Other refusals do not carry it.
	if r := d.send(map[string]any{"env": map[string]string{"LD_PRELOAD": "x"}}); r.DaemonTime != "" || r.Code != wire.CodeEnvNotAllowed {
		t.Fatalf("env refusal: %s", r.raw)
	}
}

// TestStopDuringRunSaysItRan: a run the daemon kills as it stops is
// answered with killed_stopping and what it wrote before, never with the
// "daemon stopping" of a request that did not start.
func TestStopDuringRunSaysItRan(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	flag := filepath.Join(d.Dir, "started")
	marker := "stopdur-" + uuid.NewString()[:8]
	ch := d.ask(map[string]any{"pipeline": [][]string{
		{"sh", "-c", "echo out-before; echo err-before >&2; exec sleep 60", marker},
		// The flag says the line has passed the second stage too: the
		// stop's SIGTERM reaches every stage at once, and a cat still
		// holding the line would lose it.
		{"sh", "-c", "IFS= read -r l; printf '%s\\n' \"$l\"; touch " + flag + "; exec cat"},
	}})
	waitFor(t, "the run to start", 30*time.Second, func() bool { _, err := os.Stat(flag); return err == nil })
	if !d.Terminate() {
		t.Fatal("daemon did not stop cleanly")
	}
	r := <-ch
	if r.Status != wire.StatusError || r.Code != wire.CodeKilledStopping {
		t.Fatalf("got %s, want error killed_stopping", r.raw)
	}
	if string(r.Stdout) != "out-before\n" || len(r.Stages) != 2 || string(r.Stages[0].Stderr) != "err-before\n" {
		t.Fatalf("partial output missing: %s", r.raw)
	}
	if r.Stages[0].Signal == "" {
		t.Fatalf("first stage not reported killed: %s", r.raw)
	}
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPolicy {
		t.Fatalf("no decided_by: %s", r.raw)
	}
	noSurvivors(t, marker)
}

// TestCheckRequest: a check request says what the policy would decide for
// its requester (allow, ask, deny, with the rule), and neither runs the
// command nor puts it to the attached approver; a rule scoped to another
// user is not shown. Its audit record is a received record marked check,
// with nothing started.
func TestCheckRequest(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "deny any rm ...\ndeny any,user=alice-rg-other id\nallow any touch ...\nask any apt-get ...\n", Args: []string{"--prompt-timeout", "4s"}})
	policy := filepath.Join(d.Dir, "policy")
	a := attachRaw(t, d)
	file := filepath.Join(d.Dir, "touched")

	for _, c := range []struct {
		name  string
		argv  []string
		check string
		rule  string // "" for no decided_by
		line  int
	}{
		{"allowed", []string{"touch", file}, wire.CheckAllow, "allow any touch ...", 3},
		{"denied", []string{"rm", "-rf", "/"}, wire.CheckDeny, "deny any rm ...", 1},
		{"asked by a rule", []string{"apt-get", "upgrade"}, wire.CheckAsk, "ask any apt-get ...", 4},
		{"another user's rule", []string{"id"}, wire.CheckAsk, "", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			id := "check-" + uuid.NewString()[:8]
			r := wantOK(t, d.send(map[string]any{"id": id, "check": true, "pipeline": [][]string{c.argv}}))
			if r.Check != c.check || r.HasRun() {
				t.Fatalf("got %s, want check %q and no run", r.raw, c.check)
			}
			switch {
			case c.rule == "" && r.DecidedBy != nil:
				t.Fatalf("decided_by shown for a rule that does not apply: %s", r.raw)
			case c.rule != "" && (r.DecidedBy == nil || r.DecidedBy.Rule != c.rule || r.DecidedBy.Source != policy+":"+strconv.Itoa(c.line)):
				t.Fatalf("got %s, want rule %q at line %d", r.raw, c.rule, c.line)
			}
			if strings.Contains(r.raw, "alice-rg-other") {
				t.Fatalf("another user's rule leaked: %s", r.raw)
			}
		})
	}
	if _, err := os.Stat(file); err == nil {
		t.Fatal("a check ran the command")
	}
	// The approver was not asked about any check: the next prompt it sees
	// is the real request sent now.
	ch := d.ask(map[string]any{"id": "real-after-checks", "pipeline": [][]string{{"apt-get", "upgrade"}}})
	if p := a.prompt(); p.ID != "real-after-checks" {
		t.Fatalf("approver was shown %q, want real-after-checks", p.ID)
	} else {
		a.decide(p, false)
	}
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("real request: %s", r.raw)
	}
	// A check of a ping is refused.
	if r := d.send(map[string]any{"action": "ping", "check": true, "pipeline": nil}); r.Code != wire.CodeInvalidRequest {
		t.Fatalf("check ping: %s", r.raw)
	}
	d.Stop()
	log, err := os.ReadFile(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(log), "\n") {
		if strings.Contains(l, `"check-`) && !(strings.Contains(l, `"kind":"received"`) && strings.Contains(l, `"check":true`)) {
			t.Fatalf("a check left a record other than received: %s", l)
		}
	}
	if !strings.Contains(string(log), `"check":true`) {
		t.Fatal("no check recorded")
	}
}
