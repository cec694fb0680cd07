package terminal

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"charm.land/bubbles/v2/key"
	"charm.land/bubbles/v2/textarea"
	tea "charm.land/bubbletea/v2"
	"charm.land/huh/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/cancelreader"
	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sys/unix"
)

// maxHeldLog bounds what a [Terminal.LogWriter] holds back while a prompt is
// on screen.
const maxHeldLog = 1 << 20

// Dwell is how long a prompt is on screen before a key counts: keys typed
// meanwhile are discarded, and type-ahead is flushed again when it ends, so
// a key meant for something else (a double-tapped y, a prompt withdrawn and
// replaced under the operator's finger) does not answer this request.
const Dwell = time.Second

// withdrawnBanner opens a prompt that took the place of one withdrawn while
// on screen.
const withdrawnBanner = "!!! The request shown before was withdrawn: this is a DIFFERENT request. Read it again."

// errHangup is what reading a terminal that hung up gives.
var errHangup = errors.New("terminal closed or hung up")

// Terminal is an [approval.Approver] that asks the person at a terminal. For each
// request it discards any keys typed before, then shows the whole of
// [approval.RenderWhole] in a pager fitted to the window, below it who asks and
// every stage on a line of its own, a huh Confirm ("Approve" / "Deny", Deny
// focused), the keys that count and a countdown (see [promptModel]):
//
//   - no key counts for [Dwell] after the prompt appears;
//   - y approves, once the pager has shown the request's last line; n, Esc
//     or ctrl+c denies; m denies and then asks, in line mode, for a note
//     that reaches the requester ([approval.Decision].Note); Enter takes
//     the highlighted answer, which is Deny unless the arrow keys (or h,
//     l) moved it;
//   - g, when y would count, shows in full the standing grant that would
//     be given (the exact request shape, the requester, how long, until
//     when; d cycles through GrantDurations) and asks for y again, after
//     its own dwell and paging: that y approves the request with a
//     [approval.Decision].Grant. A request with a stage that runs
//     anything its arguments say ([approval.RunsAnything]) asks a third
//     time, saying why; n or Esc go back to the request;
//   - r, when y would count and RuleFile is set, offers the policy rule
//     that admits exactly this request ([approval.SuggestRule]) in an
//     editable field; Enter checks the edited rule ([approval.CheckRule]:
//     one allow rule that matches this request, else it says why and stays),
//     then shows it in full with the file it goes to and asks for y,
//     after its own dwell and paging; a rule for a request that runs
//     anything ([approval.RuleRunsAnything]) asks
//     a second time, saying why. That y approves the request with a
//     [approval.Decision].Rule. Esc goes back (from the editor to the
//     request, from a confirmation to the editor);
//   - no answer within Timeout: [approval.Expired];
//   - the request's context ends first: the form is removed and the answer
//     is [approval.Withdrawn].
//
// A prompt that follows one withdrawn while on screen opens with a banner
// saying it is a different request. With Accessible, the request is
// written whole as plain lines instead, and the question asked after
// [Dwell]. After each prompt it prints one line saying how it ended. Requests are
// shown one at a time, first come first served; a request waiting its turn
// is bounded only by its own context, and one whose context ends while it
// waits is never shown. Timeout counts from the moment a prompt is shown.
//
// Set the exported fields before the first call and do not change them
// afterwards; a Terminal must not be copied after first use. In must be a
// terminal; In and Out are usually the same file.
type Terminal struct {
	// In is where answers are read from. It must be a terminal: it is put
	// in raw mode while a prompt is shown and type-ahead is flushed from it.
	In *os.File
	// Out is where the request and the form are written.
	Out *os.File
	// Timeout bounds each prompt from the moment it is shown; 0 means
	// DefaultPromptTimeout.
	Timeout time.Duration
	// Name names the terminal in messages and in Decision.By, e.g.
	// "/dev/pts/3"; "" means In.Name().
	Name string
	// Operator is the user name of the person at the terminal, e.g. "root",
	// for the message a denied requester is told.
	Operator string
	// Accessible asks in plain lines for screen readers (huh's accessible
	// mode) instead of the redrawn form: "y" and Enter approve; anything
	// else, Enter alone, or the end of input deny.
	Accessible bool
	// AfterWithdrawn says the request shown on this terminal just before
	// was withdrawn while on screen (by an earlier Terminal on the same
	// terminal): the first prompt then opens with a banner saying it is a
	// different request. The Terminal sets it itself for the prompts after.
	AfterWithdrawn bool
	// GrantDurations are the lengths of standing grant g offers, the
	// first one first; nil means approval.DefaultGrantDurations, empty
	// that g offers none (the daemon keeps none). Each is at most
	// approval.MaxGrant.
	GrantDurations []time.Duration
	// RuleFile is the policy drop-in a rule saved from the prompt (r) goes
	// to, shown before it is confirmed; "" means r offers none (the daemon
	// has no policy file, or saves no rules).
	RuleFile string
	// Machine is the host name of the daemon that asks, as it told it
	// (rootgate approve attached to several daemons); "" when the
	// terminal is the daemon's own. Each prompt then says, below the
	// request and in every redraw, which machine the command runs on, as
	// the daemon names itself, and Via, the socket it was reached
	// through. Both are escaped before they are shown.
	Machine string
	// Via is the approver socket the daemon was reached through.
	Via string

	mu    sync.Mutex // guards the fields that follow
	busy  bool       // a request holds the terminal
	queue []chan struct{}

	logMu    sync.Mutex // guards the fields that follow; never held with mu
	onScreen bool       // a prompt is on screen: hold log output back
	logs     []*heldLog
}

var _ approval.Approver = (*Terminal)(nil)

// Approve implements [approval.Approver]. It waits for its turn, shows the prompt and
// returns:
//
//   - Allow, with an empty Message;
//   - Deny, "denied by operator OPERATOR on NAME";
//   - Expired, "no approval decision within 60s" (the actual Timeout);
//   - Withdrawn, "request withdrawn", when ctx ended first (while waiting
//     its turn or while shown);
//   - Unavailable, "approval prompt on NAME failed: …", when the terminal
//     could not be used (not a terminal, gone, write error).
//
// Decision.By is "tty NAME" in every case. When ctx was cancelled with a
// cause (context.WithCancelCause), say "approved by root on /dev/pts/4",
// the outcome line on the terminal gives it: "withdrawn (approved by …)".
func (t *Terminal) Approve(ctx context.Context, p *approval.Prompt) approval.Decision {
	by := "tty " + t.name()
	if ctx.Err() != nil || t.acquire(ctx) != nil {
		return approval.Decision{Verdict: approval.Withdrawn, Message: approval.WithdrawnMessage, By: by}
	}
	defer t.release()
	if ctx.Err() != nil {
		return approval.Decision{Verdict: approval.Withdrawn, Message: approval.WithdrawnMessage, By: by}
	}

	t.holdLogs()
	defer t.releaseLogs()
	d, outcome := t.ask(ctx, p)
	// Only the holder of the terminal touches AfterWithdrawn.
	t.AfterWithdrawn = d.Verdict == approval.Withdrawn
	if t.Out != nil {
		fmt.Fprintf(t.Out, "rootgate: request %s %s\r\n", termsafe.Sanitize(p.ID), outcome)
	}
	return d
}

func (t *Terminal) name() string {
	if t.Name != "" {
		return t.Name
	}
	if t.In != nil {
		return t.In.Name()
	}
	return "(no terminal)"
}

func (t *Terminal) timeout() time.Duration {
	if t.Timeout > 0 {
		return t.Timeout
	}
	return approval.DefaultPromptTimeout
}

// acquire waits until the caller holds the terminal, in arrival order. It
// returns ctx's error, not holding the terminal, when ctx ends first.
func (t *Terminal) acquire(ctx context.Context) error {
	t.mu.Lock()
	if !t.busy {
		t.busy = true
		t.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	t.queue = append(t.queue, turn)
	t.mu.Unlock()

	select {
	case <-turn:
		return nil
	case <-ctx.Done():
	}
	t.mu.Lock()
	for i, c := range t.queue {
		if c == turn {
			t.queue = append(t.queue[:i], t.queue[i+1:]...)
			t.mu.Unlock()
			return ctx.Err()
		}
	}
	t.mu.Unlock()
	// release handed us the terminal as ctx ended: pass it on unused.
	t.release()
	return ctx.Err()
}

// release hands the terminal to the next waiter, or frees it.
func (t *Terminal) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.queue) == 0 {
		t.busy = false
		return
	}
	next := t.queue[0]
	t.queue = t.queue[1:]
	close(next) // busy stays true: the terminal passes straight to next
}

// ask shows one prompt. It returns the decision and the words for the
// outcome line.
func (t *Terminal) ask(ctx context.Context, p *approval.Prompt) (approval.Decision, string) {
	name := t.name()
	by := "tty " + name
	fail := func(err error) (approval.Decision, string) {
		msg := wire.PromptFailed("approval", name, err)
		return approval.Decision{Verdict: approval.Unavailable, Message: msg, By: by}, "not asked: " + termsafe.Sanitize(msg)
	}
	if t.In == nil || t.Out == nil {
		return fail(errors.New("no terminal"))
	}
	fd := int(t.In.Fd())
	if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
		return fail(fmt.Errorf("not a terminal: %w", err))
	}

	// Keys typed before the request appeared are not answers to it.
	flush := func() error { return unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH) }
	if err := flush(); err != nil {
		return fail(fmt.Errorf("failed to discard type-ahead: %w", err))
	}

	timeout := t.timeout()
	deadline := time.Now().Add(timeout)
	pctx, cancel := context.WithDeadlineCause(ctx, deadline, approval.ErrPromptTimeout)
	defer cancel()

	if t.Accessible {
		// The answer is typed as a line, seen as it is typed, even
		// where the terminal was quiet between prompts (Quiet).
		if tio, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
			_ = unix.IoctlSetTermios(fd, unix.TCSETS, lineMode(*tio))
			defer func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, tio) }()
		}
		ok, err := t.askAccessible(pctx, p, flush)
		switch {
		case pctx.Err() == nil && err == nil && ok:
			return approval.Decision{Verdict: approval.Allow, By: by}, "approved"
		case pctx.Err() == nil && err == nil:
			return approval.Decision{Verdict: approval.Deny, Message: t.denyMessage(name), By: by}, "denied"
		}
		return t.ended(ctx, pctx, timeout, err, fail)
	}

	// Raw mode, the window size and drawing are done here, not by Bubble
	// Tea: its renderer redraws only the cells that changed, with cursor
	// motions for blanks, and queries the terminal when it starts.
	raw, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return fail(err)
	}
	restore := *raw
	makeRaw(raw)
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, raw); err != nil {
		return fail(fmt.Errorf("failed to put the terminal in raw mode: %w", err))
	}
	defer func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, &restore) }()

	profile := colorprofile.Env(os.Environ())
	out := &colorprofile.Writer{Forward: t.Out, Profile: profile}
	var ok bool // false: Deny is focused and is what Enter takes
	durations := t.GrantDurations
	if durations == nil {
		durations = approval.DefaultGrantDurations
	}
	m := &promptModel{
		durations: durations,
		ruleFile:  t.RuleFile,
		form:      newConfirmForm(p, &ok),
		p:         p,
		text:      strings.TrimSuffix(approval.RenderWhole(p), "\n"),
		deadline:  deadline,
		banner:    t.AfterWithdrawn,
		machine:   t.machineLine(),
		flush:     func() { _ = flush() },
	}
	v := &inlineView{m: m, out: out}
	w, h := windowSize(fd)
	keys, stopReading, err := readKeys(t.In)
	if err != nil {
		return fail(err)
	}
	stopKeys := sync.OnceFunc(stopReading)
	defer stopKeys()
	prog := tea.NewProgram(v,
		tea.WithInput(keys),
		tea.WithOutput(out),
		tea.WithoutRenderer(),
		tea.WithColorProfile(profile),
		tea.WithWindowSize(w, h),
		// The daemon owns SIGINT and SIGTERM: they end the request
		// contexts, which withdraws the prompt.
		tea.WithoutSignalHandler(),
	)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, unix.SIGWINCH)
	defer signal.Stop(winch)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-pctx.Done():
				prog.Send(endPromptMsg{}) // returns at once if prog has stopped
				return
			case <-winch:
				w, h := windowSize(fd)
				prog.Send(tea.WindowSizeMsg{Width: w, Height: h})
			case <-done:
				return
			}
		}
	}()
	if _, err := io.WriteString(t.Out, "\r\n"+ansi.HideCursor+ansi.SetModeBracketedPaste); err != nil {
		return fail(err)
	}
	_, err = prog.Run()
	close(done)
	v.draw() // the last view, normally none: the form leaves the screen
	_, _ = io.WriteString(t.Out, ansi.ResetModeBracketedPaste+ansi.ShowCursor)
	if err == nil {
		err = v.err
	}

	switch state := m.form.State; {
	case state == huh.StateCompleted && ok && m.armed && m.seenEnd && m.rule != "":
		return approval.Decision{Verdict: approval.Allow, By: by, Rule: m.rule}, "approved, with a policy rule to save"
	case state == huh.StateCompleted && ok && m.armed && m.seenEnd && m.grant > 0:
		return approval.Decision{Verdict: approval.Allow, By: by, Grant: m.grant}, "approved, with a standing grant for " + approval.DisplayDuration(m.grant)
	case state == huh.StateCompleted && ok && m.armed && m.seenEnd:
		return approval.Decision{Verdict: approval.Allow, By: by}, "approved"
	case state == huh.StateCompleted && m.wantNote:
		stopKeys()
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, lineMode(restore))
		note := t.readNote(pctx)
		d := approval.Decision{Verdict: approval.Deny, Message: t.denyMessage(name), By: by, Note: note}
		if note != "" {
			return d, "denied, with a note"
		}
		return d, "denied"
	case state == huh.StateCompleted || state == huh.StateAborted:
		return approval.Decision{Verdict: approval.Deny, Message: t.denyMessage(name), By: by}, "denied"
	}
	return t.ended(ctx, pctx, timeout, err, fail)
}

// readNote asks, on the terminal in its normal line mode, for a deny
// note for the requester, until Enter or the end of ctx: then the prompt
// is answered with no note. The request stays denied whatever is typed;
// the note is cleaned as the daemon cleans every note (wire.SanitizeNote).
func (t *Terminal) readNote(ctx context.Context) string {
	if _, err := io.WriteString(t.Out, "Denied. A note for the requester (one line, Enter sends it; Enter alone sends none):\r\n> "); err != nil {
		return ""
	}
	in, err := cancelreader.NewReader(ttyInput{t.In})
	if err != nil {
		return ""
	}
	defer in.Close()
	stop := context.AfterFunc(ctx, func() { in.Cancel() })
	defer stop()
	line, err := bufio.NewReader(io.LimitReader(in, 4<<10)).ReadString('\n')
	if err != nil && ctx.Err() != nil {
		return ""
	}
	return wire.SanitizeNote(line)
}

// ended tells why a prompt ended without an answer: withdrawn, timed out,
// or failed.
func (t *Terminal) ended(ctx, pctx context.Context, timeout time.Duration, err error, fail func(error) (approval.Decision, string)) (approval.Decision, string) {
	by := "tty " + t.name()
	switch {
	case ctx.Err() != nil:
		outcome := "withdrawn"
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, context.DeadlineExceeded) {
			outcome += " (" + termsafe.Sanitize(cause.Error()) + ")"
		}
		return approval.Decision{Verdict: approval.Withdrawn, Message: approval.WithdrawnMessage, By: by}, outcome
	case errors.Is(context.Cause(pctx), approval.ErrPromptTimeout):
		msg := wire.PromptTimeoutError(timeout).Error()
		return approval.Decision{Verdict: approval.Expired, Message: msg, By: by}, "timed out (" + msg + ")"
	case errors.Is(err, errHangup), errors.Is(err, unix.EIO):
		// EIO: a hung-up terminal also fails the window size query.
		return fail(errHangup)
	case err != nil:
		return fail(err)
	}
	return fail(errors.New("the prompt ended without an answer"))
}

// askAccessible asks with huh's accessible Confirm: plain lines, no
// redrawing. The Confirm is bound to false, so an empty line or the end of
// input denies. huh cannot be interrupted while it reads, so it reads
// through a cancelreader (epoll on the terminal), cancelled when ctx ends:
// the read then fails and huh returns as if the input had ended.
//
// The whole request, stdin included, is written first as plain lines, so a
// screen reader reads all of it; then, for [Dwell], typed lines are
// discarded (and flushed once more at its end) before the question.
func (t *Terminal) askAccessible(ctx context.Context, p *approval.Prompt, flush func() error) (bool, error) {
	var head strings.Builder
	if t.AfterWithdrawn {
		head.WriteString(withdrawnBanner + "\n")
	}
	head.WriteString(approval.RenderWhole(p))
	if l := t.machineLine(); l != "" {
		head.WriteString(l + "\n")
	}
	if _, err := io.WriteString(t.Out, "\n"+head.String()); err != nil {
		return false, err
	}
	select {
	case <-ctx.Done():
		return false, nil
	case <-time.After(Dwell):
	}
	if err := flush(); err != nil {
		return false, fmt.Errorf("failed to discard type-ahead: %w", err)
	}
	in, err := cancelreader.NewReader(t.In)
	if err != nil {
		return false, err
	}
	defer in.Close()
	stop := context.AfterFunc(ctx, func() { in.Cancel() })
	defer stop()
	ok := false
	title := fmt.Sprintf("That is the whole request. Run this command as %s? Type y and Enter to approve; Enter alone denies.", approval.RunAsWord(p))
	confirm := huh.NewConfirm().Title(title).Value(&ok)
	confirm.WithTheme(huh.ThemeFunc(promptTheme))
	out := &colorprofile.Writer{Forward: t.Out, Profile: colorprofile.Env(os.Environ())}
	err = confirm.RunAccessible(out, in)
	return ok && ctx.Err() == nil, err
}

// readKeys returns what is typed on f, read by one goroutine of ours, and
// a function that stops that goroutine and waits until it has. Bubble Tea
// v2 reads the terminal itself from goroutines that can outlive
// Program.Run and go on reading it during the next prompt, taking its
// keys; given a pipe, what outlives Run reads only that pipe, closed by
// stop.
func readKeys(f *os.File) (io.Reader, func(), error) {
	in, err := cancelreader.NewReader(ttyInput{f})
	if err != nil {
		return nil, nil, err
	}
	pr, pw := io.Pipe()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		var k keyReads
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if _, werr := pw.Write(k.mark(buf[:n])); werr != nil {
					return
				}
			}
			if err != nil {
				if errors.Is(err, cancelreader.ErrCanceled) {
					err = nil
				}
				pw.CloseWithError(err)
				return
			}
		}
	}()
	stop := func() {
		pr.Close() // a write to the pipe now fails
		in.Cancel()
		<-copied
		in.Close()
	}
	return pr, stop, nil
}

// keyReads marks, in what is read from the terminal, each run of two or
// more characters that came in one read as a bracketed paste, so Bubble Tea
// gives it as a PasteMsg, not as keys: "yes" typed (or pasted, or sent by a
// program) in one go is text, not the key y. Bubble Tea v1 did this itself.
// Escape sequences, control keys and pastes the terminal marked pass
// through as they are.
type keyReads struct {
	inPaste bool // inside a paste the terminal marked
}

const (
	pasteStart = "\x1b[200~"
	pasteEnd   = "\x1b[201~"
)

func (k *keyReads) mark(b []byte) []byte {
	out := make([]byte, 0, len(b)+2*len(pasteStart))
	run := 0 // where the current run of characters starts
	flush := func(i int) {
		if utf8.RuneCount(b[run:i]) >= 2 {
			out = append(out, pasteStart...)
			out = append(out, b[run:i]...)
			out = append(out, pasteEnd...)
		} else {
			out = append(out, b[run:i]...)
		}
	}
	i := 0
	for i < len(b) {
		if k.inPaste {
			end := strings.Index(string(b[i:]), pasteEnd)
			if end < 0 {
				return append(out, b[i:]...)
			}
			out = append(out, b[i:i+end+len(pasteEnd)]...)
			i += end + len(pasteEnd)
			k.inPaste = false
			run = i
			continue
		}
		c := b[i]
		if c >= 0x20 && c != 0x7f {
			i++ // part of a run of characters
			continue
		}
		flush(i)
		n := 1
		if c == 0x1b {
			n = escapeLen(b[i:])
			if string(b[i:i+n]) == pasteStart {
				k.inPaste = true
			}
		}
		out = append(out, b[i:i+n]...)
		i += n
		run = i
	}
	flush(len(b))
	return out
}

// escapeLen is the length of the escape sequence b starts with: CSI, SS3,
// OSC, or ESC and one more byte (alt and a key); all of b if it ends first.
func escapeLen(b []byte) int {
	if len(b) < 2 {
		return len(b)
	}
	switch b[1] {
	case '[':
		for i := 2; i < len(b); i++ {
			if b[i] >= 0x40 && b[i] <= 0x7e {
				return i + 1
			}
		}
		return len(b)
	case 'O':
		return min(3, len(b))
	case ']':
		for i := 2; i < len(b); i++ {
			if b[i] == 0x07 {
				return i + 1
			}
			if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\' {
				return i + 2
			}
		}
		return len(b)
	}
	return 2
}

// ttyInput is the terminal as the form reads it. A hung-up terminal reads
// as end of file (or EIO), which Bubble Tea takes as "no more input" and
// goes on waiting; ttyInput makes it errHangup, so the prompt ends at once.
type ttyInput struct{ *os.File }

func (f ttyInput) Read(b []byte) (int, error) {
	n, err := f.File.Read(b)
	if n == 0 && len(b) > 0 && (err == nil || errors.Is(err, io.EOF) || errors.Is(err, unix.EIO)) {
		return 0, errHangup
	}
	return n, err
}

func (t *Terminal) denyMessage(name string) string {
	return wire.DeniedByOperatorError(t.Operator, name).Error()
}

// newConfirmForm builds the prompt's form: a huh Confirm bound to ok
// (false, so Deny is focused), titled with the run-as user, described by
// nothing else: [promptModel] draws the request above it. Esc and ctrl+c abort the form (a
// denial). Styles use no colour at all, so nothing
// needs the terminal's background, and the focused button is marked by
// text as well as by reverse video, so it shows without colour too.
func newConfirmForm(p *approval.Prompt, ok *bool) *huh.Form {
	title := "Run this command as " + approval.RunAsWord(p) + "?"
	keys := huh.NewDefaultKeyMap()
	keys.Quit = key.NewBinding(key.WithKeys("ctrl+c", "esc"))

	form := huh.NewForm(huh.NewGroup(
		huh.NewConfirm().
			Title(title).
			Affirmative("Approve").
			Negative("Deny").
			Value(ok),
	)).
		WithKeyMap(keys).
		WithTheme(huh.ThemeFunc(promptTheme)).
		WithShowHelp(false).
		WithShowErrors(false)
	form.SubmitCmd = tea.Quit
	form.CancelCmd = tea.Quit
	return form
}

// promptTheme is the form's theme, the same on a dark or a light
// background.
func promptTheme(bool) *huh.Styles {
	plain := lipgloss.NewStyle()
	var t huh.Styles
	t.Form.Base = plain
	t.Group.Base = plain
	t.Group.Title = plain.Bold(true)
	t.Group.Description = plain
	t.FieldSeparator = plain.SetString("\n\n")
	button := plain.Padding(0, 1).MarginRight(2)
	f := &t.Focused
	f.Base = plain.PaddingLeft(1).BorderStyle(lipgloss.ThickBorder()).BorderLeft(true)
	f.Card = f.Base
	f.Title = plain.Bold(true)
	f.Description = plain
	f.ErrorIndicator = plain.SetString(" *")
	f.ErrorMessage = plain.SetString(" *")
	// Render joins a style's string and its argument with a space:
	// "> Deny" when focused, "  Approve" when not.
	f.FocusedButton = button.Reverse(true).Bold(true).SetString(">")
	f.BlurredButton = button.SetString(" ")
	t.Blurred = t.Focused
	return &t
}

// promptModel runs a huh form under our own Bubble Tea program. Above the
// form it shows the whole request (text, [approval.RenderWhole]) in a pager that
// fits the window, wrapped to its width; then who asks and every stage of
// the pipeline, one line each, cut to the width and saying so; then the
// form and a line saying which keys count. It adds:
//
//   - the dwell: keys count only [Dwell] after the prompt appeared; those
//     typed before are discarded, and type-ahead is flushed at its end;
//   - paging: when the request is taller than its pager, y (and moving to
//     Approve) is refused until the operator has paged to its end, with
//     ↓ j, space, PgDn (there is no key to jump to the end);
//   - room: in a window too short for the form and a pager, or narrower
//     than the layout needs (tooSmall), no key approves until it is
//     enlarged, and the key line says how large it must be;
//   - the countdown, the end of the request's context (endPromptMsg) and a
//     usable size on terminals that report 0x0.
type promptModel struct {
	form     *huh.Form
	p        *approval.Prompt
	text     string // the request, without its last newline
	deadline time.Time
	banner   bool   // the previous prompt was withdrawn: say this is another
	machine  string // the line naming the daemon's machine, or ""
	flush    func() // discards type-ahead
	ended    bool   // the prompt's context ended before an answer

	width, height int
	minWidth      int      // the narrowest window the layout fits (layoutWidth)
	formWidth     int      // the form's widest row, at the last footer
	lines         []string // text wrapped to width
	stages        []string // who asks and each stage, cut to width
	top           int      // the first line of lines in the pager
	armed         bool     // Dwell has passed: keys count
	wantNote      bool     // denied with m: ask for a note for the requester
	seenEnd       bool     // the pager has shown the last line
	refused       bool     // y was refused for want of paging or of room
	footerLines   int      // the footer's height at the last View

	// A standing grant (g): grantStep is 0 on the request, 1 while the
	// grant is shown, 2 while the second confirmation for a request that
	// runs anything is. grant is the length confirmed.
	durations []time.Duration
	grantStep int
	grantIdx  int           // the duration shown, in durations
	grant     time.Duration // the grant confirmed, when the form completes
	grantNo   string        // why g was refused, shown in the key line
	armGen    int           // the dwell that armMsg{armGen} ends

	// A policy rule (r): ruleStep is 0 on the request, 1 while the rule
	// is edited, 2 while the checked rule is shown for confirmation, 3
	// while the second confirmation is. rule is the text confirmed, when
	// the form completes.
	ruleFile string
	ruleStep int
	edit     textarea.Model
	ruleErr  string // why the edited rule was refused, shown above it
	ruleText string // the checked rule, on steps 2 and 3
	rule     string
	ruleNo   string // why r was refused, shown in the key line
}

// endPromptMsg tells the program the prompt's context ended.
type endPromptMsg struct{}

// tickMsg refreshes the countdown.
type tickMsg struct{}

// armMsg ends the dwell numbered gen.
type armMsg struct{ gen int }

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(time.Time) tea.Msg { return tickMsg{} })
}

func (m *promptModel) Init() tea.Cmd {
	m.layout(80, 24)
	return tea.Batch(m.form.Init(), tick(), tea.Tick(Dwell, func(time.Time) tea.Msg { return armMsg{} }))
}

// show replaces the text in the pager, which must be paged to its end
// again, and starts a new dwell.
func (m *promptModel) show(text string) tea.Cmd {
	m.text = text
	m.lines = nil
	m.layout(m.width, m.height)
	m.seenEnd = false
	m.refused = false
	m.armed = false
	m.armGen++
	gen := m.armGen
	return tea.Tick(Dwell, func(time.Time) tea.Msg { return armMsg{gen: gen} })
}

// grantText is the standing grant as step shows it.
func (m *promptModel) grantText() string {
	d := m.durations[m.grantIdx]
	text := approval.RenderGrant(m.p, d, time.Now())
	if m.grantStep == 2 {
		var b strings.Builder
		b.WriteString("!!! SECOND CONFIRMATION: this grant allows more than one command.\n")
		for _, why := range approval.RunsAnything(m.p) {
			b.WriteString("!!! " + why + ":\n")
		}
		b.WriteString("!!! with these arguments it may be harmless, but confirm only if you read them all.\n")
		text = b.String() + text
	}
	return strings.TrimSuffix(text, "\n")
}

// grantKey handles a key while a grant is shown.
func (m *promptModel) grantKey(msg tea.KeyPressMsg) (*promptModel, tea.Cmd) {
	switch msg.String() {
	case "n", "N", "esc":
		m.grantStep = 0
		cmd := m.show(strings.TrimSuffix(approval.RenderWhole(m.p), "\n"))
		m.armed, m.armGen = true, m.armGen+1 // the request was read: no new dwell
		return m, cmd
	case "d", "D":
		m.grantIdx = (m.grantIdx + 1) % len(m.durations)
		top, seen := m.top, m.seenEnd
		cmd := m.show(m.grantText())
		m.top, m.seenEnd, m.armed, m.armGen = top, seen, true, m.armGen+1
		m.scroll(0)
		return m, cmd
	case "y", "Y":
		if !m.seenEnd {
			m.refused = true
			return m, nil
		}
		if m.grantStep == 1 && len(approval.RunsAnything(m.p)) > 0 {
			m.grantStep = 2
			return m, m.show(m.grantText())
		}
		m.grant = m.durations[m.grantIdx]
		_, cmd := m.form.Update(tea.KeyPressMsg{Code: 'y', Text: "y"})
		return m, cmd
	case "ctrl+c":
		_, cmd := m.form.Update(msg) // denies, as on the request
		return m, cmd
	}
	return m, nil
}

// contPrefix is what a wrapped line's continuation lines start with: the
// requester's mark again for the requester's words, an arrow indented
// deeper than any label of the daemon's otherwise. Either way no
// continuation line can look like a line of the daemon's.
func contPrefix(line string) string {
	if strings.HasPrefix(line, approval.RequesterMark) {
		return approval.RequesterMark + "  ↳ "
	}
	return strings.Repeat(" ", len(line)-len(strings.TrimLeft(line, " "))) + "    ↳ "
}

// wrapLine cuts line into pieces of at most width cells ([termsafe.Cells]).
func wrapLine(line string, width int) []string {
	if termsafe.Cells(line) <= width {
		return []string{line}
	}
	prefix := contPrefix(line)
	w := max(width-termsafe.Cells(prefix), 8)
	var parts []string
	for line != "" {
		var part string
		part, line = termsafe.Cut(line, w)
		if len(parts) > 0 {
			part = prefix + part
		}
		parts = append(parts, part)
	}
	return parts
}

// layout wraps the request for a window of w×h cells.
func (m *promptModel) layout(w, h int) {
	if w == m.width && h == m.height && m.lines != nil {
		return
	}
	m.width, m.height = w, h
	m.lines = m.lines[:0]
	for line := range strings.SplitSeq(m.text, "\n") {
		m.lines = append(m.lines, wrapLine(line, w)...)
	}
	m.top = 0
	m.scroll(0)
	fitted := []string{"Asked by " + approval.DescribeRequester(&m.p.Requester) + ", per the kernel"}
	for i, st := range m.p.Stages {
		fitted = append(fitted, fmt.Sprintf("  [%d] %s", i+1, approval.QuoteArgv(st.Argv)))
	}
	m.stages = m.stages[:0]
	for _, l := range fitted {
		m.stages = append(m.stages, fit(l, w))
	}
	m.minWidth = layoutWidth(m.text, fitted)
}

// ownLineRunes bounds the length of the footer's own lines that fit cuts
// (the key line, the pager's status line, the banners): each is under
// 1000 characters, so fit's marker for them has at most 3 digits.
const ownLineRunes = 999

// layoutWidth is the narrowest window in which every row of a prompt for
// text (the pager's lines) and fitted (the footer's lines of the
// requester's words, which fit cuts) is drawn whole or cut saying so:
// wrapLine's continuation rows are their prefix and at least 8 cells
// more, and fit keeps at least 8 cells and its marker. Below it a row
// would be wider than the window and lose its end without a word
// (draw cuts it at the edge), so the prompt is too small.
func layoutWidth(text string, fitted []string) int {
	need := fitWidth(strings.Repeat("x", ownLineRunes))
	for line := range strings.SplitSeq(text, "\n") {
		need = max(need, min(termsafe.Cells(line), termsafe.Cells(contPrefix(line))+8))
	}
	for _, l := range fitted {
		need = max(need, fitWidth(l))
	}
	return need
}

// fitWidth is the narrowest width at which fit(s) is no wider than it.
func fitWidth(s string) int {
	return min(termsafe.Cells(s), 8+termsafe.Cells(fitMarker(utf8.RuneCountInString(s))))
}

// footer is what goes below the pager: who asks, every stage on its own
// line, the form and the key line.
func (m *promptModel) footer() []string {
	var f []string
	if m.banner {
		f = append(f, fit(withdrawnBanner, m.width))
	}
	if m.machine != "" {
		f = append(f, fit(m.machine, m.width))
	}
	if m.p.Group > 1 {
		f = append(f, fit(approval.GroupBanner(m.p.Group), m.width))
	}
	if n := len(m.lines); m.pagerHeight() < n {
		end := min(m.top+m.pagerHeight(), n)
		status := fmt.Sprintf("── lines %d-%d of %d · ↓ j space PgDn: on · ↑ k b PgUp: back", m.top+1, end, n)
		if !m.seenEnd {
			status += " · page to the end before y counts"
		}
		f = append(f, fit(status, m.width))
	}
	f = append(f, m.stages...)
	if m.ruleStep == 1 {
		f = append(f, editorRows(m.edit.View(), m.width)...)
	} else {
		form := strings.Split(strings.TrimRight(m.form.View(), "\n"), "\n")
		// The form wraps its title to the window, but not its
		// buttons' row: the window must hold the widest row.
		m.formWidth = 0
		for _, row := range form {
			m.formWidth = max(m.formWidth, ansi.StringWidth(row))
		}
		f = append(f, form...)
	}
	left := max(time.Until(m.deadline).Round(time.Second), 0)
	var keys string
	switch {
	case !m.armed:
		keys = " keys are not accepted yet: read the request"
	case m.tooSmall():
		// Wrapped, not cut: in a window this narrow, fit would leave
		// only its first words.
		for rest := m.tooSmallKeys(); rest != ""; {
			var row string
			row, rest = termsafe.Cut(rest, max(m.width, 1))
			f = append(f, row)
		}
		return append(f, " times out in "+approval.DisplaySeconds(left))
	case m.grantStep == 1 && !m.seenEnd:
		keys = " GRANT: page to the end of the grant before y counts · n or Esc back to the request"
	case m.grantStep == 1:
		keys = fmt.Sprintf(" GRANT: y approve and grant for %s · d other length (%s) · n or Esc back to the request",
			approval.DisplayDuration(m.durations[m.grantIdx]), durationList(m.durations))
	case m.grantStep == 2 && !m.seenEnd:
		keys = " SECOND CONFIRMATION: page to the end before y counts · n or Esc back to the request"
	case m.grantStep == 2:
		keys = " SECOND CONFIRMATION: y approve and grant it anyway · n or Esc back to the request"
	case m.ruleStep == 1:
		keys = " RULE: edit it · Enter check it · Esc back to the request · ctrl+c deny"
	case m.ruleStep == 2 && !m.seenEnd:
		keys = " RULE: page to the end of the rule before y counts · n or Esc back to editing"
	case m.ruleStep == 2:
		keys = " RULE: y approve and save this rule · n or Esc back to editing"
	case m.ruleStep == 3 && !m.seenEnd:
		keys = " SECOND CONFIRMATION: page to the end before y counts · n or Esc back to editing"
	case m.ruleStep == 3:
		keys = " SECOND CONFIRMATION: y approve and save the rule anyway · n or Esc back to editing"
	case m.refused && !m.seenEnd:
		keys = " y refused: page to the end first (space, PgDn) · n or Esc deny · m deny with a note"
	case !m.seenEnd:
		keys = " page to the end of the request before y counts · n or Esc deny · m deny with a note"
	case m.grantNo != "":
		keys = " y approve · n or Esc deny · m deny with a note · no grant: " + m.grantNo
	case m.ruleNo != "":
		keys = " y approve · n or Esc deny · m deny with a note · no rule: " + m.ruleNo
	case m.ruleFile != "":
		keys = " y approve · n or Esc deny · m deny with a note · g grant for a time · r save a rule · Enter takes the highlighted answer"
	default:
		keys = " y approve · n or Esc deny · m deny with a note · g grant for a time · Enter takes the highlighted answer"
	}
	f = append(f, fit(keys, m.width), " times out in "+approval.DisplaySeconds(left))
	return f
}

// fit cuts s to width cells ([termsafe.Cells]), saying how many
// characters it left out.
func fit(s string, width int) string {
	if termsafe.Cells(s) <= width {
		return s
	}
	n := utf8.RuneCountInString(s)
	kept, _ := termsafe.Cut(s, max(width-termsafe.Cells(fitMarker(n)), 8))
	return kept + fitMarker(n-utf8.RuneCountInString(kept))
}

// fitMarker is what fit ends a line with when it left out n characters.
func fitMarker(n int) string { return fmt.Sprintf(" …(+%d more)", n) }

// machineLine names the machine of the daemon that asks, or "" when
// Machine is unset.
func (t *Terminal) machineLine() string {
	if t.Machine == "" {
		return ""
	}
	return fmt.Sprintf("Runs on host %s: the name rootgated there gives itself (reached through %s)",
		termsafe.Sanitize(t.Machine), termsafe.Sanitize(t.Via))
}

// pagerHeight is how many lines of the request fit above the footer.
func (m *promptModel) pagerHeight() int {
	// One line spare: a view as tall as the window scrolls it.
	return max(m.height-m.footerLines-1, 3)
}

// tooSmall reports whether the window cannot hold the footer and a pager
// of 3 lines (the top of the view would be cut off), or is narrower than
// the layout needs (minWidth: rows would be cut at its edge unsaid):
// then nothing can be approved until it is enlarged.
func (m *promptModel) tooSmall() bool {
	return m.footerLines+3+1 > m.height || m.width < m.needWidth()
}

// needWidth is the narrowest window the prompt fits: its layout's and
// its form's.
func (m *promptModel) needWidth() int { return max(m.minWidth, m.formWidth) }

// tooSmallKeys is the key line of a window too small, saying what it
// lacks.
func (m *promptModel) tooSmallKeys() string {
	var need []string
	if m.width < m.needWidth() {
		need = append(need, fmt.Sprintf("%d columns (it has %d)", m.needWidth(), m.width))
	}
	if m.footerLines+3+1 > m.height {
		need = append(need, fmt.Sprintf("%d rows (it has %d)", m.footerLines+3+1, m.height))
	}
	keys := " window too small to show the request: enlarge it to " + strings.Join(need, " and ") + " · n or Esc deny · m deny with a note"
	if m.refused {
		keys = " y refused:" + keys
	}
	return keys
}

// scroll moves the pager by d lines, within the request.
func (m *promptModel) scroll(d int) {
	m.top = max(min(m.top+d, len(m.lines)-m.pagerHeight()), 0)
}

func (m *promptModel) Update(msg tea.Msg) (*promptModel, tea.Cmd) {
	switch msg := msg.(type) {
	case endPromptMsg:
		m.ended = true
		return m, tea.Quit
	case tickMsg:
		if m.form.State != huh.StateNormal {
			return m, nil
		}
		return m, tick()
	case armMsg:
		if msg.gen != m.armGen {
			return m, nil
		}
		m.armed = true
		m.flush() // what was typed during the dwell and not yet read
		return m, nil
	case tea.WindowSizeMsg:
		// A terminal that does not know its size (a serial console, a
		// fresh pty) says 0x0, which would give the form no room at all.
		if msg.Width <= 0 {
			msg.Width = 80
		}
		if msg.Height <= 0 {
			msg.Height = 24
		}
		m.layout(msg.Width, msg.Height)
		m.refused = false // a y refused at the old size is not this one's
		if m.ruleStep == 1 {
			m.edit.SetWidth(max(msg.Width-1, 10))
			sizeEditor(&m.edit)
		}
		_, cmd := m.form.Update(msg)
		return m, cmd
	case tea.PasteMsg:
		if m.armed && m.ruleStep == 1 {
			return m.ruleEditKey(msg)
		}
		return m, nil
	case tea.KeyPressMsg:
		if !m.armed {
			return m, nil // too early to be an answer to this request
		}
		if m.ruleStep == 1 {
			return m.ruleEditKey(msg)
		}
		ph := m.pagerHeight()
		switch msg.String() {
		case "down", "j":
			m.scroll(1)
			return m, nil
		case "up", "k":
			m.scroll(-1)
			return m, nil
		case "pgdown", "space", " ", "f", "ctrl+f":
			m.scroll(ph - 1)
			return m, nil
		case "pgup", "b", "ctrl+b":
			m.scroll(-(ph - 1))
			return m, nil
		case "y", "Y", "left", "right", "h", "l", "tab", "shift+tab", "enter":
			// Enter takes the highlighted answer, which may be Approve.
			if !m.seenEnd && msg.String() != "enter" || m.tooSmall() {
				m.refused = true
				return m, nil
			}
		}
		if m.grantStep > 0 {
			return m.grantKey(msg)
		}
		if m.ruleStep > 0 {
			return m.ruleKey(msg)
		}
		switch msg.String() {
		case "r", "R":
			if !m.seenEnd || m.tooSmall() {
				m.refused = true
				return m, nil
			}
			return m, m.startRule()
		case "g", "G":
			switch {
			case !m.seenEnd || m.tooSmall():
				m.refused = true
				return m, nil
			case approval.Grantable(m.p) != "":
				m.grantNo = approval.Grantable(m.p)
				return m, nil
			case len(m.durations) == 0:
				m.grantNo = "this rootgated keeps no standing grants"
				return m, nil
			}
			m.grantStep, m.grantIdx = 1, 0
			return m, m.show(m.grantText())
		case "m", "M":
			// Deny, then ask for a note: the form takes it as n.
			m.wantNote = true
			_, cmd := m.form.Update(tea.KeyPressMsg{Code: 'n', Text: "n"})
			return m, cmd
		}
	}
	_, cmd := m.form.Update(msg)
	return m, cmd
}

func (m *promptModel) View() string {
	if m.ended || m.form.State != huh.StateNormal {
		return "" // the form leaves the screen
	}
	// The footer's height fixes the pager's, which decides whether the
	// footer has a status line: settle it, then draw.
	footer := m.footer()
	for range 3 {
		if len(footer) == m.footerLines {
			break
		}
		m.footerLines = len(footer)
		m.scroll(0)
		footer = m.footer()
	}
	ph := m.pagerHeight()
	end := min(m.top+ph, len(m.lines))
	if end == len(m.lines) && !m.tooSmall() {
		m.seenEnd = true // this view shows the request's last line
	}
	view := make([]string, 0, ph+len(footer))
	view = append(view, m.lines[m.top:end]...)
	view = append(view, footer...)
	return strings.Join(view, "\n") + "\n"
}

// inlineView runs a [promptModel] under a Bubble Tea program that has no
// renderer: after each message it draws the model's view whole below the
// cursor, in place of the view drawn before, each line cut to the window's
// width and the view to its height (its last lines kept). Every line is
// written in full, blanks included, so what is on screen is also in the
// bytes written, in order.
type inlineView struct {
	m     *promptModel
	out   io.Writer
	last  string // the view drawn last
	lines int    // how many lines it took
	err   error  // the first write error
}

func (v *inlineView) Init() tea.Cmd {
	cmd := v.m.Init()
	v.draw()
	return cmd
}

func (v *inlineView) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	_, cmd := v.m.Update(msg)
	v.draw()
	if v.err != nil {
		return v, tea.Quit
	}
	return v, cmd
}

// View is empty: the program has no renderer; draw draws.
func (v *inlineView) View() tea.View { return tea.View{} }

// draw replaces the view on screen with the model's current one.
func (v *inlineView) draw() {
	view := v.m.View()
	if view == v.last || v.err != nil {
		return
	}
	v.last = view
	lines := strings.Split(strings.TrimSuffix(view, "\n"), "\n")
	if view == "" {
		lines = nil
	}
	// A view as tall as the window would scroll it: keep one line spare.
	if h := max(v.m.height-1, 1); len(lines) > h {
		lines = lines[len(lines)-h:]
	}
	var b strings.Builder
	if v.lines > 0 {
		b.WriteString(ansi.CursorUp(v.lines))
	}
	b.WriteString("\r" + ansi.EraseScreenBelow)
	for _, line := range lines {
		b.WriteString(ansi.Truncate(line, v.m.width, "") + ansi.ResetStyle + "\r\n")
	}
	v.lines = len(lines)
	_, v.err = io.WriteString(v.out, b.String())
}

// Quiet turns echo off on the terminal f, so keys typed while no prompt
// is up (at `rootgate approve`'s idle screen) are not shown, and returns
// what restores the terminal's modes. Line editing and signals stay as
// they were (Ctrl-C still interrupts); a prompt flushes what was typed
// before it and turns echo back on where it reads a line (a deny note,
// the accessible prompt).
func Quiet(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("not a terminal: %w", err)
	}
	saved := *tio
	tio.Lflag &^= unix.ECHO | unix.ECHONL
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, tio); err != nil {
		return nil, fmt.Errorf("failed to turn echo off: %w", err)
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, &saved) }, nil
}

// lineMode is tio with line editing and echo on: how a line (a note, the
// accessible prompt's answer) is read.
func lineMode(tio unix.Termios) *unix.Termios {
	tio.Lflag |= unix.ECHO | unix.ICANON | unix.ECHOE | unix.ECHOK
	return &tio
}

// makeRaw sets tio as cfmakeraw(3) does: keys are read one by one, unechoed
// and unprocessed, and output is written as is.
func makeRaw(tio *unix.Termios) {
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	tio.Oflag &^= unix.OPOST
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	tio.Cflag &^= unix.CSIZE | unix.PARENB
	tio.Cflag |= unix.CS8
	tio.Cc[unix.VMIN] = 1
	tio.Cc[unix.VTIME] = 0
}

// WindowSize is the size of the terminal f, 0x0 when it does not say.
func WindowSize(f *os.File) (width, height int) { return windowSize(int(f.Fd())) }

// windowSize is the size of the terminal on fd, 0x0 when it does not say.
func windowSize(fd int) (w, h int) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0
	}
	return int(ws.Col), int(ws.Row)
}

// LogWriter returns a writer for log output that passes writes through to
// w, except while a prompt is on the terminal: then it holds them back (up
// to 1 MiB, dropping whole writes past that and saying how many bytes it
// dropped) and writes them after the prompt's outcome line, so log lines
// never garble the form. It is safe for concurrent use.
func (t *Terminal) LogWriter(w io.Writer) io.Writer {
	l := &heldLog{t: t, w: w}
	t.logMu.Lock()
	t.logs = append(t.logs, l)
	t.logMu.Unlock()
	return l
}

// heldLog is a [Terminal.LogWriter].
type heldLog struct {
	t       *Terminal
	w       io.Writer
	held    []byte // guarded by t.logMu
	dropped int    // guarded by t.logMu
}

func (l *heldLog) Write(b []byte) (int, error) {
	l.t.logMu.Lock()
	defer l.t.logMu.Unlock()
	if !l.t.onScreen {
		return l.w.Write(b)
	}
	if len(l.held)+len(b) > maxHeldLog {
		l.dropped += len(b)
	} else {
		l.held = append(l.held, b...)
	}
	return len(b), nil
}

func (t *Terminal) holdLogs() {
	t.logMu.Lock()
	t.onScreen = true
	t.logMu.Unlock()
}

func (t *Terminal) releaseLogs() {
	t.logMu.Lock()
	defer t.logMu.Unlock()
	t.onScreen = false
	for _, l := range t.logs {
		if len(l.held) > 0 {
			_, _ = l.w.Write(l.held)
		}
		if l.dropped > 0 {
			fmt.Fprintf(l.w, "rootgate: %d bytes of log output dropped while an approval prompt was on screen\n", l.dropped)
		}
		l.held, l.dropped = nil, 0
	}
}

// durationList is ds for the key line: "15 min, 1 h".
func durationList(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = approval.DisplayDuration(d)
	}
	return strings.Join(parts, ", ")
}
