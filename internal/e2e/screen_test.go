package e2e

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
)

// The approver's screen for a long day, through the real rootgated and
// the real `rootgate approve` on ptys: the idle screen (queue, standing
// grants, last decisions and who made them), keys typed at it, and
// identical requests grouped into one prompt, against a requester that
// would use any of it to get more approved than the operator saw.

// idleAfter waits until the idle screen drawn after what was already
// seen shows all of want, each once in one drawing.
func (a *approverProc) idleShows(want ...string) {
	a.T.Helper()
	waitFor(a.T, "the idle screen to show "+strings.Join(want, ", "), 30*time.Second, func() bool {
		txt := a.Screen.Text()
		i := strings.LastIndex(txt, "── rootgate approve · idle")
		if i < a.Pos {
			return false
		}
		drawing := txt[i:]
		for _, w := range want {
			if !strings.Contains(drawing, w) {
				return false
			}
		}
		return true
	})
}

func TestIdleScreenShowsQueueGrantsDecisions(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "allow any echo ruled\n", Args: []string{"--prompt-timeout", "60s"}})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	a.idleShows("Waiting for a person (0):", "Standing grants (0):", "Last decisions (newest first):", "none yet")

	// A rule's decision names the rule's file and line.
	wantOK(t, d.send(map[string]any{"id": "by-rule", "pipeline": [][]string{{"echo", "ruled"}}}))
	a.idleShows("by-rule", "allow", "by rule "+d.Dir+"/policy:1", "echo ruled")

	// A request a person is deciding at a (its prompt is up there) is in
	// the queue of an approver attached after it began, which is idle.
	ch := d.ask(map[string]any{"id": "queued-1", "pipeline": [][]string{{"echo", "queued"}}, "privileged": true})
	a.See("queued-1")
	b := startApprover(t, d.asock(), 0)
	b.See("attached to rootgated")
	b.idleShows("Waiting for a person (1):", "root (uid 0)  waiting ", "id queued-1  echo queued")

	// a approves it with a standing grant: b's idle screen shows the
	// grant and the person's decision, and the queue empties.
	a.grantIt(ch)
	wantOK(t, <-ch)
	b.idleShows("Waiting for a person (0):", "Standing grants (1):", "g1  root (uid 0)  ends ", "uses 0  echo queued",
		"allow     by person root on pts/", "id queued-1  echo queued")
	// The grant's own decision names the grant and who gave it.
	wantGrant(t, d.send(map[string]any{"id": "by-grant", "pipeline": [][]string{{"echo", "queued"}}, "privileged": true}), "g1")
	b.idleShows("allow     by grant g1 (given by root on pts/", "id by-grant  echo queued", "uses 1")

	// A person's denial, and a request withdrawn: each says so.
	ch = d.ask(map[string]any{"id": "denied-1", "pipeline": [][]string{{"echo", "no"}}})
	a.See("denied-1")
	a.notAnsweredKey(ch, "n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("denied-1: %s", r.raw)
	}
	b.idleShows("deny      by person root on pts/", "id denied-1  echo no")
}

func TestIdleKeysNotEchoedNorCounted(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	a.idleShows("Waiting for a person (0):")
	// What an agent types into the operator's idle approver (tmux
	// send-keys does the same): words to show, and a y for the request
	// it is about to send.
	a.Key("qzxjqzxj")
	a.Key("y")
	a.Key("\r")
	a.Key("y")
	ch := d.ask(map[string]any{"id": "after-idle-keys", "pipeline": [][]string{{"echo", "after"}}})
	a.See("after-idle-keys")
	a.notAnswered(ch, "a y typed at the idle screen")
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want the operator's denial", r.raw)
	}
	a.idleShows("deny      by person root on pts/", "id after-idle-keys  echo after")
	if raw := a.Screen.Raw(); strings.Contains(raw, "qzxj") {
		t.Fatalf("keys typed at the idle screen were echoed:\n%q", raw)
	}
}

func TestIdleScreenEscapesRequesterText(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	// The wire refuses control characters in argv but for TAB and LF:
	// an argument's own lines would pass for lines of the idle screen
	// (a decision by a person, a grant) were they written as they are.
	forged := "  forged-1  allow     by person root on pts/9\t"
	ch := d.ask(map[string]any{"id": "hostile-1", "pipeline": [][]string{{"echo", "x\n" + forged}}})
	a.See("hostile-1")
	if r := d.send(map[string]any{"id": "esc-1", "pipeline": [][]string{{"echo", "\x1b]0;pwned\x07"}}}); r.Code != wire.CodeInvalidRequest {
		t.Fatalf("an escape sequence in argv: %s", r.raw)
	}
	b := startApprover(t, d.asock(), 0)
	b.See("attached to rootgated")
	// The queue shows the argv escaped, on one line, as a prompt does.
	b.idleShows("hostile-1", `echo $'x\n  forged-1  allow     by person root on pts/9\t'`)
	a.notAnsweredKey(ch, "n")
	<-ch
	b.idleShows("deny      by person root on pts/", "id hostile-1  echo")
	raw := b.Screen.Raw()
	for _, bad := range []string{"\n  forged-1", "pts/9\t"} {
		if strings.Contains(raw, bad) {
			t.Errorf("the idle screen put %q on the terminal raw", bad)
		}
	}
}

// auditKinds returns, for each request id, the kinds of its audit records
// in order, and its decided record's decision.
func auditKinds(t *testing.T, dir string) (map[string][]string, map[string]map[string]any) {
	t.Helper()
	f, err := os.Open(auditPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kinds := map[string][]string{}
	decided := map[string]map[string]any{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 8<<20)
	for sc.Scan() {
		var r struct {
			Kind     string         `json:"kind"`
			ID       string         `json:"id"`
			Decision map[string]any `json:"decision"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		kinds[r.ID] = append(kinds[r.ID], r.Kind)
		if r.Kind == "decided" {
			decided[r.ID] = r.Decision
		}
	}
	return kinds, decided
}

func TestPromptGroupsIdenticalRequests(t *testing.T) {
	t.Parallel()
	// Three requests sent at once reach the daemon within milliseconds,
	// but a loaded machine may take longer than the default 300 ms.
	d := startDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s", "--max-pending", "8", "--group-within", "3s"}})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	same := [][]string{{"echo", "grouped"}}
	var chs []chan response
	for _, id := range []string{"grp-1", "grp-2", "grp-3"} {
		chs = append(chs, d.ask(map[string]any{"id": id, "pipeline": same, "privileged": true, "reason": "reason of " + id}))
	}
	// One argument different, while the group gathers: never in it. (It
	// is sent once the three are being asked about, so its prompt comes
	// second.)
	for _, id := range []string{"grp-1", "grp-2", "grp-3"} {
		d.waitLog("asking for approval", id)
	}
	other := d.ask(map[string]any{"id": "grp-other", "pipeline": [][]string{{"echo", "grouped", "x"}}, "privileged": true})
	// Its window ends just after the group's; on a starved machine both
	// may end together and its prompt come first. Either way it is asked
	// on its own, never as part of the group.
	a.SeeRe(regexp.MustCompile(`3 IDENTICAL REQUESTS: one answer decides all 3|id: +grp-other`))
	if strings.HasSuffix(a.Screen.Text()[:a.Pos], "grp-other") {
		a.notAnsweredKey(other, "n")
		if r := <-other; r.Status != wire.StatusDenied || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson || r.DecidedBy.Group != 0 {
			t.Fatalf("grp-other, asked first: got %s, want a person's denial of it alone", r.raw)
		}
		other = nil
		a.See("3 IDENTICAL REQUESTS: one answer decides all 3")
	}
	// Once the prompt is out, an identical request is not covered by it.
	late := d.ask(map[string]any{"id": "grp-late", "pipeline": same, "privileged": true})
	d.waitLog("asking for approval", "grp-late")
	a.notAnsweredKey(chs[0], "y")
	first := ""
	for i, ch := range chs {
		r := wantOK(t, <-ch)
		if string(r.Stdout) != "grouped\n" {
			t.Fatalf("request %d: %s", i+1, r.raw)
		}
		if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson || r.DecidedBy.Group != 3 {
			t.Fatalf("request %d: decided_by does not say one answer decided 3: %s", i+1, r.raw)
		}
		if r.DecidedBy.GroupOf == "" {
			if first != "" {
				t.Fatalf("two requests say their prompt was shown: %s and %s", first, r.ID)
			}
			first = r.ID
		}
	}
	if first == "" {
		t.Fatal("no request says its prompt was the one shown")
	}
	// The one that differs, and the late one, are each asked on their own.
	for _, c := range []struct {
		id string
		ch chan response
	}{{"grp-other", other}, {"grp-late", late}} {
		if c.ch == nil {
			continue // asked and answered before the group
		}
		pending(t, c.ch, c.id+" after the group's y")
		a.wantAsked(c.ch, c.id)
	}
	if strings.Count(a.Screen.Text(), "IDENTICAL REQUESTS") == 0 {
		t.Fatal("no group banner")
	}

	d.Stop()
	d.VerifyAudit()
	kinds, decided := auditKinds(t, d.Dir)
	for _, id := range []string{"grp-1", "grp-2", "grp-3"} {
		if got := strings.Join(kinds[id], " "); !strings.HasPrefix(got, "received decided started") {
			t.Errorf("%s: audit records %q, want its own received, decided, started", id, got)
		}
		dec := decided[id]
		if dec["verdict"] != "allow" || dec["group"] != float64(3) {
			t.Errorf("%s: decided record %v does not note the group of 3", id, dec)
		}
		if id != first && dec["group_of"] != first {
			t.Errorf("%s: decided record %v does not name %s as the request shown", id, dec, first)
		}
	}
	for _, id := range []string{"grp-other", "grp-late"} {
		if dec := decided[id]; dec["verdict"] != "deny" || dec["group"] != nil {
			t.Errorf("%s: decided record %v, want a denial of its own", id, dec)
		}
	}
	out, err := exec.Command(rootgateBin, "audit", "show", "--file", auditPath(d.Dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("audit show: %v\n%s", err, out)
	}
	if n := strings.Count(string(out), "one answer for 3 identical requests, on "+first+"'s prompt"); n != 2 {
		t.Errorf("audit show names %s's prompt for %d requests, want 2:\n%s", first, n, out)
	}
	if !strings.Contains(string(out), "one answer for 3 identical requests, on this request's prompt") {
		t.Errorf("audit show does not say which request's prompt was shown:\n%s", out)
	}
}

func TestPromptHintNamesNearGrantAndRule(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "allow privileged echo hello world\n", Args: []string{"--prompt-timeout", "60s"}})
	a := startApproverArgs(t, d.asock(), 0, "--grant-for", "15m,1s")
	a.See("attached to rootgated")
	rule := "rule " + d.Dir + "/policy:1 (allow privileged echo hello world) would have allowed but for "

	// One argument off the allow rule, then the env it does not admit.
	ch := d.ask(map[string]any{"id": "hint-arg", "pipeline": [][]string{{"echo", "hello", "there"}}, "privileged": true})
	a.See("hint-arg")
	a.See("Hint:")
	a.See(rule + `argument 2 "there" does not match "world"`)
	a.wantAsked(ch, "hint-arg")
	ch = d.ask(map[string]any{"id": "hint-env", "pipeline": [][]string{{"echo", "hello", "world"}}, "privileged": true, "env": map[string]string{"LANG": "C"}})
	a.See("hint-env")
	a.See(rule + "the env: the rule does not admit LANG")
	a.wantAsked(ch, "hint-env")

	// A grant for one argument; the request with another names it.
	ch = d.ask(map[string]any{"id": "hint-grant", "pipeline": [][]string{{"echo", "granted", "a"}}, "privileged": true})
	a.See("hint-grant")
	a.grantIt(ch)
	wantOK(t, <-ch)
	ch = d.ask(map[string]any{"id": "hint-near", "pipeline": [][]string{{"echo", "granted", "b"}}, "privileged": true})
	a.See("hint-near")
	a.SeeRe(regexp.MustCompile(`Hint: +grant g1 \(held until [0-9:]+, given by root on pts/\d+\) would have covered it but for argument 2: granted a, here b`))
	a.wantAsked(ch, "hint-near")
	// A request too far from both has no hint.
	ch = d.ask(map[string]any{"id": "hint-none", "pipeline": [][]string{{"echo", "other", "c", "d"}}, "privileged": true})
	a.See("hint-none")
	a.notAnswered(ch, "no key")
	if txt := a.Screen.Text(); strings.Contains(txt[strings.LastIndex(txt, "hint-none"):], "Hint:") {
		t.Fatalf("a request near no grant or rule has a hint:\n%s", txt)
	}
	a.Key("n")
	<-ch

	// A grant that ended is still named, for exactly its request.
	safe, evil := base64.StdEncoding.EncodeToString([]byte("safe\n")), base64.StdEncoding.EncodeToString([]byte("evil\n"))
	ch = d.ask(map[string]any{"id": "hint-short", "pipeline": [][]string{{"echo", "short"}}, "privileged": true, "stdin": safe})
	a.See("hint-short")
	a.notAnsweredKey(ch, "g")
	a.See("STANDING GRANT for 15 min")
	a.See("GRANT: y approve and grant for 15 min")
	a.Key("d")
	a.See("GRANT: y approve and grant for 1 s")
	a.Key("y")
	wantOK(t, <-ch)
	waitFor(t, "the short grant to end", 30*time.Second, func() bool {
		return !strings.Contains(grants(t, d.asock()), "echo short")
	})
	ch = d.ask(map[string]any{"id": "hint-ended", "pipeline": [][]string{{"echo", "short"}}, "privileged": true, "stdin": safe})
	a.See("hint-ended")
	a.SeeRe(regexp.MustCompile(`Hint: +grant g2 \(ENDED at [0-9:]+, given by root on pts/\d+\) covered exactly this request`))
	a.wantAsked(ch, "hint-ended")
	// Other stdin of the same size: not "exactly", which would vouch for
	// bytes the person never saw.
	ch = d.ask(map[string]any{"id": "hint-other-stdin", "pipeline": [][]string{{"echo", "short"}}, "privileged": true, "stdin": evil})
	a.See("hint-other-stdin")
	a.SeeRe(regexp.MustCompile(`Hint: +grant g2 \(ENDED at [0-9:]+\) has this command, but not all of this request`))
	a.wantAsked(ch, "hint-other-stdin")
}

func TestIdleScreenRedrawsOnResize(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	ta := rgtest.StartTmuxApprover(t, d.asock(), 160, 40)
	ta.Wait("Last decisions (newest first):")
	header := func(rows []string) string {
		for _, r := range rows {
			if strings.HasPrefix(r, "── rootgate approve · idle") {
				return r
			}
		}
		return ""
	}
	if h := header(ta.Wait("keys typed here are ignored: they answer nothing")); strings.HasSuffix(h, "…") {
		t.Fatalf("at 160 columns the header is cut: %q", h)
	}
	if out, err := exec.Command("tmux", "-S", ta.Sock, "resize-window", "-x", "50", "-y", "20").CombinedOutput(); err != nil {
		t.Fatalf("tmux resize-window: %v: %s", err, out)
	}
	// Drawn again for 50 columns: the header cut to fit, with a mark
	// (as termsafe.Cells counts cells: two for every rune but ASCII).
	var rows []string
	waitFor(t, "the idle screen drawn again at 50 columns", 30*time.Second, func() bool {
		rows = ta.Rows()
		h := header(rows)
		return strings.HasSuffix(h, "…") && termsafe.Cells(h) >= 49 && termsafe.Cells(h) <= 50
	})
	if !slices.Contains(rows, "Waiting for a person (0):") {
		t.Fatalf("after the resize the idle screen shows:\n%s", strings.Join(rows, "\n"))
	}
}

// A requester's huge request is a small entry in a status message: the
// prompt shows it whole, the idle screen only reminds of it. (Each status
// goes to every idle approver on every change.)
func TestStatusClipsHugeRequests(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	huge := strings.Repeat("x", 5000)
	words := []string{"echo", huge}
	for range 100 {
		words = append(words, "w")
	}
	var stages [][]string
	for range 8 {
		stages = append(stages, words)
	}
	ch := d.ask(map[string]any{"id": "huge-1", "pipeline": stages})
	a.See("huge-1")

	// An approver client of our own, taking status messages.
	c, err := net.Dial("unix", d.asock())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if err := remote.WriteMessage(c, &remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: "raw",
		Capabilities: []string{"terminal", remote.CapStatus}}); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReaderSize(c, 64<<10)
	var line string
	for !strings.Contains(line, `"type":"status"`) {
		if line, err = br.ReadString('\n'); err != nil {
			t.Fatalf("no status: %v", err)
		}
	}
	if len(line) > 16<<10 {
		t.Errorf("a status of %d bytes for one queued request", len(line))
	}
	var m remote.Message
	if err := json.Unmarshal([]byte(line), &m); err != nil {
		t.Fatal(err)
	}
	if len(m.Queue) != 1 || m.Queue[0].ID != "huge-1" {
		t.Fatalf("status queue %+v", m.Queue)
	}
	p := m.Queue[0].Pipeline
	want := [][]string{{"echo", strings.Repeat("x", 120) + "...(+4880)"}}
	if len(p) != 5 || len(p[0]) != 25 || p[0][1] != want[0][1] || p[0][24] != "...(+78 words)" || p[4][0] != "...(+4 stages)" {
		t.Errorf("status pipeline not clipped as documented: %d stages, the first of %d words, its argument of %d bytes", len(p), len(p[0]), len(p[0][1]))
	}
	// n denies without paging to the end.
	a.See("before y counts · n or Esc deny")
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("huge-1: %s", r.raw)
	}
}
