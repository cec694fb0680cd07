package e2e

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
)

// The prompt boundary: what an approver is shown, and when a key counts,
// against a requester that shapes its request (or withdraws and replaces
// it) to get a plain y for something the operator did not see. Each test
// runs the real rootgated and the real `rootgate approve` on a pty.

// promptDaemon is a daemon asking a person, with time to page.
func promptDaemon(t *testing.T) *daemonProc {
	return startDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s"}})
}

// pending fails if the request answered on ch has been answered.
func pending(t testing.TB, ch chan response, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: the request was answered: %s", what, r.raw)
	default:
	}
}

// tapFor is under a third of terminal.Dwell (1 s): the dwell began when
// the prompt was drawn, before the test saw it, and on a loaded machine
// seeing it can take a while; every tap must still land inside.
const tapFor = 300 * time.Millisecond

// tapY taps y every 50 ms for tapFor from now, as an
// operator's finger still on the key would (the prompt's dwell began
// before it was on the screen, so every tap lands inside it), and fails if
// the request on ch is answered meanwhile.
func (a *approverProc) tapY(ch chan response, what string) {
	a.T.Helper()
	// not a wait: keys typed through the whole dwell
	for start := time.Now(); time.Since(start) < tapFor; {
		a.Key("y")
		select {
		case r := <-ch:
			a.T.Fatalf("%s answered the request: %s", what, r.raw)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// notAnswered waits until the approver accepts keys for the prompt on
// screen, and fails if the request on ch was answered first: a key typed
// before then must not have answered it.
func (a *approverProc) notAnswered(ch chan response, what string) {
	a.T.Helper()
	var got *response
	waitFor(a.T, "the prompt to accept keys", 30*time.Second, func() bool {
		select {
		case r := <-ch:
			got = &r
			return true
		default:
		}
		txt := a.Screen.Text()
		return strings.Contains(txt[min(a.Pos, len(txt)):], "y approve ·")
	})
	if got != nil {
		a.T.Fatalf("%s answered the request: %s", what, got.raw)
	}
	a.See("y approve ·")
}

// pageToEnd pages on with space, once keys count, until the pager shows
// the request's last line and the approver says y counts. Only the
// latest drawing of the prompt counts: the form may first draw at a
// default size and draw again once it learns the terminal's, and a
// request that fits the real size has no status line.
func (a *approverProc) pageToEnd() {
	a.T.Helper()
	latest := func() string {
		txt := a.Screen.Text()
		if i := strings.LastIndex(txt, "rootgate approval request"); i >= 0 {
			txt = txt[i:]
		}
		return txt
	}
	last := func() []string {
		m := statusLine.FindAllStringSubmatch(latest(), -1)
		if len(m) == 0 {
			return nil
		}
		return m[len(m)-1]
	}
	// A key typed during the prompt's dwell is discarded, so a space
	// the pager did not act on is typed again.
	if !testutil.Poll(30*time.Second, func() bool {
		st := last()
		if st == nil {
			// No status line in the latest drawing: the request fits
			// (the drawing ends in the keys), or it is still drawn.
			return strings.Contains(latest(), "y approve ·")
		}
		if st[2] == st[3] {
			return true
		}
		a.Key(" ")
		// Give the pager 300 ms to move on or draw again before the
		// space is typed again.
		testutil.Poll(300*time.Millisecond, func() bool {
			now := last()
			return now == nil || now[2] != st[2]
		})
		return false
	}) {
		a.T.Fatalf("timed out waiting for the pager to move on; the screen shows:\n%s", a.Screen.Text())
	}
	a.See("y approve ·")
}

// statusLine is the pager's status line: first and last line shown, of how
// many.
var statusLine = regexp.MustCompile(`── lines (\d+)-(\d+) of (\d+)`)

// waitLog waits until the daemon has logged a line holding all of words.
func (d *daemonProc) waitLog(words ...string) {
	d.T.Helper()
	waitFor(d.T, fmt.Sprintf("the daemon to log %q", words), 30*time.Second, func() bool {
		for line := range strings.SplitSeq(d.Stderr.String(), "\n") {
			all := true
			for _, w := range words {
				all = all && strings.Contains(line, w)
			}
			if all {
				return true
			}
		}
		return false
	})
}

func TestPromptLongStageNeedsPaging(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	// Stage 1 is long enough to fill many screens; stage 2 is the point.
	marker := filepath.Join(d.Dir, "stage-two-ran")
	pipeline := [][]string{{"echo", strings.Repeat("routine log rotation ", 1000)}, {"touch", marker}}
	for len(pipeline) < wire.MaxStages {
		pipeline = append(pipeline, []string{"cat"})
	}
	ch := d.ask(map[string]any{"id": "hidden-stage", "pipeline": pipeline, "reason": "rotate logs"})
	a.See("hidden-stage")
	// Every stage has its own line in the form.
	a.See("  [2] touch " + marker)
	a.See("  [16] cat")
	a.See("page to the end of the request before y counts")
	a.Key("y")
	a.See("y refused: page to the end first")
	pending(t, ch, "y before the end of the request")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("stage 2 ran on a y typed before the request was all shown")
	}

	// The operator who pages through it may approve.
	a.pageToEnd()
	a.Key("y")
	wantOK(t, <-ch)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the approved pipeline did not run: %v", err)
	}
}

func TestPromptShowsAllOfStdin(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	marker := filepath.Join(d.Dir, "tail-ran")
	script := strings.Repeat("# just checking the disk\n", 12) + "df -h >/dev/null\ntouch " + marker + "\n"
	if len(script) < 300 {
		t.Fatalf("the script is %d bytes; its tail must be past byte 200", len(script))
	}
	ch := d.ask(map[string]any{"id": "stdin-tail", "pipeline": [][]string{{"sh", "-s"}},
		"stdin": base64.StdEncoding.EncodeToString([]byte(script))})
	a.See("stdin-tail")
	a.See("all of it below: 14 lines")
	a.See("┊ stdin 14: 'touch " + marker + "'")
	a.pageToEnd()
	a.Key("y")
	wantOK(t, <-ch)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the approved script did not run: %v", err)
	}
}

func TestPromptDwellDiscardsEarlyKeys(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	// A y typed the moment the prompt is up (the operator's second y)
	// does not count; after the dwell, the same key does.
	chA := d.ask(map[string]any{"id": "dwell-a", "pipeline": [][]string{{"echo", "a"}}})
	a.See("dwell-a")
	a.See("y approve ·")
	marker := filepath.Join(d.Dir, "queued-ran")
	chB := d.ask(map[string]any{"id": "dwell-b", "pipeline": [][]string{{"touch", marker}}})
	d.waitLog("asking for approval", "dwell-b")
	a.Key("y")
	wantOK(t, <-chA)
	a.See("dwell-b")
	a.See("> Deny")
	at := a.Pos
	a.tapY(chB, "a y typed as the prompt appeared") // the double tap, landing on the next prompt
	a.notAnswered(chB, "a y typed as the prompt appeared")
	if !strings.Contains(a.Screen.Text()[at:], "keys are not accepted yet") {
		t.Error("the form never said keys were not accepted yet")
	}
	a.Key("n")
	if r := <-chB; r.Status != wire.StatusDenied || (!deniedByRoot.MatchString(r.Message) || r.Code != wire.CodeDeniedByOperator) {
		t.Fatalf("%s", r.raw)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a y typed during the dwell approved the queued request")
	}
}

func TestPromptWithdrawnThenReplaced(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(request(map[string]any{"id": "swap-benign", "pipeline": [][]string{{"uptime"}}}))); err != nil {
		t.Fatal(err)
	}
	a.See("swap-benign")
	a.See("y approve ·")
	// Withdrawn under the operator's finger, and at once replaced.
	c.Close()
	a.See("request swap-benign withdrawn")
	marker := filepath.Join(d.Dir, "swap-ran")
	ch := d.ask(map[string]any{"id": "swap-evil", "pipeline": [][]string{{"touch", marker}}})
	a.See("swap-evil")
	at := a.Pos
	a.See("> Deny")
	a.tapY(ch, "a y typed as the replacement appeared")
	a.notAnswered(ch, "a y typed as the replacement appeared")
	if !strings.Contains(a.Screen.Text()[at:], "The request shown before was withdrawn: this is a DIFFERENT request") {
		t.Errorf("the replacement has no banner saying so:\n%s", a.Screen.Text()[at:])
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the replacement ran on a y typed as it appeared")
	}
	// Read, and approved on purpose: it runs.
	a.Key("y")
	wantOK(t, <-ch)
	if _, err := os.Stat(marker); err != nil {
		t.Fatal(err)
	}
	// The banner belongs to the first prompt after a withdrawal only.
	ch = d.ask(map[string]any{"id": "swap-next"})
	a.See("swap-next")
	a.See("y approve ·")
	a.Key("n")
	<-ch
	if txt := a.Screen.Text(); strings.Count(txt, "this is a DIFFERENT request") == 0 ||
		strings.Contains(txt[strings.Index(txt, "swap-next"):], "DIFFERENT request") {
		t.Errorf("the withdrawal banner is shown on the wrong prompts:\n%s", txt)
	}
}

func TestPromptHugeArgumentKeepsApprovers(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	b := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	b.See("attached to rootgated")

	// Someone else's request waits at both approvers ...
	other := d.ask(map[string]any{"id": "other-user", "session": "someone-else", "pipeline": [][]string{{"echo", "other"}}})
	a.See("other-user")
	b.See("other-user")
	// ... when a request of a million '<' (six million bytes as
	// encoding/json escapes them by default) is put to them too.
	// The request line itself is under 1 MiB: '<' needs no escaping.
	line := strings.Replace(request(map[string]any{"id": "huge", "pipeline": [][]string{{"echo", "LT"}}}), "LT", strings.Repeat("<", 1_000_000), 1)
	if len(line) > wire.MaxLine {
		t.Fatalf("the request is %d bytes, over the daemon's limit", len(line))
	}
	huge := make(chan response, 1)
	go func() { huge <- d.sendRaw(line) }()
	d.waitLog("asking for approval", "huge")
	// Both approvers have read the huge prompt's line (or, as rootgate
	// did, 4 MiB of it before giving up their session).
	for _, ap := range []*approverProc{a, b} {
		waitFor(t, "the approver to read the huge prompt", 30*time.Second, func() bool {
			return readBytes(t, ap.Cmd.Process.Pid) >= 1_000_000
		})
	}
	a.See("y approve ·")
	a.Key("y")
	if r := wantOK(t, <-other); string(r.Stdout) != "other\n" {
		t.Fatalf("%s", r.raw)
	}
	b.See("withdrawn (approved by root on pts/")
	// Both still attached: the huge prompt reaches both, to be decided.
	a.See("huge")
	b.See("huge")
	b.See("n or Esc deny")
	b.Key("n")
	if r := <-huge; r.Status != wire.StatusDenied || (!deniedByRoot.MatchString(r.Message) || r.Code != wire.CodeDeniedByOperator) {
		t.Fatalf("%s", r.raw)
	}
	for _, ap := range []*approverProc{a, b} {
		if txt := ap.Screen.Text(); strings.Contains(txt, "connection to rootgated lost") || strings.Contains(txt, "skipped a message") {
			t.Errorf("an approver lost a message or its session:\n%s", txt)
		}
	}
}

// readBytes is how many bytes process pid has read so far (rchar).
func readBytes(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, _ = strconv.Atoi(v)
		}
	}
	return n
}

func TestApproverSkipsOverlongLine(t *testing.T) {
	t.Parallel()
	// The daemon never sends a line over remote.MaxDaemonLine; a client
	// that gets one anyway reads past it and keeps its session.
	dir := shortDir(t)
	sock := filepath.Join(dir, "a")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := startApprover(t, sock, 0)
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	br := bufio.NewReader(c)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatalf("no hello: %v", err)
	}
	send := func(m any) {
		t.Helper()
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Write(append(b, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	send(remote.Message{Type: remote.MsgWelcome, Version: remote.ProtoVersion, Daemon: "fake", PromptTimeout: 60})
	a.See("attached to rootgated fake")
	send(map[string]string{"type": remote.MsgResult, "id": "x", "outcome": strings.Repeat("o", remote.MaxDaemonLine)})
	send(remote.Message{Type: remote.MsgPing})
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, `"pong"`) {
		t.Fatalf("after an overlong line, the approver answered %q, %v; want a pong", line, err)
	}
	a.See("skipped a message from rootgated over")
	if strings.Contains(a.Screen.Text(), "connection to rootgated lost") {
		t.Errorf("the approver dropped its session:\n%s", a.Screen.Text())
	}
}

func TestPromptRequesterWordsStayMarked(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	const cols = 120
	ta := rgtest.StartTmuxApprover(t, d.asock(), cols, 50)
	ta.Wait("attached to rootgated")

	// A reason padded so that, wrapped at the window's edge, its tail
	// starts a row of its own looking like the daemon's run-as line (as
	// "  | routine check", on 17 columns, it did), and a host that looks
	// like a section header.
	fake := "  Run as:      nobody (uid 65534, the requester's own user; not privileged)"
	reason := "routine check" + strings.Repeat(" ", 3*cols-17) + fake
	ch := d.ask(map[string]any{"id": "marked", "privileged": true, "reason": reason, "host": "What would run:",
		"pipeline": [][]string{{"id"}}})
	rows := ta.Wait("y approve ·")
	var runAs []string
	for _, r := range rows {
		if strings.HasPrefix(r, "  Run as:") || strings.HasPrefix(r, "What would run:") {
			runAs = append(runAs, r)
		}
	}
	if len(runAs) != 2 || !strings.Contains(runAs[1], "PRIVILEGED: the command runs as ROOT") {
		t.Errorf("the requester's words pass for the daemon's: rows %q\nthe window:\n%s", runAs, strings.Join(rows, "\n"))
	}
	if !slices.ContainsFunc(rows, func(r string) bool { return strings.HasPrefix(r, "  ┊ reason:  routine check") }) {
		t.Errorf("the reason is not marked as the requester's:\n%s", strings.Join(rows, "\n"))
	}
	// Marked, it can still be read and approved.
	ta.Key("y")
	if r := wantOK(t, <-ch); !strings.HasPrefix(string(r.Stdout), "uid=0(root)") {
		t.Fatalf("%s", r.raw)
	}
}

func TestPromptAccessibleShowsAllOfStdin(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApproverArgs(t, d.asock(), 0, "--accessible")
	a.See("attached to rootgated")

	marker := filepath.Join(d.Dir, "accessible-tail-ran")
	script := strings.Repeat("# read aloud, line by line\n", 10) + "touch " + marker + "\n"
	ch := d.ask(map[string]any{"id": "acc-tail", "pipeline": [][]string{{"sh", "-s"}},
		"stdin": base64.StdEncoding.EncodeToString([]byte(script))})
	a.See("acc-tail")
	// The tail past byte 200 is written before the question, and a y
	// typed before the question is not an answer.
	a.See("┊ stdin 11: 'touch " + marker + "'")
	a.Key("y\r")
	a.See("That is the whole request.")
	a.See("[y/N]")
	pending(t, ch, "a y typed before the question")
	a.Key("y\r")
	wantOK(t, <-ch)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the approved script did not run: %v", err)
	}
}

// TestPromptDenyNote: m at the terminal prompt denies and asks for a note,
// which reaches the requester cleaned (escapes made blanks) in
// decided_by; n alone still denies without asking for one.
func TestPromptDenyNote(t *testing.T) {
	t.Parallel()
	d := promptDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	ch := d.ask(map[string]any{"id": "note-1", "pipeline": [][]string{{"rm", "-rf", "/srv/data"}}})
	a.See("note-1")
	a.See("m deny with a note")
	a.notAnsweredKey(ch, "m")
	a.See("A note for the requester")
	pending(t, ch, "deny before the note is typed")
	a.Key("clean /var/cache/app \x1b[2Jinstead\r")
	r := <-ch
	if r.Status != wire.StatusDenied || r.Code != wire.CodeDeniedByOperator {
		t.Fatalf("got %s, want denied by the operator", r.raw)
	}
	if r.DecidedBy == nil || r.DecidedBy.Note != "clean /var/cache/app [2Jinstead" {
		t.Fatalf("the note did not reach the requester as typed and cleaned: %s", r.raw)
	}

	ch = d.ask(map[string]any{"id": "note-2", "pipeline": [][]string{{"rm", "-rf", "/srv/data"}}})
	a.See("note-2")
	a.notAnsweredKey(ch, "n")
	if r := <-ch; r.Status != wire.StatusDenied || r.DecidedBy == nil || r.DecidedBy.Note != "" {
		t.Fatalf("n: got %s, want a denial without a note", r.raw)
	}
}

// notAnsweredKey types k once the prompt accepts keys (retyping it while
// the dwell discards it, until the prompt leaves the screen or asks for a
// note), failing if the request on ch was answered before k counted.
func (a *approverProc) notAnsweredKey(ch chan response, k string) {
	a.T.Helper()
	a.notAnswered(ch, "a key during the dwell")
	a.Key(k)
}
