package e2e

import (
	"context"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/daemon"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
)

// TestEveryCodeProduced provokes every code of the protocol's table
// (wire.Codes, docs/protocol.md "Response codes") from a daemon.Server
// and checks the answer carries it, with its status. A code added to the
// table without a case here, or a case for a code the table lacks, fails
// the test: the table holds no code the daemon cannot send.
func TestEveryCodeProduced(t *testing.T) {
	t.Parallel()
	allow := func() *fakeApprover {
		return &fakeApprover{answer: func(context.Context, *approval.Prompt) approval.Decision {
			return approval.Decision{Verdict: approval.Allow, By: "fake"}
		}}
	}
	// waiting approvers answer only when the request goes away.
	waiting := func() *fakeApprover {
		return &fakeApprover{answer: func(ctx context.Context, _ *approval.Prompt) approval.Decision {
			<-ctx.Done()
			return approval.Decision{Verdict: approval.Withdrawn, Message: "request withdrawn", By: "fake"}
		}}
	}
	// member is a broker member at root's terminal that uids controls.
	member := func(a approval.Approver, controllers ...int) *approval.Member {
		return &approval.Member{UID: 0, Name: "root on test", Approver: a, Controllers: controllers}
	}
	broker := func(timeout time.Duration, ms ...*approval.Member) *approval.Broker {
		b := &approval.Broker{Timeout: timeout}
		for _, m := range ms {
			b.Attach(m)
		}
		return b
	}
	raw := func(p *inServer, line string) response {
		return (&daemonProc{&rgtest.Daemon{T: p.t, Sock: p.sock}}).sendRaw(line)
	}
	// asUser sends line as uid (group uid, no other groups), through a
	// socket opened to every user.
	asUser := func(t *testing.T, p *inServer, uid uint32, over map[string]any) response {
		t.Helper()
		if err := os.Chmod(p.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p.sock, 0o666); err != nil {
			t.Fatal(err)
		}
		over["time"] = p.clock.Now().Format(time.RFC3339Nano)
		return sendAs(t, p.sock, uid, uid, []uint32{}, request(over))
	}
	// held sends over from another goroutine, waits until a prompt for it
	// is put to fa, and returns where its answer will arrive.
	held := func(t *testing.T, p *inServer, fa *fakeApprover, over map[string]any) <-chan response {
		t.Helper()
		over["time"] = p.clock.Now().Format(time.RFC3339Nano)
		line := request(over)
		ch := make(chan response, 1)
		go func() {
			r, err := trySendAs(p.sock, 0, 0, []uint32{}, line)
			if err != nil {
				r.raw = err.Error()
			}
			ch <- r
		}()
		waitFor(t, "the held request's prompt", 10*time.Second, func() bool { return len(fa.asked()) == 1 })
		return ch
	}
	const nobody = 65534

	cases := []struct {
		code    string
		provoke func(t *testing.T) response
	}{
		{wire.CodeInvalidJSON, func(t *testing.T) response {
			return raw(startFaked(t, "", allow(), daemon.Config{}), "not json\n")
		}},
		{wire.CodeUnknownField, func(t *testing.T) response {
			return startFaked(t, "", allow(), daemon.Config{}).send(map[string]any{"NAME": 1})
		}},
		{wire.CodeInvalidRequest, func(t *testing.T) response {
			return raw(startFaked(t, "", allow(), daemon.Config{}), request(map[string]any{"time": nil}))
		}},
		{wire.CodeTooLarge, func(t *testing.T) response {
			p := startFaked(t, "", allow(), daemon.Config{})
			c := dial(t, p.sock)
			go func() {
				chunk := []byte(strings.Repeat("a", 64<<10))
				for {
					if _, err := c.Write(chunk); err != nil {
						return
					}
				}
			}()
			return readResponse(t, c)
		}},
		{wire.CodeReadTimeout, func(t *testing.T) response {
			p := startFaked(t, "", allow(), daemon.Config{FirstByteTimeout: 50 * time.Millisecond})
			return readResponse(t, dial(t, p.sock)) // and say nothing
		}},
		{wire.CodeStaleTime, func(t *testing.T) response {
			p := startFaked(t, "", allow(), daemon.Config{})
			return p.send(map[string]any{"time": p.clock.Now().Add(-time.Hour).Format(time.RFC3339)})
		}},
		{wire.CodeReplay, func(t *testing.T) response {
			p := startFaked(t, "allow any\n", allow(), daemon.Config{})
			line := request(map[string]any{"time": p.clock.Now().Format(time.RFC3339Nano)})
			wantOK(t, raw(p, line))
			return raw(p, line)
		}},
		{wire.CodeEnvNotAllowed, func(t *testing.T) response {
			return startFaked(t, "", allow(), daemon.Config{}).send(map[string]any{"env": map[string]string{"FOO": "1"}})
		}},
		{wire.CodeEnvValue, func(t *testing.T) response {
			return startFaked(t, "", allow(), daemon.Config{}).send(map[string]any{"env": map[string]string{"LANG": "/etc"}})
		}},
		{wire.CodeNotFound, func(t *testing.T) response {
			return startFaked(t, "", allow(), daemon.Config{}).send(map[string]any{"pipeline": [][]string{{"rootgate-no-such-command"}}})
		}},
		{wire.CodeResolve, func(t *testing.T) response {
			// A path through a /proc magic link is refused, not followed.
			return startFaked(t, "", allow(), daemon.Config{}).send(map[string]any{"pipeline": [][]string{{"/proc/self/root/bin/true"}}})
		}},
		{wire.CodeCwd, func(t *testing.T) response {
			return startFaked(t, "", allow(), daemon.Config{}).send(map[string]any{"cwd": "/no/such/dir"})
		}},
		{wire.CodeNoUser, func(t *testing.T) response {
			uid := 54321
			for ; ; uid++ {
				if _, err := user.LookupId(strconv.Itoa(uid)); err != nil {
					break
				}
			}
			p := startFaked(t, "", allow(), daemon.Config{})
			return asUser(t, p, uint32(uid), map[string]any{"privileged": false})
		}},
		{wire.CodeNoAgent, func(t *testing.T) response {
			return startFaked(t, "", allow(), daemon.Config{}).send(map[string]any{"privileged": false, "forward_agent": true})
		}},
		{wire.CodeBusy, func(t *testing.T) response {
			fa := waiting()
			p := startFaked(t, "", fa, daemon.Config{MaxConns: 1})
			first := held(t, p, fa, map[string]any{})
			r := p.send(map[string]any{})
			p.stop()
			<-first
			return r
		}},
		{wire.CodeRateLimit, func(t *testing.T) response {
			fa := waiting()
			p := startFaked(t, "", fa, daemon.Config{MaxPending: 1})
			first := held(t, p, fa, map[string]any{})
			r := p.send(map[string]any{})
			p.stop()
			<-first
			return r
		}},
		{wire.CodeStopping, func(t *testing.T) response {
			fa := waiting()
			p := startFaked(t, "", fa, daemon.Config{})
			ch := held(t, p, fa, map[string]any{})
			p.stop()
			return <-ch
		}},
		{wire.CodeKilledStopping, func(t *testing.T) response {
			p := startFaked(t, "", allow(), daemon.Config{})
			started := filepath.Join(p.dir, "started")
			ch := make(chan response, 1)
			line := request(map[string]any{"time": p.clock.Now().Format(time.RFC3339Nano),
				"pipeline": [][]string{{"sh", "-c", "touch " + started + "; exec sleep 60"}}})
			go func() {
				r, err := trySendAs(p.sock, 0, 0, []uint32{}, line)
				if err != nil {
					r.raw = err.Error()
				}
				ch <- r
			}()
			waitFor(t, "the run to start", 10*time.Second, func() bool { _, err := os.Stat(started); return err == nil })
			p.stop()
			return <-ch
		}},
		{wire.CodeStart, func(t *testing.T) response {
			// One argument past the kernel's limit (MAX_ARG_STRLEN) fails
			// at execve, after the approval.
			return startFaked(t, "", allow(), daemon.Config{}).send(map[string]any{"pipeline": [][]string{{"echo", strings.Repeat("b", 128<<10)}}})
		}},
		{wire.CodeAudit, func(t *testing.T) response {
			log, err := audit.Open(filepath.Join(shortDir(t), "audit.log"), audit.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { log.Close() })
			// More free space than any file system has: the guard refuses.
			return startFaked(t, "", allow(), daemon.Config{Audit: log, AuditMinFree: 1 << 62}).send(map[string]any{})
		}},
		{wire.CodeInternal, func(t *testing.T) response {
			// The replay window cannot be rewritten (a directory that is
			// not empty holds its temporary file's name) once it is due.
			p := startFaked(t, "", allow(), daemon.Config{MaxSkew: time.Second})
			if err := os.MkdirAll(filepath.Join(p.dir, "run", "replay.tmp", "x"), 0o700); err != nil {
				t.Fatal(err)
			}
			p.clock.add(3 * time.Second)
			return p.send(map[string]any{})
		}},
		{wire.CodeNoApprover, func(t *testing.T) response {
			return startFaked(t, "", broker(0), daemon.Config{}).send(map[string]any{})
		}},
		{wire.CodeNoEligibleApprover, func(t *testing.T) response {
			fa := allow()
			p := startFaked(t, "", broker(0, member(fa, nobody)), daemon.Config{})
			r := asUser(t, p, nobody, map[string]any{})
			if ids := fa.asked(); len(ids) != 0 {
				t.Errorf("an approver nobody controls was asked about nobody's request: %v", ids)
			}
			return r
		}},
		{wire.CodeDeniedByPolicy, func(t *testing.T) response {
			return startFaked(t, "deny any\n", allow(), daemon.Config{}).send(map[string]any{})
		}},
		{wire.CodeDeniedByOperator, func(t *testing.T) response {
			no := &fakeApprover{answer: func(context.Context, *approval.Prompt) approval.Decision {
				return approval.Decision{Verdict: approval.Deny, Message: "denied by operator root on test", By: "fake"}
			}}
			return startFaked(t, "", broker(0, member(no)), daemon.Config{}).send(map[string]any{})
		}},
		{wire.CodePromptTimeout, func(t *testing.T) response {
			return startFaked(t, "", broker(50*time.Millisecond, member(waiting())), daemon.Config{}).send(map[string]any{})
		}},
		{wire.CodeRunTimeout, func(t *testing.T) response {
			p := startFaked(t, "allow any\n", allow(), daemon.Config{KillGrace: 100 * time.Millisecond})
			return p.send(map[string]any{"pipeline": [][]string{{"sleep", "30"}}, "timeout": 0.2})
		}},
	}

	var tested []string
	for _, c := range cases {
		tested = append(tested, c.code)
		t.Run(c.code, func(t *testing.T) {
			r := c.provoke(t)
			t.Log(strings.TrimSpace(r.raw))
			wantCode(t, r, c.code)
		})
	}
	all := wire.Codes()
	slices.Sort(all)
	slices.Sort(tested)
	if !slices.Equal(all, tested) {
		t.Errorf("codes provoked here:\n%v\nthe protocol's codes:\n%v", tested, all)
	}
}

// dial connects to sock and sets a deadline on the connection.
func dial(t *testing.T, sock string) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}
