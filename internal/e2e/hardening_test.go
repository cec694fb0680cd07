package e2e

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/wire"
)

// rawApprover is an approver client speaking the approver protocol by
// hand, so tests can hold prompts open, decide them at a chosen moment, or
// misbehave.
type rawApprover struct {
	t testing.TB
	c *net.UnixConn
	r *bufio.Reader
}

// attachRaw attaches a raw approver (as root) to d.
func attachRaw(t testing.TB, d *daemonProc) *rawApprover {
	t.Helper()
	a := dialApprover(t, d)
	a.send(&remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: "raw"})
	if m := a.next(); m.Type != remote.MsgWelcome {
		t.Fatalf("got %+v, want welcome", m)
	}
	return a
}

func (a *rawApprover) send(m *remote.Message) {
	a.t.Helper()
	if err := remote.WriteMessage(a.c, m); err != nil {
		a.t.Fatal(err)
	}
}

// next reads the next message other than a ping, within 30 s.
func (a *rawApprover) next() *remote.Message {
	a.t.Helper()
	// One deadline for the whole wait: the daemon's pings must not
	// extend it.
	_ = a.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	for {
		m, err := remote.ReadMessage(a.r, remote.MaxDaemonLine)
		if err != nil {
			a.t.Fatalf("approver read: %v", err)
		}
		if m.Type != remote.MsgPing {
			return m
		}
		a.send(&remote.Message{Type: remote.MsgPong})
	}
}

// prompt waits for the next prompt.
func (a *rawApprover) prompt() *remote.Message {
	a.t.Helper()
	m := a.next()
	if m.Type != remote.MsgPrompt {
		a.t.Fatalf("got %+v, want a prompt", m)
	}
	return m
}

// decide answers prompt p.
func (a *rawApprover) decide(p *remote.Message, approve bool) {
	a.t.Helper()
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &approve})
}

// TestPromptLimits: one requester can keep at most --max-pending requests
// waiting for a person and put at most --prompt-rate to people a minute;
// past that its requests are refused with the protocol's messages.
func TestPromptLimits(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t, "--max-pending", "1", "--prompt-rate", "3")
	a := attachRaw(t, d)
	first := d.ask(nil)
	p := a.prompt()
	wantError(t, d.send(nil), "too many requests from uid 0 waiting for approval (max 1)")
	d.alive() // a ping asks no one
	a.decide(p, false)
	if r := <-first; r.Status != wire.StatusDenied {
		t.Fatalf("first request: %s", r.raw)
	}
	for range 2 { // the second and third prompt of the minute
		ch := d.ask(nil)
		a.decide(a.prompt(), false)
		if r := <-ch; r.Status != wire.StatusDenied {
			t.Fatalf("got %s, want denied", r.raw)
		}
	}
	wantError(t, d.send(nil), "too many requests from uid 0: at most 3 a minute may ask for approval")
}

// TestApproverFlood: an approver that floods the daemon with decisions
// that name no prompt is refused each time, then disconnected; requests
// are served throughout.
func TestApproverFlood(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := attachRaw(t, d)
	yes := true
	for i := range 33 { // one more than the daemon takes
		a.send(&remote.Message{Type: remote.MsgDecision, ID: "nope", Hash: "x", Approve: &yes})
		if i%10 == 0 {
			d.alive()
		}
	}
	var last *remote.Message
	for range 33 {
		last = a.next()
		if last.Type != remote.MsgError {
			t.Fatalf("got %+v, want error", last)
		}
	}
	if want := "too many refused decisions (more than 32 a minute); disconnected"; last.Message != want {
		t.Errorf("last message %q, want %q", last.Message, want)
	}
	_ = a.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if m, err := remote.ReadMessage(a.r, remote.MaxDaemonLine); err == nil {
		t.Errorf("still connected: got %+v", m)
	}
	d.alive()
}

// swapDir makes a directory nobody can read, holding an ELF binary (a copy
// of /bin/true) and a script.
func swapDir(t *testing.T) (elf, script string) {
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	elf = filepath.Join(dir, "elf")
	b, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(elf, b, 0o755); err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho shown\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return elf, script
}

// TestExecutableSwappedAfterApproval: the prompt names a resolved file;
// replacing that file between the prompt and the run refuses the run, for
// an ELF binary and a script. Left alone, both run.
func TestExecutableSwappedAfterApproval(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := attachRaw(t, d)
	elf, script := swapDir(t)
	for _, path := range []string{elf, script} {
		for _, swap := range []bool{false, true} {
			ch := d.ask(map[string]any{"pipeline": [][]string{{path}}})
			p := a.prompt()
			if got := p.Request.Stages[0].Path; got != path {
				t.Fatalf("prompt shows %q, want %q", got, path)
			}
			if swap {
				tmp := path + ".new"
				if err := os.WriteFile(tmp, []byte("#!/bin/sh\necho evil\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, path); err != nil {
					t.Fatal(err)
				}
			}
			a.decide(p, true)
			r := <-ch
			// The approver learns the outcome, a refusal included.
			if m := a.next(); m.Type != remote.MsgResult || swap != strings.HasPrefix(m.Outcome, "not run: ") {
				t.Fatalf("got %+v, want the result", m)
			}
			if swap {
				wantError(t, r, `cannot start pipeline: run: stage 1: "`+path+`" changed since it was resolved`)
				continue
			}
			wantOK(t, r)
			if strings.Contains(string(r.Stdout), "evil") {
				t.Fatalf("the swapped file ran: %s", r.raw)
			}
		}
	}
}

// TestSymlinkedCwd: a cwd reached through a symlink is shown, and entered,
// as the directory it really is.
func TestSymlinkedCwd(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := attachRaw(t, d)
	dir := shortDir(t)
	real := filepath.Join(dir, "real")
	link := filepath.Join(dir, "link")
	if err := os.Mkdir(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	ch := d.ask(map[string]any{"cwd": link, "pipeline": [][]string{{"pwd"}}})
	p := a.prompt()
	if p.Request.Cwd != real {
		t.Errorf("prompt shows cwd %q, want %q", p.Request.Cwd, real)
	}
	a.decide(p, true)
	r := wantOK(t, <-ch)
	a.next() // the result
	if got := string(r.Stdout); got != real+"\n" {
		t.Errorf("ran in %q, want %q", got, real)
	}
}

// TestPeerExeShown: the prompt names the requester's executable, read
// through a pidfd at accept.
func TestPeerExeShown(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := attachRaw(t, d)
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	ch := d.ask(nil)
	p := a.prompt()
	if p.Request.Requester.Exe != self || p.Request.Requester.PID != os.Getpid() {
		t.Errorf("requester %+v, want pid %d exe %q", p.Request.Requester, os.Getpid(), self)
	}
	a.decide(p, false)
	<-ch
}

// TestSignalDispositions: runs start with SIGHUP's default action even
// when the daemon was started under nohup; with or without nohup, SIGHUP
// reloads the policy and the daemon goes on serving.
func TestSignalDispositions(t *testing.T) {
	t.Parallel()
	// SigIgn is a hex mask; SIGHUP is its lowest bit.
	script := [][]string{{"sh", "-c", "grep SigIgn /proc/self/status"}}
	d := startDaemon(t, opts{Prefix: []string{"nohup"}})
	r := wantOK(t, d.send(map[string]any{"pipeline": script}))
	mask, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(string(r.Stdout), "SigIgn:")), 16, 64)
	if err != nil {
		t.Fatalf("%q: %v", r.Stdout, err)
	}
	if mask&1 != 0 {
		t.Errorf("a run of a nohup'd daemon ignores SIGHUP: %s", r.Stdout)
	}
	if err := d.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d.waitReloads(1)
	d.alive()

	d2 := startDaemon(t, opts{})
	if err := d2.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	d2.waitReloads(1)
	d2.alive()
}

// TestArgumentExtremes: 100k arguments run; an argument or environment
// value past the kernel's per-string limit (MAX_ARG_STRLEN, 128 KiB with
// its NUL) and a near-1 MiB argument get a clear error naming the file
// as resolved; the daemon is unharmed.
func TestArgumentExtremes(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	many := append([]string{"echo"}, strings.Split(strings.Repeat("a ", 100000), " ")[:100000]...)
	r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{many}}))
	if len(r.Stdout) != 200000 {
		t.Errorf("100k arguments: %d bytes of output, want 200000", len(r.Stdout))
	}
	const maxArg = 128<<10 - 1 // bytes, without the NUL
	r = wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"echo", strings.Repeat("b", maxArg)}}}))
	if len(r.Stdout) != maxArg+1 {
		t.Errorf("argument at the limit: %d bytes of output", len(r.Stdout))
	}
	tooLong := `cannot start pipeline: run: stage 1: fork/exec /usr/bin/echo: argument list too long`
	wantError(t, d.send(map[string]any{"pipeline": [][]string{{"echo", strings.Repeat("b", maxArg+1)}}}), tooLong)
	wantError(t, d.send(map[string]any{"pipeline": [][]string{{"echo", strings.Repeat("c", 1<<20-200)}}}), tooLong)
	// An env value that long is no value its key may hold.
	wantError(t, d.send(map[string]any{"pipeline": [][]string{{"echo"}}, "env": map[string]string{"LANG": strings.Repeat("d", maxArg)}}),
		`env "LANG" must be a locale name such as "C.UTF-8" or "en_US.UTF-8" (language[_territory][.codeset][@modifier]; no "/")`)
	env := map[string]string{}
	for i := range 20000 {
		env[fmt.Sprintf("LC_X%d", i)] = "v"
	}
	r = wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"sh", "-c", "env | grep -c ^LC_X"}}, "env": env}))
	if strings.TrimSpace(string(r.Stdout)) != "20000" {
		t.Errorf("20000 env keys: the run saw %q", r.Stdout)
	}
	d.alive()
}

// TestRunDescriptors: a run has descriptors 0, 1 and 2 and nothing else
// of the daemon's (its sockets, the pinned executables, pidfds); a script
// has one more, 3, which is the script itself, held for its interpreter.
func TestRunDescriptors(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	_, script := swapDir(t)
	// The interpreter holds the script open (close-on-exec); what it got
	// from the daemon passes on through exec.
	text := "#!/bin/sh\nexec sh -c 'ls /proc/$$/fd'\n"
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		p    [][]string
		want string
	}{
		{[][]string{{"sh", "-c", "ls /proc/$$/fd"}}, "0\n1\n2\n"},
		// A script only root can change runs by its name, with nothing
		// but 0, 1 and 2 either.
		{[][]string{{script}}, "0\n1\n2\n"},
		{[][]string{{"true"}, {"sh", "-c", "ls /proc/$$/fd"}}, "0\n1\n2\n"},
	} {
		r := wantOK(t, d.send(map[string]any{"pipeline": tc.p, "stdin": "eA=="}))
		if got := string(r.Stdout); got != tc.want {
			t.Errorf("%q: descriptors %q, want %q", tc.p, got, tc.want)
		}
	}
}

// startRequester starts a separate client process (perl) that sends line
// to d and waits for the answer, so a test can kill it mid-request.
func startRequester(t *testing.T, d *daemonProc, line string) *exec.Cmd {
	t.Helper()
	// The line goes through stdin, so its contents are not in perl's
	// command line for procsWith to find.
	script := `use IO::Socket::UNIX; my $c = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "connect: $!"; ` +
		`my $l = <STDIN>; print $c $l; my $x = <$c>;`
	cmd := exec.Command("perl", "-e", script, d.Sock)
	cmd.Stdin = strings.NewReader(line)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestRequesterDies: a requester killed while its request waits for a
// person has the prompt withdrawn; one killed while its run goes on has
// every process of the run killed.
func TestRequesterDies(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t, "--kill-grace", "1s")
	a := attachRaw(t, d)
	cl := startRequester(t, d, request(nil))
	p := a.prompt()
	cl.Process.Kill()
	if m := a.next(); m.Type != remote.MsgWithdraw || m.ID != p.ID {
		t.Fatalf("got %+v, want the prompt withdrawn", m)
	}

	m := runMarker()
	cl = startRequester(t, d, request(map[string]any{"pipeline": [][]string{{"sh", "-c", "trap '' TERM; sleep " + m}}}))
	a.decide(a.prompt(), true)
	waitFor(t, "the run to start", 20*time.Second, func() bool { return len(procsWith(m)) > 0 })
	cl.Process.Kill()
	noSurvivors(t, m)
	d.alive()
}
