package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/version"
)

// Reconnection backoff bounds.
const (
	backoffMin = 250 * time.Millisecond
	backoffMax = 5 * time.Second
)

// errRefused is a daemon's refusal to attach us: retrying cannot help.
type errRefused struct{ msg string }

func (e errRefused) Error() string { return e.msg }

// approveAbout is rootgate approve's help.
const approveAbout = `Attach this terminal to rootgated as an approver: each request is shown
here in full; y approves, n, Esc or Enter deny. Ctrl-C (between prompts) detaches.
With --desktop, each request is a desktop notification instead: Approve
approves; Deny, or closing it, denies. It is weaker than the terminal: any
program of yours on the desktop can press Approve (docs/security.md).`

// approveFlags are rootgate approve's flags.
var approveFlags = []clidoc.Flag{
	{Name: "socket", Default: "", Usage: "approver socket `path`"},
	{Name: "forward-agent", Default: false, Usage: "offer this session's SSH agent ($SSH_AUTH_SOCK) to forward_agent runs you approve"},
	{Name: "accessible", Default: false, Usage: "ask in plain lines for screen readers: type y and Enter to approve; anything else denies"},
	{Name: "desktop", Default: false, Usage: "ask with desktop notifications (Approve / Deny buttons) instead of this terminal; under sudo, on the sudo user's desktop"},
}

func cmdApprove(ctx context.Context, e *env, fl clidoc.Values, _ []string) int {
	stderr := e.stderr
	socket, agent, accessible, desktop := fl.String("socket"), fl.Bool("forward-agent"), fl.Bool("accessible"), fl.Bool("desktop")
	if desktop && accessible {
		errorf(stderr, "--accessible and --desktop cannot be combined")
		return exitUsage
	}
	sock := client.ApproverSocket(socket)
	var agentSock string
	if agent {
		agentSock = os.Getenv("SSH_AUTH_SOCK")
		fi, err := os.Stat(agentSock)
		switch {
		case agentSock == "":
			errorWithHint(stderr, "--forward-agent: SSH_AUTH_SOCK is not set", "sudo drops it; run: sudo --preserve-env=SSH_AUTH_SOCK rootgate approve --forward-agent")
			return exitUsage
		case err != nil || fi.Mode().Type() != os.ModeSocket || !filepath.IsAbs(agentSock):
			errorf(stderr, "--forward-agent: SSH_AUTH_SOCK %q is not an agent socket", agentSock)
			return exitUsage
		}
	}
	if desktop {
		// No terminal needed: status lines go to stderr, prompts to the
		// desktop.
		a := &approver{sock: sock, name: desktopName, kind: "desktop", operator: approval.OperatorName(), scr: &screen{out: stderr}, agent: agentSock}
		ask, err := desktopAsker(a.operator, stderr)
		if err != nil {
			errorf(stderr, "--desktop: %v", err)
			return exitError
		}
		a.ask = func(deadline time.Time) approval.Approver { return reporting{ask(deadline), stderr} }
		return a.run(ctx, stderr)
	}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		errorf(stderr, "approve needs a terminal: %v", err)
		return exitError
	}
	defer tty.Close()
	a := &approver{sock: sock, name: approval.TerminalName(), kind: "terminal", operator: approval.OperatorName(), scr: &screen{out: tty}, agent: agentSock}
	a.ask = func(deadline time.Time) approval.Approver {
		return &approval.Terminal{In: tty, Out: tty, Timeout: time.Until(deadline), Name: a.name, Operator: a.operator,
			Accessible: accessible, AfterWithdrawn: a.afterWithdrawn}
	}
	return a.run(ctx, stderr)
}

// approver is the state of one `rootgate approve`.
type approver struct {
	sock     string
	name     string // e.g. "pts/3", or "desktop"
	kind     string // how it asks, the hello's first capability: "terminal" or "desktop"
	operator string // who sits here
	scr      *screen
	agent    string // the SSH agent socket offered, or ""
	// ask makes what asks the operator about one prompt, which must be
	// decided by deadline.
	ask  func(deadline time.Time) approval.Approver
	last []string // the last few outcomes here, e.g. "ap-y approved"; the worker's
	// afterWithdrawn: the last prompt shown here was withdrawn while on
	// screen, so the next one says it is a different request; the worker's.
	afterWithdrawn bool
}

// run attaches, and re-attaches quietly after the daemon goes away, until
// ctx ends (Ctrl-C) or the daemon refuses us.
func (a *approver) run(ctx context.Context, stderr io.Writer) int {
	backoff := backoffMin
	waiting := false
	for ctx.Err() == nil {
		c, err := net.Dial("unix", a.sock)
		if err != nil {
			if errors.Is(err, os.ErrPermission) {
				errorWithHint(stderr, fmt.Sprintf("cannot attach to %s: %v", a.sock, err), "approvers must be root (sudo rootgate approve) or admitted with rootgated --approver")
				return exitError
			}
			if !waiting {
				a.scr.println(fmt.Sprintf("rootgate: waiting for rootgated at %s (%v); retrying quietly", a.sock, err))
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
		var refused errRefused
		if errors.As(err, &refused) {
			errorf(stderr, "rootgated refused this approver: %s", refused.msg)
			return exitError
		}
		if ctx.Err() == nil {
			a.scr.println("rootgate: connection to rootgated lost; reconnecting")
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
		}
	}
	a.scr.println("rootgate: detached")
	return exitOK
}

// prompt is a request waiting to be shown.
type prompt struct {
	msg    *approval.Message
	ctx    context.Context
	cancel context.CancelCauseFunc
}

// session runs one connection: hello, welcome, then prompts until the
// connection ends. attached says whether the daemon accepted us.
func (a *approver) session(ctx context.Context, c *net.UnixConn) (attached bool, err error) {
	defer c.Close()
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(connCtx, func() { c.Close() })
	defer stop()

	var wmu sync.Mutex
	send := func(m *approval.Message) error {
		wmu.Lock()
		defer wmu.Unlock()
		_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		return approval.WriteMessage(c, m)
	}
	caps := []string{a.kind}
	if a.agent != "" {
		caps = append(caps, "forward-agent")
	}
	if err := send(&approval.Message{Type: approval.MsgHello, Version: approval.ProtoVersion, Client: version.String(),
		Name: a.name, Capabilities: caps, AgentSocket: a.agent}); err != nil {
		return false, err
	}
	br := bufio.NewReaderSize(c, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	welcome, err := approval.ReadMessage(br, approval.MaxDaemonLine)
	if err != nil {
		return false, err
	}
	if welcome.Type == approval.MsgError {
		return false, errRefused{welcome.Message}
	}
	if welcome.Type != approval.MsgWelcome {
		return false, errRefused{fmt.Sprintf("unexpected %q message instead of welcome", welcome.Type)}
	}
	a.scr.println(fmt.Sprintf("rootgate: attached to rootgated %s at %s as %s on %s; waiting for requests (prompts time out after %ds)",
		welcome.Daemon, a.sock, a.operator, a.name, int(welcome.PromptTimeout)))
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
		_ = c.SetReadDeadline(time.Now().Add(60 * time.Second))
		m, err := readDaemonMessage(br)
		if errors.Is(err, approval.ErrLineTooLong) {
			// One message we cannot take must not cost the session:
			// the others' prompts are still waiting here.
			a.scr.println(fmt.Sprintf("rootgate: skipped a message from rootgated over %d bytes; if it was a prompt, it times out unanswered here", approval.MaxDaemonLine))
			continue
		}
		if err != nil {
			return true, err
		}
		switch m.Type {
		case approval.MsgPing:
			_ = send(&approval.Message{Type: approval.MsgPong})
		case approval.MsgPrompt:
			if m.Request == nil || m.Deadline == nil || approval.RequestHash(m.Request) != m.Hash {
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
		case approval.MsgWithdraw:
			mu.Lock()
			if p := byID[m.ID]; p != nil {
				p.cancel(errors.New(m.Reason))
			}
			mu.Unlock()
		case approval.MsgResult:
			a.scr.println(fmt.Sprintf("rootgate: request %s %s", approval.Sanitize(m.ID), approval.Sanitize(m.Outcome)))
		case approval.MsgError:
			a.scr.println("rootgate: rootgated says: " + approval.Sanitize(m.Message))
		default:
			a.scr.println(fmt.Sprintf("rootgate: ignored an unknown %q message", approval.Sanitize(m.Type)))
		}
	}
}

// readDaemonMessage reads one message line from the daemon. A line over
// approval.MaxDaemonLine is read to its end and dropped: the error is then
// approval.ErrLineTooLong and the next call reads the next line.
func readDaemonMessage(br *bufio.Reader) (*approval.Message, error) {
	var line []byte
	n := 0
	for {
		chunk, err := br.ReadSlice('\n')
		n += len(chunk)
		if n <= approval.MaxDaemonLine {
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
	if n > approval.MaxDaemonLine {
		return nil, approval.ErrLineTooLong
	}
	return approval.ReadMessage(bufio.NewReader(bytes.NewReader(line)), approval.MaxDaemonLine)
}

// remember keeps the outcome of the last few prompts for the idle line.
func (a *approver) remember(id string, v approval.Verdict) {
	word := map[approval.Verdict]string{approval.Allow: "approved", approval.Deny: "denied", approval.Expired: "timed out"}[v]
	if word == "" {
		word = "withdrawn"
	}
	a.last = append(a.last, approval.Sanitize(id)+" "+word)
	if len(a.last) > 3 {
		a.last = a.last[1:]
	}
}

// show puts one prompt on the terminal and sends the operator's answer.
// It returns what became of the prompt here.
func (a *approver) show(p *prompt, send func(*approval.Message) error, queued int) approval.Verdict {
	if err := p.ctx.Err(); err != nil {
		a.scr.println(fmt.Sprintf("rootgate: request %s withdrawn before it was shown (%v)", approval.Sanitize(p.msg.ID), context.Cause(p.ctx)))
		return approval.Withdrawn
	}
	a.scr.begin()
	defer a.scr.end()
	if queued > 0 {
		fmt.Fprintf(a.scr.out, "rootgate: %d more request(s) queued after this one\n", queued)
	}
	d := a.ask(*p.msg.Deadline).Approve(p.ctx, p.msg.Request)
	a.afterWithdrawn = d.Verdict == approval.Withdrawn
	switch d.Verdict {
	case approval.Allow, approval.Deny:
		ok := d.Verdict == approval.Allow
		_ = send(&approval.Message{Type: approval.MsgDecision, ID: p.msg.ID, Hash: p.msg.Hash, Approve: &ok})
	}
	return d.Verdict
}

// screen serialises our status lines with the prompts: while a prompt is
// up, lines are held and printed after it.
type screen struct {
	mu   sync.Mutex
	busy bool
	held []string
	out  io.Writer
}

func (s *screen) println(line string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy {
		s.held = append(s.held, line)
		return
	}
	fmt.Fprintln(s.out, line)
}

func (s *screen) begin() {
	s.mu.Lock()
	s.busy = true
	s.mu.Unlock()
}

func (s *screen) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = false
	for _, l := range s.held {
		fmt.Fprintln(s.out, l)
	}
	s.held = nil
}

// lookupUserName names uid, or "" when it has no passwd entry.
func lookupUserName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return ""
}
