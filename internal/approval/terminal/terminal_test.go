package terminal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/creack/pty"
	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/testutil"
)

// waitLimit bounds every wait for the screen or for a decision.
const waitLimit = 10 * time.Second

// screen collects everything written to a pty's terminal side, read from
// its master.
type screen struct {
	t      *testing.T
	master *os.File

	mu      sync.Mutex
	raw     bytes.Buffer
	changed chan struct{} // closed and replaced on each read
	err     error
}

// newTerminal returns a Terminal on a fresh pty of the given size (0x0:
// left as the kernel makes it) and the screen of that pty.
func newTerminal(t *testing.T, rows, cols uint16) (*Terminal, *screen) {
	t.Helper()
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("failed to open a pty: %v", err)
	}
	if rows > 0 {
		if err := pty.Setsize(master, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
			t.Fatalf("failed to size the pty: %v", err)
		}
	}
	s := &screen{t: t, master: master, changed: make(chan struct{})}
	done := make(chan struct{})
	go s.read(done)
	t.Cleanup(func() {
		tty.Close()
		master.Close()
		<-done
	})
	term := &Terminal{In: tty, Out: tty, Name: tty.Name(), Operator: "root"}
	return term, s
}

func (s *screen) read(done chan struct{}) {
	defer close(done)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.master.Read(buf)
		s.mu.Lock()
		s.raw.Write(buf[:n])
		if err != nil {
			s.err = err
		}
		close(s.changed)
		s.changed = make(chan struct{})
		s.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Raw returns everything the terminal side wrote so far.
func (s *screen) Raw() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

// Text returns the output so far with ANSI sequences and CRs removed.
func (s *screen) Text() string {
	return strings.ReplaceAll(ansi.Strip(s.Raw()), "\r", "")
}

// waitFor waits until want appears in Text at or after offset from, and
// returns the offset just past it.
func (s *screen) waitFor(from int, want string) int {
	s.t.Helper()
	timer := time.NewTimer(waitLimit)
	defer timer.Stop()
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		text := s.Text()
		if from <= len(text) {
			if i := strings.Index(text[from:], want); i >= 0 {
				return from + i + len(want)
			}
		}
		select {
		case <-changed:
		case <-timer.C:
			s.t.Fatalf("timed out waiting for %q on the screen; it shows:\n%s", want, text)
		}
	}
}

// send types keys into the terminal.
func (s *screen) send(keys string) {
	s.t.Helper()
	if _, err := io.WriteString(s.master, keys); err != nil {
		s.t.Fatalf("failed to type %q: %v", keys, err)
	}
}

// approveAsync runs Approve in the background.
func approveAsync(ctx context.Context, term *Terminal, p *approval.Prompt) <-chan approval.Decision {
	ch := make(chan approval.Decision, 1)
	go func() { ch <- term.Approve(ctx, p) }()
	return ch
}

// decision waits for the decision on ch.
func decision(t *testing.T, ch <-chan approval.Decision) approval.Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(waitLimit):
		t.Fatal("timed out waiting for a decision")
	}
	panic("unreachable")
}

func testPrompt(id string, argv ...string) *approval.Prompt {
	return &approval.Prompt{
		ID:         id,
		Host:       "workstation.local",
		Session:    "project-alpha",
		Version:    "rootgate/0.1.0",
		Time:       time.Date(2026, 2, 13, 14, 30, 0, 0, time.UTC),
		Reason:     "Install nginx to set up a web server",
		Requester:  approval.Requester{UID: 1000, GID: 1000, PID: 4242, User: "alice", Exe: "/usr/bin/python3.12"},
		Stages:     []approval.Stage{{Argv: argv, Path: "/usr/bin/" + argv[0]}},
		Privileged: true,
		RunAs:      "root",
		Cwd:        "/",
		RunTimeout: 300 * time.Second,
	}
}

// showPrompt starts Approve in the background and waits, reading the screen
// from offset from on, until the request's text and its form are up. It
// returns the decision channel and the screen offset past the form.
func showPrompt(t *testing.T, ctx context.Context, term *Terminal, s *screen, from int, p *approval.Prompt) (<-chan approval.Decision, int) {
	t.Helper()
	ch := approveAsync(ctx, term, p)
	at := s.waitFor(from, approval.RequesterMark+"id:      "+p.ID+"\n")
	at = s.waitFor(at, "> Deny")
	at = s.waitFor(at, "keys are not accepted yet")
	at = s.waitFor(at, "n or Esc deny")
	return ch, at
}

// pageToEnd pages on (space) from screen offset at until y counts.
func pageToEnd(s *screen, at int) int {
	s.t.Helper()
	for {
		text := s.Text()
		if i := strings.Index(text[at:], "y approve ·"); i >= 0 {
			return at + i
		}
		s.send(" ")
		at = s.waitFor(at, "── lines")
	}
}

// waitQueued waits until n requests wait their turn at term.
func waitQueued(t *testing.T, term *Terminal, n int) {
	t.Helper()
	var q int
	if !testutil.Poll(waitLimit, func() bool {
		term.mu.Lock()
		q = len(term.queue)
		term.mu.Unlock()
		return q == n
	}) {
		t.Fatalf("%d requests queued, want %d", q, n)
	}
}

// checkFormErased checks that the form was wiped (erase below the cursor)
// between its last frame and the outcome line.
func checkFormErased(t *testing.T, raw, outcome string) {
	t.Helper()
	end := strings.LastIndex(raw, outcome)
	start := strings.LastIndex(raw[:max(end, 0)], "Deny")
	if end < 0 || start < 0 || !strings.Contains(raw[start:end], ansi.EraseScreenBelow) {
		t.Errorf("the form was not erased before %q; output: %q", outcome, raw)
	}
}

func checkDecision(t *testing.T, got, want approval.Decision) {
	t.Helper()
	if got != want {
		t.Errorf("decision = %+v, want %+v", got, want)
	}
}

func TestTerminalApprove(t *testing.T) {
	// Not parallel: with a TERM that termenv would query, it must still not
	// ask the terminal for its colours (see promptTheme).
	t.Setenv("TERM", "xterm-256color")
	term, s := newTerminal(t, 40, 120)
	p := testPrompt("req-y", "apt", "install", "nginx")
	ch, at := showPrompt(t, context.Background(), term, s, 0, p)
	text := s.Text()
	for _, want := range []string{
		"The requester says (its own words, not checked by rootgated):\n",
		approval.RequesterMark + "reason:  Install nginx to set up a web server\n",
		"Run as:      root   *** PRIVILEGED",
		"Command (1 stage):\n  [1] apt install nginx\n      executable: /usr/bin/apt\n",
		"Run this command as ROOT?",
		"Asked by alice (uid 1000, gid 1000, pid 4242, exe /usr/bin/python3.12), per the kernel\n  [1] apt install nginx\n",
		"times out in 60s",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the prompt lacks %q; the screen shows:\n%s", want, text)
		}
	}
	s.send("y")
	checkDecision(t, decision(t, ch), approval.Decision{Verdict: approval.Allow, By: "tty " + term.Name})
	s.waitFor(at, "rootgate: request req-y approved")
	checkFormErased(t, s.Raw(), "rootgate: request req-y approved")
	if raw := s.Raw(); strings.Contains(raw, "\x1b]11;") || strings.Contains(raw, "\x1b]10;") {
		t.Errorf("the prompt queried the terminal's colours: %q", raw)
	}
}

func TestTerminalPasteDoesNotAnswer(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	ch, at := showPrompt(t, context.Background(), term, s, 0, testPrompt("req-paste", "true"))
	// "y" pasted (bracketed paste), then "yes" arriving in one read: neither
	// is the key y. The left arrow that follows shows they were read.
	s.send("\x1b[200~y\x1b[201~yes\x1b[D")
	s.waitFor(at, "> Approve")
	s.send("n")
	if d := decision(t, ch); d.Verdict != approval.Deny {
		t.Errorf("decision = %+v, want a denial: pasted text answered the prompt", d)
	}
}

func TestTerminalLongCommand(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 24, 80)
	script := strings.Repeat("echo 0123456789; ", 400) + "\nrm -rf /tmp/x"
	p := testPrompt("req-long", "sh", "-c", script)
	p.Stages = append(p.Stages, approval.Stage{Argv: []string{"tee", "/etc/shadow"}, Path: "/usr/bin/tee"})
	ch := approveAsync(context.Background(), term, p)
	at := s.waitFor(0, "page to the end of the request before y counts")
	// Every stage has its line in the form, the long one cut saying so.
	text := s.Text()
	for _, want := range []string{"  [1] sh -c $'echo", "more)\n", "  [2] tee /etc/shadow\n"} {
		if !strings.Contains(text[:at], want) {
			t.Errorf("the form lacks %q; the screen shows:\n%s", want, text[:at])
		}
	}
	s.send("y")
	at = s.waitFor(at, "y refused: page to the end first")
	// Paging on reaches the end, wrapped lines marked as continued.
	pageToEnd(s, at)
	if !strings.Contains(s.Text(), "    ↳ ") {
		t.Error("the wrapped command has no continuation mark")
	}
	s.send("y")
	checkDecision(t, decision(t, ch), approval.Decision{Verdict: approval.Allow, By: "tty " + term.Name})
}

func TestTerminalDeny(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, keys string }{
		{"n", "n"},
		{"N", "N"},
		{"esc", "\x1b"},
		{"ctrl+c", "\x03"},
		{"enter takes the default", "\r"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			term, s := newTerminal(t, 40, 120)
			ch, at := showPrompt(t, context.Background(), term, s, 0, testPrompt("req-n", "reboot"))
			s.send(tt.keys)
			checkDecision(t, decision(t, ch), approval.Decision{
				Verdict: approval.Deny,
				Message: "denied by operator root on " + term.Name,
				By:      "tty " + term.Name,
			})
			s.waitFor(at, "rootgate: request req-n denied")
			checkFormErased(t, s.Raw(), "rootgate: request req-n denied")
		})
	}
}

func TestTerminalArrowKeys(t *testing.T) {
	t.Parallel()
	t.Run("left then enter approves", func(t *testing.T) {
		t.Parallel()
		term, s := newTerminal(t, 40, 120)
		ch, at := showPrompt(t, context.Background(), term, s, 0, testPrompt("req-l", "true"))
		s.send("\x1b[D")
		s.waitFor(at, "> Approve")
		s.send("\r")
		checkDecision(t, decision(t, ch), approval.Decision{Verdict: approval.Allow, By: "tty " + term.Name})
	})
	t.Run("left, right, enter denies", func(t *testing.T) {
		t.Parallel()
		term, s := newTerminal(t, 40, 120)
		ch, at := showPrompt(t, context.Background(), term, s, 0, testPrompt("req-lr", "true"))
		s.send("\x1b[D")
		at = s.waitFor(at, "> Approve")
		s.send("\x1b[C")
		s.waitFor(at, "> Deny")
		s.send("\r")
		if d := decision(t, ch); d.Verdict != approval.Deny {
			t.Errorf("decision = %+v, want a denial", d)
		}
	})
}

func TestTerminalTimeout(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	term.Timeout = 2 * time.Second
	ch, at := showPrompt(t, context.Background(), term, s, 0, testPrompt("req-t", "true"))
	checkDecision(t, decision(t, ch), approval.Decision{
		Verdict: approval.Expired,
		Message: "no approval decision within 2s",
		By:      "tty " + term.Name,
	})
	s.waitFor(at, "rootgate: request req-t timed out (no approval decision within 2s)")
	checkFormErased(t, s.Raw(), "rootgate: request req-t timed out")
}

func TestTerminalWithdrawnWhileShown(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, at := showPrompt(t, ctx, term, s, 0, testPrompt("req-w", "true"))
	cancel()
	checkDecision(t, decision(t, ch), approval.Decision{Verdict: approval.Withdrawn, Message: "request withdrawn", By: "tty " + term.Name})
	s.waitFor(at, "rootgate: request req-w withdrawn")
	checkFormErased(t, s.Raw(), "rootgate: request req-w withdrawn")
}

func TestTerminalWithdrawnWithCause(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	ch, at := showPrompt(t, ctx, term, s, 0, testPrompt("req-wc", "true"))
	cancel(errors.New("approved by root on /dev/pts/9\x1b[2J"))
	checkDecision(t, decision(t, ch), approval.Decision{Verdict: approval.Withdrawn, Message: "request withdrawn", By: "tty " + term.Name})
	s.waitFor(at, `rootgate: request req-wc withdrawn (approved by root on /dev/pts/9\x1b[2J)`)
}

func TestTerminalWithdrawnBeforeApprove(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	checkDecision(t, term.Approve(ctx, testPrompt("req-gone", "true")),
		approval.Decision{Verdict: approval.Withdrawn, Message: "request withdrawn", By: "tty " + term.Name})
	// The next request is the first thing on the screen.
	ch, _ := showPrompt(t, context.Background(), term, s, 0, testPrompt("req-next", "true"))
	s.send("n")
	decision(t, ch)
	if text := s.Text(); strings.Contains(text, "req-gone") {
		t.Errorf("a withdrawn request was shown:\n%s", text)
	}
}

func TestTerminalDiscardsTypeAhead(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	s.send("y")
	// The terminal echoes the key once it sits in the terminal's input
	// queue, which is where a prompt would read it from.
	at := s.waitFor(0, "y")
	ch, _ := showPrompt(t, context.Background(), term, s, at, testPrompt("req-ahead", "true"))
	s.send("n")
	if d := decision(t, ch); d.Verdict != approval.Deny {
		t.Errorf("decision = %+v, want a denial: a key typed before the prompt answered it", d)
	}
}

func TestTerminalEscapesArguments(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 160)
	p := testPrompt("req-esc", "printf", "\x1b]0;pwned\x07", "\x1b[2Jwipe", "a\nb")
	p.Reason = "see \x1b[31mred\x1b[0m"
	ch, at := showPrompt(t, context.Background(), term, s, 0, p)
	s.send("n")
	decision(t, ch)
	s.waitFor(at, "rootgate: request req-esc denied")
	raw := s.Raw()
	for _, bad := range []string{"\x1b]0;pwned", "\x1b[2Jwipe", "\x1b[31mred", "a\nb", "a\r\nb"} {
		if strings.Contains(raw, bad) {
			t.Errorf("the raw sequence %q reached the terminal", bad)
		}
	}
	text := s.Text()
	for _, want := range []string{
		`[1] printf $'\x1b]0;pwned\x07' $'\x1b[2Jwipe' $'a\nb'`,
		`  ┊ reason:  see \x1b[31mred\x1b[0m`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the screen lacks %s; it shows:\n%s", want, text)
		}
	}
}

func TestTerminalFIFO(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	ctx := context.Background()
	chA, at := showPrompt(t, ctx, term, s, 0, testPrompt("req-a", "true"))
	chB := approveAsync(ctx, term, testPrompt("req-b", "true"))
	waitQueued(t, term, 1)
	chC := approveAsync(ctx, term, testPrompt("req-c", "true"))
	waitQueued(t, term, 2)
	if text := s.Text(); strings.Contains(text, "req-b") || strings.Contains(text, "req-c") {
		t.Fatalf("a queued request was shown while another was up:\n%s", text)
	}

	s.send("n")
	if d := decision(t, chA); d.Verdict != approval.Deny {
		t.Errorf("A: %+v, want a denial", d)
	}
	at = s.waitFor(at, "rootgate: request req-a denied")
	at2 := s.waitFor(at, "> Deny")
	if shown := s.Text()[at:at2]; !strings.Contains(shown, approval.RequesterMark+"id:      req-b\n") || strings.Contains(shown, "req-c") {
		t.Fatalf("after A, the screen shows:\n%s\nwant B alone", shown)
	}
	at2 = s.waitFor(at2, "y approve ·")

	s.send("y")
	if d := decision(t, chB); d.Verdict != approval.Allow {
		t.Errorf("B: %+v, want an approval", d)
	}
	at = s.waitFor(at2, "rootgate: request req-b approved")
	at2 = s.waitFor(at, "> Deny")
	if shown := s.Text()[at:at2]; !strings.Contains(shown, approval.RequesterMark+"id:      req-c\n") {
		t.Fatalf("after B, the screen shows:\n%s\nwant C", shown)
	}
	s.waitFor(at2, "n or Esc deny")
	s.send("n")
	if d := decision(t, chC); d.Verdict != approval.Deny {
		t.Errorf("C: %+v, want a denial", d)
	}
	s.waitFor(at2, "rootgate: request req-c denied")
}

func TestTerminalQueuedWithdrawnNeverShown(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	ctx := context.Background()
	chA, at := showPrompt(t, ctx, term, s, 0, testPrompt("req-first", "true"))
	ctxB, cancelB := context.WithCancel(ctx)
	chB := approveAsync(ctxB, term, testPrompt("req-queued", "true"))
	waitQueued(t, term, 1)
	cancelB()
	checkDecision(t, decision(t, chB), approval.Decision{Verdict: approval.Withdrawn, Message: "request withdrawn", By: "tty " + term.Name})
	waitQueued(t, term, 0)

	s.send("y")
	if d := decision(t, chA); d.Verdict != approval.Allow {
		t.Errorf("A: %+v, want an approval", d)
	}
	at = s.waitFor(at, "rootgate: request req-first approved")
	// The terminal is free again: the next request is shown at once.
	chC, _ := showPrompt(t, ctx, term, s, at, testPrompt("req-last", "true"))
	s.send("n")
	decision(t, chC)
	if text := s.Text(); strings.Contains(text, "req-queued") {
		t.Errorf("a request withdrawn while queued was shown:\n%s", text)
	}
}

func TestTerminalZeroSize(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 0, 0)
	ch, at := showPrompt(t, context.Background(), term, s, 0, testPrompt("req-0x0", "true"))
	if text := s.Text(); !strings.Contains(text, "Approve") || !strings.Contains(text, "Run this command as ROOT?") {
		t.Errorf("the form is incomplete on a 0x0 terminal:\n%s", text)
	}
	// Taken as 80x24, the request is taller than its pager.
	pageToEnd(s, at)
	s.send("y")
	checkDecision(t, decision(t, ch), approval.Decision{Verdict: approval.Allow, By: "tty " + term.Name})
}

func TestTerminalNotATerminal(t *testing.T) {
	t.Parallel()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	term := &Terminal{In: r, Out: w, Name: "pipe", Operator: "root"}
	d := term.Approve(context.Background(), testPrompt("req-pipe", "true"))
	if d.Verdict != approval.Unavailable || !strings.HasPrefix(d.Message, "approval prompt on pipe failed: not a terminal") || d.By != "tty pipe" {
		t.Errorf("decision = %+v, want a denial saying the prompt failed", d)
	}
}

func TestTerminalGone(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	ch, _ := showPrompt(t, context.Background(), term, s, 0, testPrompt("req-hangup", "true"))
	s.master.Close() // hang up
	d := decision(t, ch)
	want := approval.Decision{Verdict: approval.Unavailable, Message: "approval prompt on " + term.Name + " failed: terminal closed or hung up", By: "tty " + term.Name}
	if d != want {
		t.Errorf("decision = %+v, want %+v", d, want)
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer = testutil.SyncBuffer

func TestLogWriterHoldsLogsWhilePromptShown(t *testing.T) {
	t.Parallel()
	term, s := newTerminal(t, 40, 120)
	var out syncBuffer
	lw := term.LogWriter(&out)
	io.WriteString(lw, "before\n")
	if got := out.String(); got != "before\n" {
		t.Fatalf("with no prompt up, log = %q, want it passed through", got)
	}

	ch, _ := showPrompt(t, context.Background(), term, s, 0, testPrompt("req-log", "true"))
	io.WriteString(lw, "during\n")
	if got := out.String(); got != "before\n" {
		t.Errorf("with a prompt up, log = %q, want the new line held back", got)
	}
	// Writers race with the prompt's end: each line must come out once.
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 100 {
				fmt.Fprintf(lw, "g%d-%d\n", g, i)
			}
		})
	}
	s.send("n")
	decision(t, ch)
	wg.Wait()
	io.WriteString(lw, "after\n")

	got := out.String()
	if !strings.HasPrefix(got, "before\nduring\n") || !strings.HasSuffix(got, "after\n") {
		t.Errorf("log = %q, want before, during, …, after", got)
	}
	for g := range 4 {
		for i := range 100 {
			if n := strings.Count(got, fmt.Sprintf("\ng%d-%d\n", g, i)); n != 1 {
				t.Fatalf("line g%d-%d appears %d times in the log", g, i, n)
			}
		}
	}
}

func TestLogWriterDropsPastLimit(t *testing.T) {
	t.Parallel()
	term := &Terminal{}
	var out syncBuffer
	lw := term.LogWriter(&out)
	big := strings.Repeat("x", maxHeldLog-11) + "\n" // 10 bytes short of the limit
	term.holdLogs()
	for _, w := range []string{big, strings.Repeat("y", 99) + "\n", "123456789\n", "z\n"} {
		if n, err := io.WriteString(lw, w); n != len(w) || err != nil {
			t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(w))
		}
	}
	if got := out.String(); got != "" {
		t.Fatalf("log output while held: %q", got)
	}
	term.releaseLogs()
	want := big + "123456789\n" +
		"rootgate: 102 bytes of log output dropped while an approval prompt was on screen\n"
	if got := out.String(); got != want {
		t.Errorf("log = %.80q… (%d bytes), want %.80q… (%d bytes)", got, len(got), want, len(want))
	}
}

func TestTerminalAccessible(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, keys string
		want       approval.Verdict
	}{
		{"y approves", "y\r", approval.Allow},
		{"yes approves", "yes\r", approval.Allow},
		{"enter alone denies", "\r", approval.Deny},
		{"n denies", "n\r", approval.Deny},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			term, s := newTerminal(t, 40, 120)
			term.Accessible = true
			ch := approveAsync(context.Background(), term, testPrompt("acc", "reboot"))
			at := s.waitFor(0, "Type y and Enter to approve; Enter alone denies. [y/N]")
			s.send(tt.keys)
			d := decision(t, ch)
			if d.Verdict != tt.want {
				t.Fatalf("got %+v", d)
			}
			s.waitFor(at, "rootgate: request acc "+map[approval.Verdict]string{approval.Allow: "approved", approval.Deny: "denied"}[tt.want])
			if strings.Contains(s.Raw(), "\x1b[?1049") || strings.Contains(s.Raw(), "\x1b[2K") {
				t.Error("accessible mode redrew the screen")
			}
		})
	}
	t.Run("withdrawn while reading", func(t *testing.T) {
		t.Parallel()
		term, s := newTerminal(t, 40, 120)
		term.Accessible = true
		ctx, cancel := context.WithCancel(context.Background())
		ch := approveAsync(ctx, term, testPrompt("acc-w", "reboot"))
		s.waitFor(0, "[y/N]")
		cancel()
		if d := decision(t, ch); d.Verdict != approval.Withdrawn {
			t.Fatalf("got %+v", d)
		}
	})
	t.Run("times out", func(t *testing.T) {
		t.Parallel()
		term, s := newTerminal(t, 40, 120)
		term.Accessible = true
		// Longer than the dwell (1 s), after which the question is shown:
		// with a timeout equal to it, the prompt could expire first.
		term.Timeout = 2 * time.Second
		ch := approveAsync(context.Background(), term, testPrompt("acc-t", "reboot"))
		s.waitFor(0, "[y/N]")
		if d := decision(t, ch); d.Verdict != approval.Expired || d.Message != "no approval decision within 2s" {
			t.Fatalf("got %+v", d)
		}
	})
}

func TestTerminalNoColor(t *testing.T) {
	// The form uses bold and reverse video only, never colour, so NO_COLOR
	// holds whatever the terminal. Not parallel: TERM must name a terminal
	// with colours, so that their absence is the form's doing.
	t.Setenv("TERM", "xterm-256color")
	sgrColour := regexp.MustCompile(`\x1b\[[0-9;]*(3[0-9]|4[0-9]|9[0-7]|10[0-7])(;[0-9;]*)?m`)
	term, s := newTerminal(t, 40, 120)
	ch, _ := showPrompt(t, context.Background(), term, s, 0, testPrompt("nc", "true"))
	if !strings.Contains(s.Raw(), "\x1b[") {
		t.Fatal("no escape sequence at all: the check below would prove nothing")
	}
	s.send("n")
	decision(t, ch)
	if m := sgrColour.FindString(s.Raw()); m != "" {
		t.Errorf("a colour sequence on screen: %q", m)
	}
}

// TestKeyReadsMarkRunsAsPaste checks what the prompt passes on from each
// read of the terminal: a run of two or more characters becomes a paste
// (so its y is not the key y); single keys, escape sequences and pastes
// the terminal marked pass through unchanged, also when a paste spans
// reads.
func TestKeyReadsMarkRunsAsPaste(t *testing.T) {
	var k keyReads
	for _, c := range []struct{ in, want string }{
		{"y", "y"},
		{"yes", pasteStart + "yes" + pasteEnd},
		{"y\x1b[D", "y\x1b[D"},
		{"\x1b[Dyy\r", "\x1b[D" + pasteStart + "yy" + pasteEnd + "\r"},
		{"éy", pasteStart + "éy" + pasteEnd},
		{"\x1bOA\x1b", "\x1bOA\x1b"},
		{"\x1b]11;rgb:0/0/0\x07n", "\x1b]11;rgb:0/0/0\x07n"},
		{"\x1b[200~y\x1b[201~yes", "\x1b[200~y\x1b[201~" + pasteStart + "yes" + pasteEnd},
		{"\x1b[200~a", "\x1b[200~a"},
		{"bc\x1b[201~y", "bc\x1b[201~y"},
	} {
		if got := string(k.mark([]byte(c.in))); got != c.want {
			t.Errorf("mark(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestTerminalNamesMachine: with Machine set (rootgate approve attached to
// a daemon that named itself), the prompt says which machine the command
// runs on, below the request where the requester's words cannot reach, in
// every redraw (so also while a long request is paged through), and in
// accessible mode; the name and the socket are escaped.
func TestTerminalNamesMachine(t *testing.T) {
	t.Parallel()
	const line = `Runs on host web1\x1b[2J: the name rootgated there gives itself (reached through /run/user/1000/web1.sock)`
	t.Run("form", func(t *testing.T) {
		t.Parallel()
		term, s := newTerminal(t, 30, 160)
		term.Machine, term.Via = "web1\x1b[2J", "/run/user/1000/web1.sock"
		args := []string{"echo"}
		for i := range 60 { // taller than the window: the pager scrolls
			args = append(args, fmt.Sprintf("arg-%02d", i))
		}
		p := testPrompt("req-host", args...)
		p.Host = "web2"
		p.Stages[0].Argv = []string{"sh", "-c", strings.Join(args, "\n")}
		ch, at := showPrompt(t, context.Background(), term, s, 0, p)
		if !strings.Contains(s.Text(), line+"\n") {
			t.Errorf("the prompt lacks %q; it shows:\n%s", line, s.Text())
		}
		if strings.Contains(s.Raw(), "web1\x1b[2J") {
			t.Error("the machine's name reached the terminal unescaped")
		}
		if !strings.Contains(s.Text(), approval.RequesterMark+"host:    web2\n") {
			t.Errorf("the requester's host is not among its words; the screen shows:\n%s", s.Text())
		}
		s.send(" ")
		at = s.waitFor(at, "── lines")
		s.waitFor(at, line)
		s.send("n")
		decision(t, ch)
	})
	t.Run("accessible", func(t *testing.T) {
		t.Parallel()
		term, s := newTerminal(t, 40, 160)
		term.Accessible = true
		term.Machine, term.Via = "web1\x1b[2J", "/run/user/1000/web1.sock"
		ch := approveAsync(context.Background(), term, testPrompt("acc-host", "reboot"))
		at := s.waitFor(0, line)
		s.waitFor(at, "[y/N]")
		s.send("n\r")
		decision(t, ch)
	})
}
