package approver

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/testutil"
)

// askFunc is an approval.Approver made of a function: the operator.
type askFunc func(ctx context.Context, p *approval.Prompt) approval.Decision

func (f askFunc) Approve(ctx context.Context, p *approval.Prompt) approval.Decision { return f(ctx, p) }

// pair is a remote.Host serving a socket and a Client attached to it, both ends of
// the protocol in this process over a real Unix socket.
type pair struct {
	broker *approval.Broker
	out    *testutil.SyncBuffer
	answer chan approval.Verdict // what the operator answers next
	shown  chan *approval.Prompt // what the operator was shown
	stop   func() error          // detaches the client; Run's error
}

func attach(t *testing.T) *pair {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "rg-remote-") // short: sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "a.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{
		broker: &approval.Broker{Timeout: time.Minute},
		out:    &testutil.SyncBuffer{},
		answer: make(chan approval.Verdict, 1),
		shown:  make(chan *approval.Prompt, 1),
	}
	host := &remote.Host{Broker: p.broker, Version: "test-daemon"}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				host.Serve(ctx, c, remote.Peer{UID: 0, User: "root"})
			}()
		}
	}()
	client := &Client{Socket: sock, Name: "pts/9", Kind: "terminal", Operator: "op", Version: "test-client", Out: p.out,
		Ask: func(time.Time, bool, Daemon) approval.Approver {
			return askFunc(func(ctx context.Context, pr *approval.Prompt) approval.Decision {
				p.shown <- pr
				select {
				case v := <-p.answer:
					return approval.Decision{Verdict: v}
				case <-ctx.Done():
					return approval.Decision{Verdict: approval.Withdrawn}
				}
			})
		}}
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- client.Run(cctx) }()
	var once sync.Once
	var runErr error
	p.stop = func() error {
		once.Do(func() {
			ccancel()
			runErr = <-done
		})
		return runErr
	}
	t.Cleanup(func() {
		p.stop()
		cancel()
		ln.Close()
		wg.Wait()
	})
	// Attached on both ends: the broker has it, and the client has read
	// the welcome (the host attaches before it writes the welcome).
	testutil.WaitFor(t, "the client to attach", 10*time.Second, func() bool {
		return p.broker.Len() > 0 && strings.Contains(p.out.String(), "rootgate: attached to rootgated")
	})
	return p
}

func remotePrompt(id string) *approval.Prompt {
	return &approval.Prompt{ID: id, Requester: approval.Requester{UID: 1000, User: "agent"},
		Stages: []approval.Stage{{Argv: []string{"id"}, Path: "/usr/bin/id"}}, Privileged: true}
}

// TestHostClient runs both ends of the approver protocol against each
// other: a prompt reaches the operator whole, approvals and denials come
// back to the broker, a withdrawn request is withdrawn at the client, and
// Ctrl-C detaches.
func TestHostClient(t *testing.T) {
	p := attach(t)
	if !strings.Contains(p.out.String(), "rootgate: attached to rootgated test-daemon") {
		t.Errorf("no attach line; the client says:\n%s", p.out.String())
	}

	for _, tt := range []struct {
		id   string
		v    approval.Verdict
		want approval.Decision
	}{
		{"r-allow", approval.Allow, approval.Decision{Verdict: approval.Allow, By: "approver root on pts/9"}},
		{"r-deny", approval.Deny, approval.Decision{Verdict: approval.Deny, Message: "denied by operator root on pts/9", By: "approver root on pts/9"}},
	} {
		p.answer <- tt.v
		d := p.broker.Approve(context.Background(), remotePrompt(tt.id))
		if d.Verdict != tt.want.Verdict || d.Message != tt.want.Message || d.By != tt.want.By {
			t.Errorf("%s: got %+v, want %+v", tt.id, d, tt.want)
		}
		if got := <-p.shown; remote.RequestHash(got) != remote.RequestHash(remotePrompt(tt.id)) {
			t.Errorf("%s: the operator was shown %+v", tt.id, got)
		}
	}

	// Withdrawn: the request goes away while the operator looks at it.
	ctx, cancel := context.WithCancelCause(context.Background())
	res := make(chan approval.Decision, 1)
	go func() { res <- p.broker.Approve(ctx, remotePrompt("r-gone")) }()
	<-p.shown
	cancel(nil)
	if d := <-res; d.Verdict != approval.Withdrawn {
		t.Errorf("withdrawn: got %+v", d)
	}
	// The client's prompt ended because the withdraw message reached it:
	// the idle line names the request as withdrawn.
	if !testutil.Poll(10*time.Second, func() bool { return strings.Contains(p.out.String(), "r-gone withdrawn") }) {
		t.Fatalf("the client never withdrew r-gone; it says:\n%s", p.out.String())
	}

	if err := p.stop(); err != nil {
		t.Errorf("Run after Ctrl-C: %v", err)
	}
	if !testutil.Poll(10*time.Second, func() bool {
		return p.broker.Len() == 0 && strings.Contains(p.out.String(), "rootgate: detached")
	}) {
		t.Fatalf("still attached after Ctrl-C (%d); the client says:\n%s", p.broker.Len(), p.out.String())
	}
}

// TestClientRefused: a daemon's refusal ends Run with a *remote.RefusedError
// carrying the daemon's words, without retrying.
func TestClientRefused(t *testing.T) {
	dir, err := os.MkdirTemp("/tmp", "rg-remote-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "a.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		remote.Refuse(c, "uid 1000 (agent) is not admitted")
		c.Close()
	}()
	out := &testutil.SyncBuffer{}
	c := &Client{Socket: sock, Name: "pts/9", Kind: "terminal", Out: out, Ask: func(time.Time, bool, Daemon) approval.Approver { return approval.Nobody{} }}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Run(ctx)
	var refused *remote.RefusedError
	if !errors.As(err, &refused) || refused.Message != "uid 1000 (agent) is not admitted" {
		t.Fatalf("Run = %v, want the refusal; the client says:\n%s", err, out.String())
	}
	if err.Error() != "rootgated refused this approver: uid 1000 (agent) is not admitted" {
		t.Errorf("Error() = %q", err)
	}
}

// serveHost serves h on a fresh socket until the test ends and returns
// the socket's path.
func serveHost(t *testing.T, h *remote.Host) string {
	t.Helper()
	dir, err := os.MkdirTemp("/tmp", "rg-remote-") // short: sun_path holds 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "a.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			wg.Go(func() { h.Serve(ctx, c, remote.Peer{UID: 0, User: "root"}) })
		}
	})
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
		os.RemoveAll(dir)
	})
	return sock
}

// TestClientManyDaemons: one client attached to two daemons shows their
// prompts one at a time, each with the host name its daemon sent, and
// keeps each daemon's prompt ids apart: both daemons put a prompt with
// the same id (a requester's word), and the first daemon's withdraw of
// its own leaves the second's to be shown and answered.
func TestClientManyDaemons(t *testing.T) {
	hosts := map[string]*approval.Broker{"host-a": {Timeout: time.Minute}, "host-b": {Timeout: time.Minute}}
	sockOf := map[string]string{}
	for name, b := range hosts {
		sockOf[name] = serveHost(t, &remote.Host{Broker: b, Version: "test-daemon", Hostname: name})
	}
	type shown struct {
		from Daemon
		p    *approval.Prompt
		ctx  context.Context
	}
	seen := make(chan shown, 4)
	answer := make(chan approval.Verdict, 1)
	out := &testutil.SyncBuffer{}
	client := &Client{Sockets: []string{sockOf["host-a"], sockOf["host-b"]}, Name: "pts/9", Kind: "terminal", Operator: "op", Out: out,
		Ask: func(_ time.Time, _ bool, from Daemon) approval.Approver {
			return askFunc(func(ctx context.Context, p *approval.Prompt) approval.Decision {
				seen <- shown{from, p, ctx}
				select {
				case v := <-answer:
					return approval.Decision{Verdict: v}
				case <-ctx.Done():
					return approval.Decision{Verdict: approval.Withdrawn}
				}
			})
		}}
	cctx, ccancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- client.Run(cctx) }()
	defer func() {
		ccancel()
		if err := <-done; err != nil {
			t.Errorf("Run after Ctrl-C: %v", err)
		}
	}()
	testutil.WaitFor(t, "both daemons to attach", 10*time.Second, func() bool {
		s := out.String()
		return hosts["host-a"].Len() > 0 && hosts["host-b"].Len() > 0 &&
			strings.Contains(s, "on host host-a at "+sockOf["host-a"]) && strings.Contains(s, "on host host-b at "+sockOf["host-b"])
	})

	actx, acancel := context.WithCancel(context.Background())
	aRes := make(chan approval.Decision, 1)
	go func() { aRes <- hosts["host-a"].Approve(actx, remotePrompt("same-id")) }()
	next := func(what string) shown {
		t.Helper()
		select {
		case s := <-seen:
			return s
		case <-time.After(10 * time.Second):
			t.Fatalf("%s was never shown; the client says:\n%s", what, out)
			return shown{}
		}
	}
	first := next("host-a's prompt")
	if first.from.Host != "host-a" || first.from.Socket != sockOf["host-a"] {
		t.Fatalf("host-a's prompt was shown as from %+v", first.from)
	}
	bRes := make(chan approval.Decision, 1)
	go func() { bRes <- hosts["host-b"].Approve(context.Background(), remotePrompt("same-id")) }()
	// host-b's prompt waits its turn: nothing else is shown meanwhile.
	testutil.WaitFor(t, "host-b's prompt to be queued", 10*time.Second, func() bool {
		client.mu.Lock()
		defer client.mu.Unlock()
		return len(client.queue) == 1 || len(seen) > 0
	})
	if len(seen) > 0 {
		t.Fatal("a second prompt was shown while the first was up")
	}
	acancel() // host-a withdraws its "same-id"
	if d := <-aRes; d.Verdict != approval.Withdrawn {
		t.Fatalf("host-a: %+v", d)
	}
	select {
	case <-first.ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("host-a's withdraw did not reach its prompt; the client says:\n%s", out)
	}
	second := next("host-b's prompt")
	if second.from.Host != "host-b" || second.ctx.Err() != nil {
		t.Fatalf("after host-a's withdraw, shown %+v from %+v (ctx %v)", second.p.ID, second.from, second.ctx.Err())
	}
	answer <- approval.Allow
	select {
	case d := <-bRes:
		if d.Verdict != approval.Allow {
			t.Fatalf("host-b: %+v; the client says:\n%s", d, out)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("host-b's prompt was never answered; the client says:\n%s", out)
	}
}
