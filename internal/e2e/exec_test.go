package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// testUser is a throwaway account made for one test.
type testUser = userAccount

// addTestUser creates the account name (with a group of the same name and
// a home) and removes it when the test ends.
func addTestUser(t *testing.T, name string) testUser {
	t.Helper()
	return addAccount(t, name, "-m", "-U", "-s", "/bin/sh")
}

// askAs sends line as u (with the given supplementary groups) in the
// background; a failure to send becomes an error answer.
func askAs(d *daemonProc, u testUser, groups []uint32, line string) chan response {
	ch := make(chan response, 1)
	go func() {
		r, err := trySendAs(d.Sock, u.uid, u.gid, groups, line)
		if err != nil {
			r = response{Response: wire.Response{Status: wire.StatusError, Message: err.Error()}, raw: err.Error()}
		}
		ch <- r
	}()
	return ch
}

// prompts reads a raw approver's messages in the background, without
// failing the test from another goroutine: each prompt or result goes to
// the channel, pings are answered. It ends when the connection does.
func (a *rawApprover) prompts() chan *remote.Message {
	ch := make(chan *remote.Message, 8)
	go func() {
		for {
			m, err := remote.ReadMessage(a.r, remote.MaxDaemonLine)
			if err != nil {
				close(ch)
				return
			}
			if m.Type == remote.MsgPing {
				_ = remote.WriteMessage(a.c, &remote.Message{Type: remote.MsgPong})
				continue
			}
			ch <- m
		}
	}()
	return ch
}

// writeFile writes an executable file owned by owner (nil: root).
func writeFile(t *testing.T, path, text string, owner *testUser) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	if owner != nil {
		if err := os.Chown(path, int(owner.uid), int(owner.gid)); err != nil {
			t.Fatal(err)
		}
	}
}

// startedStages returns the stages of the audit log's started record of
// request id.
func startedStages(t *testing.T, d *daemonProc, id string) []audit.Stage {
	t.Helper()
	f, err := os.Open(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec audit.Record
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Kind == audit.KindStarted && rec.ID == id && rec.Run != nil {
			return rec.Run.Stages
		}
	}
	t.Fatalf("no started record of %s in the audit log", id)
	return nil
}

// TestProcSelfCwdLink: a requester's symlink to /proc/self/cwd/usr/bin/zgrep
// named /usr/bin/zgrep when the daemon followed it (its cwd is /), but the
// requester's own usr/bin/zgrep once the run, started in the requester's
// directory, executed it by path. A path through a /proc magic link is
// refused before anyone is asked, and nothing runs. A plain symlink to the
// same system script is still shown with the file it leads to, recorded
// so in the audit log, and runs it.
func TestProcSelfCwdLink(t *testing.T) {
	t.Chdir("/") // the daemon's cwd, as under systemd
	d := approverDaemon(t)
	openToAll(t, d)
	a := attachRaw(t, d)
	msgs := a.prompts()
	agent := addTestUser(t, "rgtda")
	dir := shortDir(t)
	if err := os.Chown(dir, int(agent.uid), int(agent.gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "usr", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "pwned")
	writeFile(t, filepath.Join(dir, "usr", "bin", "zgrep"), "#!/bin/sh\ntouch "+marker+"\necho pwned as $(id -u)\n", &agent)
	if err := os.Symlink("/proc/self/cwd/usr/bin/zgrep", filepath.Join(dir, "zgrep")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/usr/bin/zgrep", filepath.Join(dir, "plain")); err != nil {
		t.Fatal(err)
	}

	ch := askAs(d, agent, []uint32{}, request(map[string]any{"cwd": dir, "pipeline": [][]string{{"./zgrep", "--version"}}}))
	select {
	case r := <-ch:
		wantError(t, r, `stage 1: resolve "./zgrep": a symlink loop, or a path through a /proc magic link, which is refused`)
	case m := <-msgs:
		// Without the refusal: the operator approves what the prompt
		// calls the system's zgrep.
		st := m.Request.Stages[0]
		a.decide(m, true)
		r := <-ch
		t.Fatalf("a path through /proc/self/cwd was put to the operator as %q (%q) and ran: %s", st.Path, st.Target, r.raw)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the requester's script ran")
	}

	id := "plain-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ch = askAs(d, agent, []uint32{}, request(map[string]any{"id": id, "cwd": dir, "pipeline": [][]string{{"./plain", "--version"}}}))
	m := <-msgs
	if m == nil || m.Type != remote.MsgPrompt {
		t.Fatalf("got %+v, want a prompt", m)
	}
	want := approval.Stage{Argv: []string{"./plain", "--version"}, Path: filepath.Join(dir, "plain"), Target: "/usr/bin/zgrep"}
	if st := m.Request.Stages[0]; st.Path != want.Path || st.Target != want.Target {
		t.Errorf("prompt shows %+v, want %+v", st, want)
	}
	if text := approval.Render(m.Request); !strings.Contains(text, "executable: "+want.Path+", which is the file /usr/bin/zgrep") {
		t.Errorf("the prompt does not name the real file:\n%s", text)
	}
	a.decide(m, true)
	r := wantOK(t, <-ch)
	if !strings.HasPrefix(string(r.Stdout), "zgrep (gzip)") {
		t.Errorf("the system's zgrep did not run: %s", r.raw)
	}
	if got := startedStages(t, d, id); len(got) != 1 || got[0].Path != want.Path || got[0].Target != want.Target {
		t.Errorf("audit records stages %v, want path %q target %q", got, want.Path, want.Target)
	}
}

// TestScriptSwappedAtExec: a root-owned #! script in a directory the
// requester owns is approved. The daemon captured it when the request
// came and runs it by its own name, in a mount namespace where the name
// leads to the capture; but the requester can detach that mount by
// renaming another file over the name in its own namespace, which it
// does in a loop all along. Whatever the timing, the file swapped in
// never runs: each run prints what was shown, or is refused as changed
// before the interpreter read a byte. (Without the check that the file
// the interpreter opened is the capture, the swapped-in one runs at
// nearly every try.)
func TestScriptSwappedAtExec(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	openToAll(t, d)
	a := attachRaw(t, d)
	agent := addTestUser(t, "rgtdb")
	dir := shortDir(t)
	if err := os.Chown(dir, int(agent.uid), int(agent.gid)); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "tool")
	writeFile(t, script, "#!/bin/sh\necho shown \"$0\" \"$@\"\n", nil)
	writeFile(t, filepath.Join(dir, "evil"), "#!/bin/sh\necho swapped in, as $(id -u)\n", &agent)

	// The requester's loop: while the file "armed" is there, a fresh copy
	// of its file renamed over the script's name, again and again; while
	// it is not, the file "idle" says no rename is on its way.
	loop := exec.Command("sh", "-c", `cd "$1" && while :; do if [ -e armed ]; then cp evil e.$$ && mv -f e.$$ tool; else touch idle; fi; done`, "sh", dir)
	loop.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: agent.uid, Gid: agent.gid, Groups: []uint32{}}}
	if err := loop.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loop.Process.Kill(); loop.Wait() })
	armed, idle := filepath.Join(dir, "armed"), filepath.Join(dir, "idle")
	disarm := func() {
		os.Remove(armed)
		os.Remove(idle)
		testutil.WaitFor(t, "the requester's loop to rest", 10*time.Second, func() bool {
			_, err := os.Stat(idle)
			return err == nil
		})
	}

	const tries = 8
	refused := 0
	for range tries {
		// The request is made while the name is the script's; the loop
		// starts once the daemon has captured it.
		disarm()
		writeFile(t, script, "#!/bin/sh\necho shown \"$0\" \"$@\"\n", nil)
		ch := askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": [][]string{{script, "a b"}}}))
		p := a.prompt()
		writeFile(t, armed, "", nil)
		if c := p.Request.Stages[0].Content; c == nil || !strings.Contains(string(c.Text), "echo shown") || c.Beside != dir {
			t.Fatalf("prompt shows %+v %+v, want the captured script, and its directory as the requester's", p.Request.Stages[0], c)
		}
		a.decide(p, true)
		r := <-ch
		if m := a.next(); m.Type != remote.MsgResult || r.Status == wire.StatusError && !strings.HasPrefix(m.Outcome, "not run: ") {
			t.Fatalf("got %+v, want the outcome", m)
		}
		switch {
		case r.Status == wire.StatusOK && string(r.Stdout) == "shown "+script+" a b\n":
		case r.Status == wire.StatusError && r.Code == wire.CodeStart && strings.Contains(r.Message, "changed since it was resolved: its name led to another file") && len(r.Stdout) == 0:
			refused++
		default:
			t.Fatalf("got %s, want the script shown run, or the run refused as changed", r.raw)
		}
	}
	t.Logf("%d of %d runs refused as changed, the others ran the captured script", refused, tries)
}

// TestScriptArguments: a #! script only root can change runs by its path,
// as sudo runs it: it gets the argument of its #! line, then its own name
// as the request gave it ($0, from which it finds the files beside it),
// then the request's arguments whole and in order, and no descriptor but
// 0, 1 and 2.
func TestScriptArguments(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "args")
	writeFile(t, script, "#!/bin/sh -u\ncase $- in *u*) echo nounset;; esac\necho \"$0\"\nprintf '<%s>' \"$@\"\necho\nls /proc/$$/fd\n", nil)
	for _, priv := range []bool{true, false} {
		r := wantOK(t, d.send(map[string]any{"privileged": priv, "pipeline": [][]string{{script, "a b", "", "-x", "$HOME", "*"}}}))
		want := "nounset\n" + script + "\n<a b><><-x><$HOME><*>\n"
		if got := string(r.Stdout); !strings.HasPrefix(got, want) {
			t.Fatalf("privileged %v: stdout %q, want it to start with %q", priv, got, want)
		}
		// The shell's own descriptor of the script (it opened it) is 10
		// or so; what it inherited is 0, 1 and 2.
		fds := strings.Fields(strings.TrimPrefix(string(r.Stdout), want))
		for _, fd := range fds {
			if n, _ := strconv.Atoi(fd); n > 2 && n < 10 {
				t.Errorf("privileged %v: the script has descriptors %v", priv, fds)
			}
		}
	}
}

// TestUnprivilegedRunReachesOnlyItsUser: a run that is not privileged
// opens its cwd and executables as its user, not as root. A 0700 directory
// of rgtdx is neither entered nor listed by a run of rgtdy, even in a
// subdirectory anyone may read, and a binary under a 0700 root directory
// is not run; each is refused with a clear error and nothing runs. What
// rgtdy may reach, in its own 0700 home or through a group the kernel
// reports for it, still runs.
func TestUnprivilegedRunReachesOnlyItsUser(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	openToAll(t, d)
	x := addTestUser(t, "rgtdx")
	y := addTestUser(t, "rgtdy")
	base := shortDir(t)
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mkdir := func(path string, mode os.FileMode, owner testUser, gid uint32) {
		t.Helper()
		if err := os.Mkdir(path, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(path, int(owner.uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	private := filepath.Join(base, "x")
	mkdir(private, 0o700, x, x.gid)
	open := filepath.Join(private, "open")
	mkdir(open, 0o755, x, x.gid)
	if err := os.WriteFile(filepath.Join(open, "secret"), []byte("x's secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rootOnly := shortDir(t) // 0700 root
	tool := filepath.Join(rootOnly, "tool")
	b, err := os.ReadFile("/bin/echo")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tool, b, 0o755); err != nil {
		t.Fatal(err)
	}

	asY := func(groups []uint32, cwd string, argv ...string) response {
		return sendAs(t, d.Sock, y.uid, y.gid, groups, request(map[string]any{"privileged": false, "cwd": cwd, "pipeline": [][]string{argv}}))
	}
	wantError(t, asY([]uint32{}, open, "ls"), fmt.Sprintf("cwd %q: permission denied", open))
	wantError(t, asY([]uint32{}, open, "cat", "secret"), fmt.Sprintf("cwd %q: permission denied", open))
	wantError(t, asY([]uint32{}, "/", tool, "ran"), fmt.Sprintf("stage 1: resolve %q: permission denied", tool))
	// rgtdx's group opens nothing of a 0700 directory either.
	wantError(t, asY([]uint32{x.gid}, open, "ls"), fmt.Sprintf("cwd %q: permission denied", open))

	// Legitimate: rgtdy's own private directory, and x's directory
	// shared with x's group when rgtdy's process holds that group.
	home := filepath.Join(base, "y")
	mkdir(home, 0o700, y, y.gid)
	if err := os.WriteFile(filepath.Join(home, "mine"), []byte("y's own\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(home, "mine"), int(y.uid), int(y.gid)); err != nil {
		t.Fatal(err)
	}
	ytool := filepath.Join(home, "tool")
	writeFile(t, ytool, string(b), &y)
	if err := os.Chmod(ytool, 0o700); err != nil {
		t.Fatal(err)
	}
	r := wantOK(t, asY([]uint32{}, home, "cat", "mine"))
	if string(r.Stdout) != "y's own\n" {
		t.Errorf("cat in rgtdy's home: %s", r.raw)
	}
	r = wantOK(t, asY([]uint32{}, home, "./tool", "ran"))
	if string(r.Stdout) != "ran\n" {
		t.Errorf("rgtdy's own binary: %s", r.raw)
	}
	shared := filepath.Join(base, "shared")
	mkdir(shared, 0o750, x, x.gid)
	if err := os.WriteFile(filepath.Join(shared, "note"), []byte("for the group\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(shared, "note"), int(x.uid), int(x.gid)); err != nil {
		t.Fatal(err)
	}
	wantError(t, asY([]uint32{}, shared, "cat", "note"), fmt.Sprintf("cwd %q: permission denied", shared))
	r = wantOK(t, asY([]uint32{x.gid}, shared, "cat", "note"))
	if string(r.Stdout) != "for the group\n" {
		t.Errorf("cat in the group's directory: %s", r.raw)
	}
}
