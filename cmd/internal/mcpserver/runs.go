package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/wire"
)

// A call is one execute request, from the moment it is sent until its
// answer is read. It belongs to the MCP session that made it, not to the
// tool call: it ends only when rootgated answers, when the cancel tool
// cancels it, when the client cancels the execute call before it returned
// the call's id, or when the session ends (the client closed its stdin or
// went away). rootgated's own time limits (the prompt's, the run's) end it
// too, with an answer.
//
// Finished calls keep their answer, output included, so the output tool
// can read it; a session keeps the last keepCalls finished calls and at
// most keepBytes of their output (the newest is always kept).

// DefaultWait is Config.Wait when it is zero: how long execute and wait
// hold a tool call before they answer with the call still pending. Well
// under the 60 s after which common clients give up on a tool call.
const DefaultWait = 25 * time.Second

// MaxWait is the longest wait a wait call may ask for.
const MaxWait = 50 * time.Second

// The bounds of a session's store of finished calls.
const (
	keepCalls = 32
	keepBytes = 256 << 20
)

// StatusPending is a result's status while its call waits for a decision
// or runs.
const StatusPending = "pending"

// Phases of a pending call, as Result.Phase gives them.
const (
	PhaseSent     = "sent"                // rootgated has not said more yet
	PhaseApproval = wire.ProgressApproval // a person is asked
	PhaseRunning  = wire.ProgressRunning  // approved; the run started
)

var (
	errCancelled    = errors.New("cancelled with the cancel tool")
	errCallCanceled = errors.New("the execute call was cancelled before it returned the id")
	errSessionEnded = errors.New("the MCP session ended")
)

// call is one request in flight or finished.
type call struct {
	id, host, socket string
	pipeline         [][]string
	env              map[string]string // as sent, for the hint of an env refusal
	sent             time.Time
	cancel           context.CancelCauseFunc
	done             chan struct{} // closed once resp or err is set

	mu      sync.Mutex
	phase   string
	changed chan struct{} // closed and replaced when phase changes

	resp *wire.Response // the answer, after done
	err  error          // or why there is none
	size int            // bytes of output resp holds
}

func (c *call) setPhase(p string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.phase == p {
		return
	}
	c.phase = p
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *call) state() (phase string, changed <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.phase, c.changed
}

func (c *call) finished() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// MaxOutput is how many bytes of a call's stdout the server keeps, and
// how many of all its stages' stderr together: the output the output tool
// can read. What passes it is read from rootgated, counted and thrown
// away, and the stream is marked cut (daemon_truncated). A rootgated that
// does not stream output cuts it itself, at wire.MaxCapture.
const MaxOutput = 64 << 20

// keeper keeps a streamed call's output, within MaxOutput of stdout and
// MaxOutput of all the stages' stderr together, in memory.
type keeper struct {
	stdout  []byte
	stderr  [wire.MaxStages + 1][]byte // by stage, from 1
	errLeft int                        // what the stderr may still take, once set
	errSet  bool
	outCut  bool
	errCut  [wire.MaxStages + 1]bool // by stage, from 1
}

// frame keeps f, as far as the bounds let it.
func (k *keeper) frame(f wire.Frame) error {
	if !k.errSet {
		k.errLeft, k.errSet = MaxOutput, true
	}
	if f.Stage == 0 {
		n := min(len(f.Data), MaxOutput-len(k.stdout))
		k.stdout = appendKept(k.stdout, f.Data[:n])
		k.outCut = k.outCut || n < len(f.Data)
		return nil
	}
	n := min(len(f.Data), k.errLeft)
	k.stderr[f.Stage] = appendKept(k.stderr[f.Stage], f.Data[:n])
	k.errLeft -= n
	k.errCut[f.Stage] = k.errCut[f.Stage] || n < len(f.Data)
	return nil
}

// appendKept appends p to b, growing b no further than MaxOutput, so
// that a stream kept whole holds no more memory than its bound.
func appendKept(b, p []byte) []byte {
	if len(b)+len(p) > cap(b) {
		grown := make([]byte, len(b), min(max(2*cap(b), len(b)+len(p)), MaxOutput))
		copy(grown, b)
		b = grown
	}
	return append(b, p...)
}

// fill puts what k kept into resp, a streamed run's answer, which holds
// no output of its own (an older rootgated's holds it, and k nothing).
func (k *keeper) fill(resp *wire.Response) {
	if resp == nil || !k.errSet {
		return
	}
	resp.Stdout = k.stdout
	resp.StdoutTruncated = resp.StdoutTruncated || k.outCut
	for i := range resp.Stages {
		if i+1 < len(k.stderr) {
			st := &resp.Stages[i]
			st.Stderr = k.stderr[i+1]
			st.StderrTruncated = st.StderrTruncated || k.errCut[i+1]
		}
	}
}

// outputBytes is how much captured output resp holds.
func outputBytes(resp *wire.Response) int {
	if resp == nil {
		return 0
	}
	n := len(resp.Stdout)
	for _, st := range resp.Stages {
		n += len(st.Stderr)
	}
	return n
}

// session is the calls of one MCP session.
type session struct {
	ctx context.Context // ends with the session

	mu    sync.Mutex
	calls map[string]*call
	kept  []*call // finished calls, oldest first
	bytes int     // output held by kept
}

// sessionOf returns ss's calls, creating them at its first use. They are
// cancelled when the session ends.
func (h *handler) sessionOf(ss *mcp.ServerSession) *session {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s := h.sessions[ss]; s != nil {
		return s
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &session{ctx: ctx, calls: map[string]*call{}}
	h.sessions[ss] = s
	go func() {
		_ = ss.Wait()
		cancel(errSessionEnded)
		h.mu.Lock()
		delete(h.sessions, ss)
		h.mu.Unlock()
	}()
	return s
}

// start sends out to socket in the background.
func (s *session) start(host, socket string, out *wire.Outgoing) *call {
	ctx, cancel := context.WithCancelCause(s.ctx)
	c := &call{id: out.ID, host: host, socket: socket, pipeline: out.Pipeline, env: out.Env, sent: time.Now(),
		cancel: cancel, done: make(chan struct{}), phase: PhaseSent, changed: make(chan struct{})}
	s.mu.Lock()
	s.calls[c.id] = c
	s.mu.Unlock()
	go func() {
		defer cancel(nil)
		// The output streams (client.DoStream), every byte of it, and
		// the call keeps what its bounds allow (keeper). An older
		// rootgated, without streamed output or progress lines, gets the
		// request again without them, and its answer holds the output.
		var k keeper
		resp, err := client.DoStream(ctx, socket, out, c.setPhase, k.frame)
		if err != nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		k.fill(resp)
		c.resp, c.err, c.size = resp, err, outputBytes(resp)
		close(c.done)
		s.keep(c)
	}()
	return c
}

// keep adds a finished call to the store, evicting the oldest beyond the
// bounds.
func (s *session) keep(c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kept = append(s.kept, c)
	s.bytes += c.size
	for len(s.kept) > 1 && (len(s.kept) > keepCalls || s.bytes > keepBytes) {
		old := s.kept[0]
		s.kept = s.kept[1:]
		s.bytes -= old.size
		delete(s.calls, old.id)
	}
}

func (s *session) get(id string) *call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[id]
}

// unknownCall says that id names no call the session still has.
func unknownCall(id string) string {
	return fmt.Sprintf("no call with id %q in this session: use an id that execute returned in this MCP session. The server keeps the last %d finished calls (at most %d MiB of their output in all); older ones are gone.", id, keepCalls, keepBytes>>20)
}

// await waits up to d for c to finish, sending progress notifications if
// the client asked for them. It returns the context's error when the tool
// call was cancelled; c goes on either way.
func (h *handler) await(ctx context.Context, req *mcp.CallToolRequest, c *call, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	token := req.Params.GetProgressToken()
	var tick <-chan time.Time
	if token != nil {
		t := time.NewTicker(h.cfg.ProgressEvery)
		defer t.Stop()
		tick = t.C
	}
	last := 0.0
	notify := func(phase string) {
		if token == nil {
			return
		}
		p := time.Since(c.sent).Seconds()
		if p <= last {
			p = last + 0.001 // progress must rise with every notification
		}
		last = p
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token, Progress: p, Message: c.describe(phase),
		})
	}
	phase, changed := c.state()
	notify(phase)
	for {
		select {
		case <-c.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return nil
		case <-changed:
			phase, changed = c.state()
			notify(phase)
		case <-tick:
			notify(phase)
		}
	}
}

// describe says what a pending call waits for.
func (c *call) describe(phase string) string {
	since := time.Since(c.sent).Round(time.Second)
	switch phase {
	case PhaseApproval:
		return fmt.Sprintf("waiting for a person to approve it (host %s, sent %s ago)", c.host, since)
	case PhaseRunning:
		return fmt.Sprintf("approved and running (host %s, sent %s ago)", c.host, since)
	}
	return fmt.Sprintf("sent to rootgated (host %s, %s ago); no decision yet", c.host, since)
}

// result is c's result now: pending, or how it ended.
func (h *handler) result(c *call) *Result {
	if !c.finished() {
		phase, _ := c.state()
		return &Result{Status: StatusPending, Host: c.host, ID: c.id, Phase: phase, Pipeline: c.pipeline,
			Message: c.describe(phase),
			Next:    fmt.Sprintf(`The request is still in progress; it goes on whatever you do next. Call wait with {"id": %q} to wait for its result (again and again if it is still pending), or cancel with {"id": %q} to withdraw it (a running command is killed). Do not send the request again.`, c.id, c.id)}
	}
	switch {
	case errors.Is(c.err, errCancelled):
		return &Result{Status: wire.StatusError, Host: c.host, ID: c.id, Pipeline: c.pipeline,
			Message: "cancelled with the cancel tool: the prompt was withdrawn, or the run was killed with all its processes; rootgated sends no output for a cancelled request",
			Next:    "Nothing more will happen for this request. If you still need it, ask the user before sending it again."}
	case c.err != nil:
		return connectionResult(c.host, c.socket, c.err)
	}
	r := render(c.host, c.socket, c.pipeline, c.resp, h.cfg.MaxText)
	if c.resp.Code == wire.CodeEnvNotAllowed {
		r.Next = envHint(c.env)
	}
	return r
}
