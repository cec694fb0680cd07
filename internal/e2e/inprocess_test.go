package e2e

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/daemon"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/policy"
	"github.com/rootgate/rootgate/wire"
)

// The tests in this file run a daemon.Server in the test process, with a
// fake approver and a fake clock, for the decision logic: what the policy,
// the approver and the clock make of a request. The real binaries' tests
// cover the same paths end to end; these ones say which rule decided, fast.

// fakeApprover answers each prompt with the next verdict it is given, and
// records the prompts it was shown.
type fakeApprover struct {
	mu      sync.Mutex
	prompts []*approval.Prompt
	answer  func(ctx context.Context, p *approval.Prompt) approval.Decision
}

func (f *fakeApprover) Approve(ctx context.Context, p *approval.Prompt) approval.Decision {
	f.mu.Lock()
	f.prompts = append(f.prompts, p)
	answer := f.answer
	f.mu.Unlock()
	return answer(ctx, p)
}

func (f *fakeApprover) asked() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var ids []string
	for _, p := range f.prompts {
		ids = append(ids, p.ID)
	}
	return ids
}

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// inServer is a daemon.Server serving a socket from the test process.
type inServer struct {
	t     testing.TB
	dir   string // holds the socket and the runtime directory, run
	sock  string
	clock *fakeClock // nil: the real clock
	stop  func()     // ends Serve, as a signal to the daemon does
}

// startServer serves cfg with policy text until the test ends. Given no
// clock (cfg.Now), the server gets a fake one, at clock.
func startServer(t testing.TB, policyText string, cfg daemon.Config) *inServer {
	t.Helper()
	dir := shortDir(t)
	pol, err := policy.Parse("policy", strings.NewReader(policyText))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policy = pol
	cfg.RuntimeDir = filepath.Join(dir, "run")
	cfg.Version = "test"
	s, err := daemon.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	ln, err := daemon.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, daemon.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &inServer{t: t, dir: dir, sock: sock, stop: cancel}
}

// startFaked is startServer with a fake clock and approver fa (a
// fakeApprover, or a real approval.Broker of fake members).
func startFaked(t *testing.T, policy string, fa approval.Approver, cfg daemon.Config) *inServer {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 2, 13, 14, 30, 0, 0, time.UTC)}
	cfg.Now = clock.Now
	cfg.Approver = fa
	p := startServer(t, policy, cfg)
	p.clock = clock
	return p
}

// send sends a request built from overrides, dated by the fake clock
// unless it says otherwise.
func (p *inServer) send(over map[string]any) response {
	p.t.Helper()
	if _, ok := over["time"]; !ok {
		over["time"] = p.clock.Now().Format(time.RFC3339Nano)
	}
	d := &daemonProc{&rgtest.Daemon{T: p.t, Sock: p.sock}}
	return d.sendRaw(request(over))
}

func TestInProcessDecisions(t *testing.T) {
	t.Parallel()
	fa := &fakeApprover{}
	var verdict approval.Decision
	fa.answer = func(context.Context, *approval.Prompt) approval.Decision { return verdict }
	p := startFaked(t, "allow privileged echo allowed\ndeny any echo denied\n", fa, daemon.Config{})

	for _, c := range []struct {
		name    string
		argv    []string
		verdict approval.Decision
		asked   bool
		status  string
		message string
		stdout  string
	}{
		{name: "policy allow runs unasked", argv: []string{"echo", "allowed"}, status: wire.StatusOK, stdout: "allowed\n"},
		{name: "policy deny refuses unasked", argv: []string{"echo", "denied"}, status: wire.StatusDenied, message: "denied by policy rule at policy:2: deny any echo denied"},
		{name: "ask, approver allows", argv: []string{"echo", "asked"}, verdict: approval.Decision{Verdict: approval.Allow, By: "fake"}, asked: true, status: wire.StatusOK, stdout: "asked\n"},
		{name: "ask, approver denies", argv: []string{"echo", "asked"}, verdict: approval.Decision{Verdict: approval.Deny, Message: "denied by operator fake", By: "fake"}, asked: true, status: wire.StatusDenied, message: "denied by operator fake"},
		{name: "ask, nobody available", argv: []string{"echo", "asked"}, verdict: approval.Decision{Verdict: approval.Unavailable, Message: wire.ErrNoApprover.Error()}, asked: true, status: wire.StatusDenied, message: wire.ErrNoApprover.Error()},
		{name: "ask, prompt expires", argv: []string{"echo", "asked"}, verdict: approval.Decision{Verdict: approval.Expired, Message: "no decision within 60s"}, asked: true, status: wire.StatusTimeout, message: "no decision within 60s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			verdict = c.verdict
			before := len(fa.asked())
			r := p.send(map[string]any{"pipeline": [][]string{c.argv}, "privileged": true})
			if r.Status != c.status || r.Message != c.message || string(r.Stdout) != c.stdout {
				t.Fatalf("got %s, want status %q message %q stdout %q", strings.TrimSpace(r.raw), c.status, c.message, c.stdout)
			}
			if asked := len(fa.asked()) > before; asked != c.asked {
				t.Fatalf("approver asked: %v, want %v", asked, c.asked)
			}
		})
	}
}

func TestInProcessFreshnessAndReplay(t *testing.T) {
	t.Parallel()
	fa := &fakeApprover{answer: func(context.Context, *approval.Prompt) approval.Decision {
		return approval.Decision{Verdict: approval.Allow, By: "fake"}
	}}
	p := startFaked(t, "ask any\n", fa, daemon.Config{MaxSkew: 30 * time.Second})
	now := p.clock.Now()

	for _, c := range []struct {
		name    string
		at      time.Time
		message string
	}{
		{"too old", now.Add(-31 * time.Second), "request too old: 31s (max 30s)"},
		{"too new", now.Add(31 * time.Second), "request time is in the future: 31s ahead (max 30s)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := p.send(map[string]any{"time": c.at.Format(time.RFC3339Nano)})
			wantError(t, r, c.message)
		})
	}
	if ids := fa.asked(); len(ids) != 0 {
		t.Fatalf("stale requests were put to the approver: %v", ids)
	}

	t.Run("replay within the window is refused", func(t *testing.T) {
		line := request(map[string]any{"id": "replayed", "time": now.Format(time.RFC3339Nano)})
		d := &daemonProc{&rgtest.Daemon{T: t, Sock: p.sock}}
		wantOK(t, d.sendRaw(line))
		p.clock.add(29 * time.Second) // still fresh: only the replay window refuses it
		wantError(t, d.sendRaw(line), wire.DuplicateError("replayed").Error())
		if ids := fa.asked(); len(ids) != 1 {
			t.Fatalf("approver asked %v, want the first request only", ids)
		}
	})
	t.Run("the clock moving on makes the same line stale", func(t *testing.T) {
		line := request(map[string]any{"id": "late", "time": p.clock.Now().Format(time.RFC3339Nano)})
		p.clock.add(31 * time.Second)
		wantError(t, (&daemonProc{&rgtest.Daemon{T: t, Sock: p.sock}}).sendRaw(line), "request too old: 31s (max 30s)")
	})
}

func TestInProcessPromptLimits(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	fa := &fakeApprover{answer: func(ctx context.Context, _ *approval.Prompt) approval.Decision {
		select {
		case <-release:
			return approval.Decision{Verdict: approval.Allow, By: "fake"}
		case <-ctx.Done():
			return approval.Decision{Verdict: approval.Withdrawn}
		}
	}}
	p := startFaked(t, "ask any\n", fa, daemon.Config{MaxPending: 1, PromptRate: 2})

	first := make(chan response, 1)
	go func() { first <- p.send(map[string]any{"id": "pending-1"}) }()
	waitFor(t, "the first prompt", 10*time.Second, func() bool { return len(fa.asked()) == 1 })
	wantError(t, p.send(map[string]any{"id": "pending-2"}), wire.TooManyPendingError(0, 1).Error())
	close(release)
	wantOK(t, <-first)

	// The rate counts prompts put to a person within a minute: one more
	// fits, the next does not, and a minute later one fits again.
	wantOK(t, p.send(map[string]any{"id": "rate-2"}))
	wantError(t, p.send(map[string]any{"id": "rate-3"}), wire.PromptRateError(0, 2).Error())
	p.clock.add(61 * time.Second)
	wantOK(t, p.send(map[string]any{"id": "rate-4"}))
	if got, want := strings.Join(fa.asked(), " "), "pending-1 rate-2 rate-4"; got != want {
		t.Fatalf("approver asked %s, want %s", got, want)
	}
}
