package remote

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/internal/termsafe"
	"golang.org/x/sys/unix"
)

// Reconnection backoff bounds.
const (
	backoffMin = 250 * time.Millisecond
	backoffMax = 5 * time.Second
)

// Client is the approver client's end of the protocol (rootgate approve):
// it attaches to rootgated's approver socket, re-attaching after the
// daemon goes away, puts each prompt to the operator through Ask, one at a
// time and first come first served, and sends the answer back. Set the
// fields before calling Run, once.
type Client struct {
	Socket   string // the approver socket
	Name     string // where it asks, e.g. "pts/3", or "desktop"
	Kind     string // how it asks, the hello's first capability: "terminal" or "desktop"
	Operator string // who sits here
	Agent    string // the SSH agent socket offered, or ""
	Version  string // the client's version, told in the hello
	// Out receives status lines; they are held while a prompt is up.
	Out io.Writer
	// Ask makes what asks the operator about one prompt, which must be
	// decided by deadline. afterWithdrawn says the prompt shown before was
	// withdrawn while on screen, so this one must say it is a different
	// request.
	Ask func(deadline time.Time, afterWithdrawn bool) approval.Approver
	// Size, when set, is Out's window size: Out is a terminal, and while
	// no prompt is up the client keeps the idle screen on it (the
	// requests waiting, standing grants, last decisions; see idleLines),
	// drawn again when the window is resized. The daemon is asked for
	// status messages only then.
	Size func() (width, height int)

	scr  *screen
	last []string // the last few outcomes here, e.g. "ap-y approved"; the worker's
	// afterWithdrawn: the last prompt shown here was withdrawn while on
	// screen, so the next one says it is a different request; the worker's.
	afterWithdrawn bool
	// grants: the daemon attached to keeps standing grants (its welcome
	// said so).
	grants atomic.Bool
}

// DaemonGrants reports whether the daemon this client is attached to
// keeps standing grants, so a prompt may offer one: an older daemon
// refuses a decision that carries one.
func (a *Client) DaemonGrants() bool { return a.grants.Load() }

// RefusedError is a daemon's refusal to attach the client: retrying
// cannot help.
type RefusedError struct{ Message string }

func (e *RefusedError) Error() string { return "rootgated refused this approver: " + e.Message }

// Run attaches, and re-attaches quietly after the daemon goes away, until
// ctx ends (Ctrl-C; then it returns nil) or the daemon refuses the client
// (a [*RefusedError]) or the socket refuses it (an error that is
// [os.ErrPermission]).
func (a *Client) Run(ctx context.Context) error {
	a.scr = &screen{out: a.Out, size: a.Size}
	if a.Size != nil {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, unix.SIGWINCH)
		defer signal.Stop(winch)
		stopped := make(chan struct{})
		defer close(stopped)
		go func() {
			// Ages and ends on the idle screen move on without a status.
			tick := time.NewTicker(idleRedraw)
			defer tick.Stop()
			for {
				select {
				case <-stopped:
					return
				case <-winch:
					a.scr.resized()
				case <-tick.C:
					a.scr.redrawAging()
				}
			}
		}()
		a.scr.setStatus(nil)
	}
	backoff := backoffMin
	waiting := false
	for ctx.Err() == nil {
		c, err := net.Dial("unix", a.Socket)
		if err != nil {
			if errors.Is(err, os.ErrPermission) {
				a.scr.finish("")
				return fmt.Errorf("cannot attach to %s: %w", a.Socket, err)
			}
			if !waiting {
				a.scr.println(fmt.Sprintf("rootgate: waiting for rootgated at %s (%v); retrying quietly", a.Socket, err))
				waiting = true
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, backoffMax)
			continue
		}
		waiting = false
		attached, err := a.session(ctx, c.(*net.UnixConn))
		if attached {
			backoff = backoffMin
		}
		if refused := (*RefusedError)(nil); errors.As(err, &refused) {
			a.scr.finish("")
			return refused
		}
		if ctx.Err() == nil {
			a.scr.println("rootgate: connection to rootgated lost; reconnecting")
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
	}
	a.scr.finish("rootgate: detached")
	return nil
}

// prompt is a request waiting to be shown.
type prompt struct {
	msg    *Message
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// session runs one connection: hello, welcome, then prompts until the
// connection ends. attached says whether the daemon accepted us.
func (a *Client) session(ctx context.Context, c *net.UnixConn) (attached bool, err error) {
	defer c.Close()
	defer a.scr.setStatus(nil) // what a lost daemon said no longer holds
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(connCtx, func() { c.Close() })
	defer stop()

	var wmu sync.Mutex
	send := func(m *Message) error {
		wmu.Lock()
		defer wmu.Unlock()
		_ = c.SetWriteDeadline(time.Now().Add(WriteWithin))
		return WriteMessage(c, m)
	}
	caps := []string{a.Kind, CapGroup}
	if a.Agent != "" {
		caps = append(caps, "forward-agent")
	}
	if a.Size != nil {
		caps = append(caps, CapStatus)
	}
	// A daemon that refuses this approver (not admitted, too many) may
	// say so and close before the hello is written: its words are read
	// all the same, so the refusal is reported rather than retried.
	herr := send(&Message{Type: MsgHello, Version: ProtoVersion, Client: a.Version,
		Name: a.Name, Capabilities: caps, AgentSocket: a.Agent})
	br := bufio.NewReaderSize(c, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(HelloWithin))
	welcome, err := ReadMessage(br, MaxDaemonLine)
	if err != nil {
		if herr != nil {
			return false, herr
		}
		return false, err
	}
	if herr != nil && welcome.Type != MsgError {
		return false, herr
	}
	if welcome.Type == MsgError {
		return false, &RefusedError{welcome.Message}
	}
	if welcome.Type != MsgWelcome {
		return false, &RefusedError{fmt.Sprintf("unexpected %q message instead of welcome", welcome.Type)}
	}
	a.grants.Store(welcome.StandingGrants)
	a.scr.println(fmt.Sprintf("rootgate: attached to rootgated %s at %s as %s on %s; waiting for requests (prompts time out after %ds)",
		welcome.Daemon, a.Socket, a.Operator, a.Name, int(welcome.PromptTimeout)))
	notAsked := ""
	if who := approval.Uninvolved(welcome.NotAsked, lookupUserName); who != "" {
		if welcome.SelfApproval {
			notAsked = "; UNSAFE: asked about " + who + " too, who can control this terminal (--unsafe-self-approval)"
		} else {
			notAsked = "; not asked about " + who + ": they can control this terminal"
		}
		a.scr.println("rootgate: requests from " + who + " are not shown here: that uid can control this terminal or session and could answer for you")
		if welcome.SelfApproval {
			a.scr.println("rootgate: UNSAFE: rootgated runs with --unsafe-self-approval, so they are shown anyway, with a warning banner")
		}
	}

	var mu sync.Mutex // guards queue and byID
	queue := []*prompt{}
	byID := map[string]*prompt{}
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the worker: one prompt at a time, first come first served
		defer wg.Done()
		for {
			mu.Lock()
			var p *prompt
			if len(queue) > 0 {
				p, queue = queue[0], queue[1:]
			}
			left := len(queue)
			mu.Unlock()
			if p == nil {
				select {
				case <-connCtx.Done():
					return
				case <-wake:
					continue
				}
			}
			a.remember(p.msg.ID, a.show(p, send, left))
			mu.Lock()
			delete(byID, p.msg.ID)
			n := len(queue)
			mu.Unlock()
			if n == 0 {
				a.scr.println("rootgate: idle, nothing queued; waiting for requests (last: " + strings.Join(a.last, ", ") + ")" + notAsked)
			}
		}
	}()
	defer func() {
		cancel()
		mu.Lock()
		for _, p := range byID {
			p.cancel(errors.New("connection to rootgated lost"))
		}
		mu.Unlock()
		wg.Wait()
	}()

	for {
		_ = c.SetReadDeadline(time.Now().Add(DaemonSilentFor))
		m, err := readDaemonMessage(br)
		if errors.Is(err, ErrLineTooLong) {
			// One message we cannot take must not cost the session:
			// the others' prompts are still waiting here.
			a.scr.println(fmt.Sprintf("rootgate: skipped a message from rootgated over %d bytes; if it was a prompt, it times out unanswered here", MaxDaemonLine))
			continue
		}
		if err != nil {
			return true, err
		}
		switch m.Type {
		case MsgPing:
			_ = send(&Message{Type: MsgPong})
		case MsgPrompt:
			if m.Request == nil || m.Deadline == nil || RequestHash(m.Request) != m.Hash {
				a.scr.println("rootgate: ignored a malformed prompt")
				continue
			}
			pctx, pcancel := context.WithCancelCause(connCtx)
			p := &prompt{msg: m, ctx: pctx, cancel: pcancel}
			mu.Lock()
			queue = append(queue, p)
			byID[m.ID] = p
			n := len(queue)
			mu.Unlock()
			if n > 1 {
				a.scr.println(fmt.Sprintf("rootgate: %d requests queued", n))
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		case MsgWithdraw:
			mu.Lock()
			if p := byID[m.ID]; p != nil {
				p.cancel(errors.New(m.Reason))
			}
			mu.Unlock()
		case MsgStatus:
			a.scr.setStatus(m)
		case MsgResult:
			a.scr.println(fmt.Sprintf("rootgate: request %s %s", termsafe.Sanitize(m.ID), termsafe.Sanitize(m.Outcome)))
		case MsgError:
			a.scr.println("rootgate: rootgated says: " + termsafe.Sanitize(m.Message))
		default:
			a.scr.println(fmt.Sprintf("rootgate: ignored an unknown %q message", termsafe.Sanitize(m.Type)))
		}
	}
}

// readDaemonMessage reads one message line from the daemon. A line over
// MaxDaemonLine is read to its end and dropped: the error is then
// ErrLineTooLong and the next call reads the next line.
func readDaemonMessage(br *bufio.Reader) (*Message, error) {
	var line []byte
	n := 0
	for {
		chunk, err := br.ReadSlice('\n')
		n += len(chunk)
		if n <= MaxDaemonLine {
			line = append(line, chunk...)
		} else {
			line = nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil && (n == 0 || !errors.Is(err, io.EOF)) {
			return nil, err
		}
		if err != nil {
			return nil, io.ErrUnexpectedEOF
		}
		break
	}
	if n > MaxDaemonLine {
		return nil, ErrLineTooLong
	}
	return ReadMessage(bufio.NewReader(bytes.NewReader(line)), MaxDaemonLine)
}

// remember keeps the outcome of the last few prompts for the idle line.
func (a *Client) remember(id string, v approval.Verdict) {
	word := map[approval.Verdict]string{approval.Allow: "approved", approval.Deny: "denied", approval.Expired: "timed out"}[v]
	if word == "" {
		word = "withdrawn"
	}
	a.last = append(a.last, termsafe.Sanitize(id)+" "+word)
	if len(a.last) > 3 {
		a.last = a.last[1:]
	}
}

// show puts one prompt on the terminal and sends the operator's answer.
// It returns what became of the prompt here.
func (a *Client) show(p *prompt, send func(*Message) error, queued int) approval.Verdict {
	if err := p.ctx.Err(); err != nil {
		a.scr.println(fmt.Sprintf("rootgate: request %s withdrawn before it was shown (%v)", termsafe.Sanitize(p.msg.ID), context.Cause(p.ctx)))
		return approval.Withdrawn
	}
	a.scr.begin()
	defer a.scr.end()
	if queued > 0 {
		fmt.Fprintf(a.scr.out, "rootgate: %d more request(s) queued after this one\n", queued)
	}
	d := a.Ask(*p.msg.Deadline, a.afterWithdrawn).Approve(p.ctx, p.msg.Request)
	a.afterWithdrawn = d.Verdict == approval.Withdrawn
	switch d.Verdict {
	case approval.Allow, approval.Deny:
		ok := d.Verdict == approval.Allow
		m := &Message{Type: MsgDecision, ID: p.msg.ID, Hash: p.msg.Hash, Approve: &ok}
		if !ok {
			m.Note = d.Note
		}
		if ok && d.Grant > 0 {
			// The terminal confirmed a second time for a request that
			// runs anything (approval.RunsAnything).
			m.Grant = max(int64(d.Grant/time.Second), 1)
			m.GrantRunsAnything = len(approval.RunsAnything(p.msg.Request)) > 0
		}
		_ = send(m)
	}
	return d.Verdict
}

// screen serialises our status lines with the prompts: while a prompt is
// up, lines are held and printed after it. With size set, Out is a
// terminal, and between prompts the idle screen (idleLines) is kept
// below the status lines, each of which is printed once: the block is
// erased, the line printed, and the block drawn again under it.
type screen struct {
	mu     sync.Mutex // guards the fields that follow
	busy   bool
	held   []string
	out    io.Writer
	size   func() (w, h int) // nil: plain lines, no idle screen
	status *Message          // the last status, or nil
	drawn  int               // how many lines of the idle screen are on the terminal, ending at the cursor
}

func (s *screen) println(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy {
		s.held = append(s.held, line)
		return
	}
	s.printLocked(line)
}

// printLocked prints line, above the idle screen if there is one.
func (s *screen) printLocked(line string) {
	if s.size == nil {
		fmt.Fprintln(s.out, line)
		return
	}
	var b strings.Builder
	s.eraseTo(&b)
	b.WriteString(line + "\r\n")
	s.drawTo(&b)
	_, _ = io.WriteString(s.out, b.String())
}

// setStatus keeps m as the status the idle screen shows, and draws it.
func (s *screen) setStatus(m *Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status = m
	s.redrawLocked()
}

// redrawAging draws the idle screen again if it shows ages or ends (a
// queue, grants).
func (s *screen) redrawAging() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != nil && (len(s.status.Queue) > 0 || len(s.status.Grants) > 0) {
		s.redrawLocked()
	}
}

// redrawLocked draws the idle screen again in place, unless a prompt is
// up.
func (s *screen) redrawLocked() {
	if s.busy || s.size == nil {
		return
	}
	var b strings.Builder
	s.eraseTo(&b)
	s.drawTo(&b)
	_, _ = io.WriteString(s.out, b.String())
}

// resized draws the idle screen for the window's new size. The terminal
// may have wrapped the lines drawn before anew, so they cannot be counted
// back over: the window is cleared and the screen drawn at its top.
func (s *screen) resized() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy || s.size == nil {
		return
	}
	var b strings.Builder
	b.WriteString("\x1b[H\x1b[2J")
	s.drawn = 0
	s.drawTo(&b)
	_, _ = io.WriteString(s.out, b.String())
}

// eraseTo writes to b what erases the idle screen, which ends at the
// cursor.
func (s *screen) eraseTo(b *strings.Builder) {
	if s.drawn > 0 {
		fmt.Fprintf(b, "\x1b[%dA", s.drawn)
	}
	b.WriteString("\r\x1b[J")
	s.drawn = 0
}

// drawTo writes the idle screen to b, below the cursor.
func (s *screen) drawTo(b *strings.Builder) {
	w, h := s.size()
	if w <= 0 || h <= 0 {
		w, h = 80, 24
	}
	lines := idleLines(s.status, time.Now(), w, h)
	for _, l := range lines {
		b.WriteString(l + "\r\n")
	}
	s.drawn = len(lines)
}

// finish takes the idle screen off the terminal for good and prints
// line, if any, in its place.
func (s *screen) finish(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.size == nil {
		if line != "" {
			fmt.Fprintln(s.out, line)
		}
		return
	}
	var b strings.Builder
	s.eraseTo(&b)
	if line != "" {
		b.WriteString(line + "\r\n")
	}
	_, _ = io.WriteString(s.out, b.String())
	s.size = nil
}

func (s *screen) begin() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = true
	if s.size != nil {
		// The prompt is drawn where the idle screen was.
		var b strings.Builder
		s.eraseTo(&b)
		_, _ = io.WriteString(s.out, b.String())
	}
}

func (s *screen) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = false
	held := s.held
	s.held = nil
	if s.size == nil {
		for _, l := range held {
			fmt.Fprintln(s.out, l)
		}
		return
	}
	var b strings.Builder
	for _, l := range held {
		b.WriteString(l + "\r\n")
	}
	s.drawTo(&b)
	_, _ = io.WriteString(s.out, b.String())
}

// lookupUserName names uid, or "" when it has no passwd entry.
func lookupUserName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return ""
}
