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

	tea "charm.land/bubbletea/v2"
	"charm.land/huh/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/cancelreader"
	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sys/unix"
)

// Dwell is how long a prompt is on screen before a key counts: keys typed
// meanwhile are discarded, and type-ahead is flushed again when it ends, so
// a key meant for something else (a double-tapped y, a prompt withdrawn and
// replaced under the operator's finger) does not answer this request. It is
// the least a prompt waits: [Terminal.DwellFor] may make it longer.
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
	// DwellFor is how long each prompt discards keys (its dwell); less
	// than [Dwell] (0 among them) is Dwell.
	DwellFor time.Duration
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

// dwell is how long each prompt discards keys: DwellFor, at least Dwell.
func (t *Terminal) dwell() time.Duration { return max(t.DwellFor, Dwell) }

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
		dwell:     t.dwell(),
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
	case <-time.After(t.dwell()):
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

func (t *Terminal) denyMessage(name string) string {
	return wire.DeniedByOperatorError(t.Operator, name).Error()
}

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

// durationList is ds for the key line: "15 min, 1 h".
func durationList(ds []time.Duration) string {
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = approval.DisplayDuration(d)
	}
	return strings.Join(parts, ", ")
}
