package approver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/termsafe"
)

// Bounds of how long the client waits on a silent daemon, whatever
// ping interval its welcome gives.
const (
	minDaemonSilentFor = 500 * time.Millisecond
	maxDaemonSilentFor = 10 * time.Minute
)

// Reconnection backoff bounds.
const (
	backoffMin = 250 * time.Millisecond
	backoffMax = 5 * time.Second
)

// Client is the approver client's end of the protocol (rootgate approve):
// it attaches to one or more rootgated approver sockets, each re-attaching
// by itself after its daemon goes away or falls silent, puts each prompt
// from any of them to the operator through Ask, one at a time and first
// come first served across daemons, and sends the answer back to the
// daemon that asked. Set the fields before calling Run, once.
type Client struct {
	// Sockets are the approver sockets, one per daemon (local, or the
	// local end of an ssh -L forward); empty means Socket alone.
	Sockets  []string
	Socket   string // the approver socket when Sockets is empty
	Name     string // where it asks, e.g. "pts/3", or "desktop"
	Kind     string // how it asks, the hello's first capability: "terminal" or "desktop"
	Operator string // who sits here
	Agent    string // the SSH agent socket offered, or ""
	Version  string // the client's version, told in the hello
	// Out receives status lines; they are held while a prompt is up.
	Out io.Writer
	// AnswerWithin bounds each attempt to attach: the connect and the
	// daemon's welcome; zero means [remote.HelloWithin].
	AnswerWithin time.Duration
	// Ask makes what asks the operator about one prompt from daemon from,
	// which must be decided by deadline. afterWithdrawn says the prompt
	// shown before was withdrawn while on screen, so this one must say it
	// is a different request.
	Ask func(deadline time.Time, afterWithdrawn bool, from Daemon) approval.Approver
	// Size, when set, is Out's window size: Out is a terminal, and while
	// no prompt is up the client keeps the idle screen on it (the
	// requests waiting, standing grants, last decisions of each daemon;
	// see idleScreen), drawn again when the window is resized. The
	// daemons are asked for status messages only then.
	Size func() (width, height int)
	// Conn, when set, is the one connection Run attaches over, made and
	// handed over by rootgated itself for the approver it runs on its own
	// terminal (--tty): Socket only names it in status lines, nothing is
	// dialled, and Run returns nil once it ends, as the daemon has then
	// stopped.
	Conn *net.UnixConn
	// Log, when set, carries lines that are printed as status lines, each
	// escaped for a terminal: the log of the rootgated --tty that runs
	// this client on its terminal, which must not write there itself
	// while the client draws. It is read until it ends, in a goroutine of
	// its own that Run does not wait for.
	Log io.Reader

	scr  *screen
	last []string // the last few outcomes here, e.g. "ap-y approved"; the worker's
	// afterWithdrawn: the last prompt shown here was withdrawn while on
	// screen, so the next one says it is a different request; the worker's.
	afterWithdrawn bool

	mu       sync.Mutex        // guards the fields that follow
	queue    []*prompt         // prompts of every daemon, in arrival order
	notAsked map[string]string // by socket: whom that daemon never asks here, for the idle line
	wake     chan struct{}
}

// Daemon is what an approver client knows of one daemon it is attached
// to, for a prompt from it.
type Daemon struct {
	// Socket is the approver socket it was reached through: the
	// operator's own word.
	Socket string
	// Host is the daemon's own host name as its welcome told it, not yet
	// escaped for a terminal; "" from a daemon that does not tell.
	Host string
	// Grants says the daemon keeps standing grants: a prompt may offer
	// one (an older daemon refuses a decision that carries one).
	Grants bool
	// RuleFile is the policy drop-in the daemon saves a rule from the
	// prompt to (its welcome's rule_file), or "" when it saves none: a
	// prompt then offers none.
	RuleFile string
}

func (a *Client) answerWithin() time.Duration {
	if a.AnswerWithin > 0 {
		return a.AnswerWithin
	}
	return remote.HelloWithin
}

// Label names the daemon in status lines: its host name and socket,
// escaped for a terminal.
func (d Daemon) Label() string {
	if d.Host == "" {
		return termsafe.Sanitize(d.Socket)
	}
	return termsafe.Sanitize(d.Host) + " at " + termsafe.Sanitize(d.Socket)
}

// Run attaches to every socket, each re-attaching quietly after its
// daemon goes away, until ctx ends (Ctrl-C; then it returns nil) or every
// daemon has refused the client (a [*remote.RefusedError]) or its socket has
// ([os.ErrPermission]); it then returns the error of the first socket
// listed. A daemon
// that refuses is told on screen while the others keep working.
func (a *Client) Run(ctx context.Context) error {
	a.wake = make(chan struct{}, 1)
	socks := a.Sockets
	if len(socks) == 0 {
		socks = []string{a.Socket}
	}
	a.scr = newScreen(a.Out, a.Size, socks)
	if a.Log != nil {
		// The log goes on until the daemon closes it, maybe after the
		// last connection ended: the screen closes when both are done.
		go func() { a.printLog(a.Log); a.scr.close() }()
	} else {
		defer a.scr.close()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var worker sync.WaitGroup
	worker.Add(1)
	go func() { defer worker.Done(); a.work(ctx) }()

	errs := make([]error, len(socks))
	var wg sync.WaitGroup
	for i, sock := range socks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.attach(ctx, sock, len(socks) > 1)
			if errs[i] != nil {
				a.mu.Lock()
				delete(a.notAsked, sock) // the idle line speaks of attached daemons
				a.mu.Unlock()
				a.scr.drop(sock)
			}
		}()
	}
	wg.Wait()
	interrupted := ctx.Err() != nil
	cancel()
	worker.Wait()
	if !interrupted { // every daemon refused
		for _, e := range errs {
			if e != nil {
				a.scr.finish("")
				return e
			}
		}
	}
	a.scr.finish("rootgate: detached")
	return nil
}

// attach keeps one daemon attached until ctx ends (nil) or the daemon or
// its socket refuses the client (that error). many says other daemons
// carry on meanwhile, so a refusal is told here too.
func (a *Client) attach(ctx context.Context, sock string, many bool) error {
	if a.Conn != nil {
		_, _, err := a.session(ctx, a.Conn, sock, many)
		if refused := (*remote.RefusedError)(nil); errors.As(err, &refused) {
			return refused
		}
		return nil
	}
	backoff := backoffMin
	// said is the kind of failure last reported ("dial" or "welcome"):
	// each kind is said once until an attach succeeds, and again when the
	// failure changes kind.
	said := ""
	last := Daemon{Socket: sock} // what the last welcome told
	for ctx.Err() == nil {
		// A connect blocks while the socket's queue is full; each
		// attempt, and the welcome after it, has a bound.
		c, err := net.DialTimeout("unix", sock, a.answerWithin())
		if err != nil {
			if errors.Is(err, os.ErrPermission) {
				err = fmt.Errorf("cannot attach to %s: %w", sock, err)
				if many {
					a.scr.println("rootgate: " + err.Error() + "; the other daemons stay attached")
				}
				return err
			}
			if said != "dial" {
				a.scr.println(fmt.Sprintf("rootgate: waiting for rootgated at %s (%v); retrying quietly, at least every %s", sock, err, backoffMax))
				said = "dial"
			}
			sleep(ctx, backoff)
			backoff = min(2*backoff, backoffMax)
			continue
		}
		d, attached, err := a.session(ctx, c.(*net.UnixConn), sock, many)
		if refused := (*remote.RefusedError)(nil); errors.As(err, &refused) {
			if many {
				a.scr.println(fmt.Sprintf("rootgate: %s: %v; the other daemons stay attached", sock, refused))
			}
			return refused
		}
		if ctx.Err() != nil {
			break
		}
		if attached {
			last = d
			said = ""
			backoff = backoffMin
			// Stopped, restarted or crashed. Re-attaching starts it again
			// under systemd while its sockets listen.
			a.scr.println(fmt.Sprintf("rootgate: connection to rootgated lost (%s: %v); re-attaching by itself, retrying at least every %s, which under systemd starts it again: to stop rootgate, stop its sockets too: systemctl stop rootgate.socket rootgate-approve.socket rootgate.service", last.Label(), err, backoffMax))
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			// Said at each attempt: that each is bounded, and that it
			// keeps trying, is what the operator watches for.
			a.scr.println(fmt.Sprintf("rootgate: rootgated at %s did not answer within %s (is the service failed? systemctl status rootgate; journalctl -u rootgate -p err); retrying", sock, a.answerWithin()))
		} else if said != "welcome" {
			a.scr.println(fmt.Sprintf("rootgate: no welcome from rootgated (%s: %v); retrying quietly, at least every %s", last.Label(), err, backoffMax))
			said = "welcome"
		}
		sleep(ctx, backoff)
		if !attached {
			backoff = min(2*backoff, backoffMax)
		}
	}
	return nil
}

// maxLogLine bounds a line of [Client].Log; the rest of a longer one is
// cut off.
const maxLogLine = 16 << 10

// printLog prints each line of r as a status line until r ends.
func (a *Client) printLog(r io.Reader) {
	br := bufio.NewReaderSize(r, maxLogLine)
	for {
		line, err := br.ReadSlice('\n')
		cut := errors.Is(err, bufio.ErrBufferFull)
		if len(line) > 0 {
			a.scr.println(termsafe.Sanitize(strings.TrimRight(string(line), "\r\n")))
		}
		for cut { // the rest of a line too long
			_, err = br.ReadSlice('\n')
			cut = errors.Is(err, bufio.ErrBufferFull)
		}
		if err != nil {
			return
		}
	}
}

// sleep waits for d or the end of ctx.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// prompt is a request waiting to be shown.
type prompt struct {
	msg    *remote.Message
	from   Daemon
	send   func(*remote.Message) error // to the daemon that asked, on its connection
	ctx    context.Context
	cancel context.CancelCauseFunc
	shown  chan struct{} // closed when the worker is done with it
}

// work shows the queued prompts, one at a time, first come first served
// across daemons, until ctx ends.
func (a *Client) work(ctx context.Context) {
	for {
		a.mu.Lock()
		var p *prompt
		if len(a.queue) > 0 {
			p, a.queue = a.queue[0], a.queue[1:]
		}
		left := len(a.queue)
		a.mu.Unlock()
		if p == nil {
			select {
			case <-ctx.Done():
				return
			case <-a.wake:
				continue
			}
		}
		a.remember(p.msg.ID, a.show(p, left))
		close(p.shown)
		a.mu.Lock()
		n := len(a.queue)
		var notAsked []string
		for _, sock := range slices.Sorted(maps.Keys(a.notAsked)) {
			notAsked = append(notAsked, a.notAsked[sock])
		}
		a.mu.Unlock()
		if n == 0 {
			a.scr.println("rootgate: idle, nothing queued; waiting for requests (last: " + strings.Join(a.last, ", ") + ")" + strings.Join(notAsked, ""))
		}
	}
}

// enqueue puts p in the queue shared by every daemon.
func (a *Client) enqueue(p *prompt) {
	a.mu.Lock()
	a.queue = append(a.queue, p)
	n := len(a.queue)
	a.mu.Unlock()
	if n > 1 {
		a.scr.println(fmt.Sprintf("rootgate: %d requests queued", n))
	}
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// session runs one connection to sock: hello, welcome, then prompts until
// the connection ends. attached says whether the daemon accepted us; d is
// what its welcome told.
func (a *Client) session(ctx context.Context, c *net.UnixConn, sock string, many bool) (d Daemon, attached bool, err error) {
	d.Socket = sock
	defer c.Close()
	// What a lost daemon said no longer holds.
	a.scr.setConnected(sock, true)
	defer func() {
		a.scr.setStatus(Daemon{Socket: sock, Host: d.Host}, nil)
		a.scr.setConnected(sock, false)
	}()
	connCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(connCtx, func() { c.Close() })
	defer stop()

	var wmu sync.Mutex
	send := func(m *remote.Message) error {
		wmu.Lock()
		defer wmu.Unlock()
		_ = c.SetWriteDeadline(time.Now().Add(remote.WriteWithin))
		return remote.WriteMessage(c, m)
	}
	caps := []string{a.Kind, remote.CapGroup}
	if a.Agent != "" {
		caps = append(caps, "forward-agent")
	}
	if a.Size != nil {
		caps = append(caps, remote.CapStatus)
	}
	// A daemon that refuses this approver (not admitted, too many) may
	// say so and close before the hello is written: its words are read
	// all the same, so the refusal is reported rather than retried.
	herr := send(&remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Client: a.Version,
		Name: a.Name, Capabilities: caps, AgentSocket: a.Agent})
	br := bufio.NewReaderSize(c, 64<<10)
	_ = c.SetReadDeadline(time.Now().Add(a.answerWithin()))
	welcome, err := remote.ReadMessage(br, remote.MaxDaemonLine)
	if err != nil {
		if herr != nil {
			return d, false, herr
		}
		return d, false, err
	}
	if herr != nil && welcome.Type != remote.MsgError {
		return d, false, herr
	}
	if welcome.Type == remote.MsgError {
		return d, false, &remote.RefusedError{Message: welcome.Message}
	}
	if welcome.Type != remote.MsgWelcome {
		return d, false, &remote.RefusedError{Message: fmt.Sprintf("unexpected %q message instead of welcome", welcome.Type)}
	}
	d.Grants = welcome.StandingGrants
	d.RuleFile = welcome.RuleFile
	d.Host = welcome.Hostname
	silentFor := remote.DefaultDaemonSilentFor
	if welcome.PingEvery > 0 {
		// Bounded both ways: a daemon saying nonsense must neither make
		// the client drop it at once, over and over, nor overflow.
		secs := min(max(remote.DaemonSilentPings*welcome.PingEvery, minDaemonSilentFor.Seconds()), maxDaemonSilentFor.Seconds())
		silentFor = time.Duration(secs * float64(time.Second))
	}
	on := ""
	if d.Host != "" {
		on = " on host " + termsafe.Sanitize(d.Host)
	}
	a.scr.println(fmt.Sprintf("rootgate: attached to rootgated %s%s at %s as %s on %s; waiting for requests (prompts time out after %ds)",
		termsafe.Sanitize(welcome.Daemon), on, sock, a.Operator, a.Name, int(welcome.PromptTimeout)))
	notAsked := ""
	if who := approval.Uninvolved(welcome.NotAsked, lookupUserName); who != "" {
		notAsked = "; "
		if many {
			notAsked += "from " + d.Label() + ", "
		}
		if welcome.SelfApproval {
			notAsked += "UNSAFE: asked about " + who + " too, who can control this terminal (--unsafe-self-approval)"
		} else {
			notAsked += "not asked about " + who + ": they can control this terminal"
		}
		a.scr.println("rootgate: requests from " + who + " are not shown here: that uid can control this terminal or session and could answer for you")
		if welcome.SelfApproval {
			a.scr.println("rootgate: UNSAFE: rootgated runs with --unsafe-self-approval, so they are shown anyway, with a warning banner")
		}
	}

	a.mu.Lock()
	if a.notAsked == nil {
		a.notAsked = map[string]string{}
	}
	a.notAsked[sock] = notAsked
	a.mu.Unlock()

	// byID holds this connection's prompts not yet shown to the end: a
	// withdraw names a prompt of this daemon only (ids are the
	// requesters' words, and two daemons' may be the same).
	var mu sync.Mutex
	byID := map[string]*prompt{}
	// The prompts still queued or on screen end with the connection; the
	// worker drops each when it comes to it, and the reconnection does not
	// wait for that (a prompt of another daemon may hold the screen).
	defer func() {
		cancel()
		mu.Lock()
		for _, p := range byID {
			p.cancel(errors.New("connection to rootgated lost"))
		}
		mu.Unlock()
	}()

	for {
		_ = c.SetReadDeadline(time.Now().Add(silentFor))
		m, err := readDaemonMessage(br)
		if errors.Is(err, remote.ErrLineTooLong) {
			// One message we cannot take must not cost the session:
			// the others' prompts are still waiting here.
			a.scr.println(fmt.Sprintf("rootgate: skipped a message from rootgated over %d bytes; if it was a prompt, it times out unanswered here", remote.MaxDaemonLine))
			continue
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				err = fmt.Errorf("silent for %s", silentFor)
			}
			return d, true, err
		}
		switch m.Type {
		case remote.MsgPing:
			_ = send(&remote.Message{Type: remote.MsgPong})
		case remote.MsgPrompt:
			if m.Request == nil || m.Deadline == nil || remote.RequestHash(m.Request) != m.Hash {
				a.scr.println("rootgate: ignored a malformed prompt")
				continue
			}
			pctx, pcancel := context.WithCancelCause(connCtx)
			p := &prompt{msg: m, from: d, send: send, ctx: pctx, cancel: pcancel, shown: make(chan struct{})}
			mu.Lock()
			byID[m.ID] = p
			mu.Unlock()
			go func() {
				select {
				case <-p.shown:
				case <-connCtx.Done():
					return
				}
				mu.Lock()
				if byID[m.ID] == p {
					delete(byID, m.ID)
				}
				mu.Unlock()
			}()
			a.enqueue(p)
		case remote.MsgWithdraw:
			mu.Lock()
			if p := byID[m.ID]; p != nil {
				p.cancel(errors.New(m.Reason))
			}
			mu.Unlock()
		case remote.MsgStatus:
			a.scr.setStatus(d, m)
		case remote.MsgResult:
			a.scr.println(fmt.Sprintf("rootgate: request %s %s", termsafe.Sanitize(m.ID), termsafe.Sanitize(m.Outcome)))
		case remote.MsgError:
			a.scr.println("rootgate: rootgated says: " + termsafe.Sanitize(m.Message))
		default:
			a.scr.println(fmt.Sprintf("rootgate: ignored an unknown %q message", termsafe.Sanitize(m.Type)))
		}
	}
}

// readDaemonMessage reads one message line from the daemon. A line over
// remote.MaxDaemonLine is read to its end and dropped: the error is then
// remote.ErrLineTooLong and the next call reads the next line.
func readDaemonMessage(br *bufio.Reader) (*remote.Message, error) {
	var line []byte
	n := 0
	for {
		chunk, err := br.ReadSlice('\n')
		n += len(chunk)
		if n <= remote.MaxDaemonLine {
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
	if n > remote.MaxDaemonLine {
		return nil, remote.ErrLineTooLong
	}
	return remote.ReadMessage(bufio.NewReader(bytes.NewReader(line)), remote.MaxDaemonLine)
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
func (a *Client) show(p *prompt, queued int) approval.Verdict {
	if err := p.ctx.Err(); err != nil {
		a.scr.println(fmt.Sprintf("rootgate: request %s withdrawn before it was shown (%v)", termsafe.Sanitize(p.msg.ID), context.Cause(p.ctx)))
		return approval.Withdrawn
	}
	a.scr.begin()
	defer a.scr.end()
	if queued > 0 {
		fmt.Fprintf(a.Out, "rootgate: %d more request(s) queued after this one\n", queued)
	}
	d := a.Ask(*p.msg.Deadline, a.afterWithdrawn, p.from).Approve(p.ctx, p.msg.Request)
	a.afterWithdrawn = d.Verdict == approval.Withdrawn
	switch d.Verdict {
	case approval.Allow, approval.Deny:
		ok := d.Verdict == approval.Allow
		m := &remote.Message{Type: remote.MsgDecision, ID: p.msg.ID, Hash: p.msg.Hash, Approve: &ok}
		if !ok {
			m.Note = d.Note
		}
		if ok && d.Grant > 0 {
			// The terminal confirmed a second time for a request that
			// runs anything (approval.RunsAnything).
			m.Grant = max(int64(d.Grant/time.Second), 1)
			m.GrantRunsAnything = len(approval.RunsAnything(p.msg.Request)) > 0
		}
		if ok && d.Rule != "" {
			// The terminal confirmed a second time for a rule for a
			// request that runs anything (approval.RuleRunsAnything).
			m.Rule = d.Rule
			if r, err := approval.CheckRule(p.msg.Request, d.Rule); err == nil {
				m.RuleRunsAnything = len(approval.RuleRunsAnything(p.msg.Request, r)) > 0
			}
		}
		_ = p.send(m)
	}
	return d.Verdict
}

// lookupUserName names uid, or "" when it has no passwd entry.
func lookupUserName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return ""
}
