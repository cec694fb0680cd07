package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/wire"
)

// TestInterpreterCheckedIsTheOneRun: the interpreter whose owner an allow
// rule's check reads is the file the kernel runs for a root script, word
// for word as the kernel splits the #! line (on space and tab only). A
// root script in root's directory names, on its #! line, a root copy of
// sh in a sticky directory followed by a CR (the script was saved with
// CRLF line ends) or an FF; the kernel runs "sh\r" or "sh\f", which the
// requester creates next to root's sh there. Read with every white space
// as a separator, the check would look at root's "sh" and the rule would
// run the requester's file as root. The rule does not decide: a person is
// asked (none is attached: denied). A person who is attached is told the
// interpreter's name, and when they approve, the file the kernel runs is
// the one named.
func TestInterpreterCheckedIsTheOneRun(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "fcag")
	dir := shortDir(t)
	sticky, rootDir := filepath.Join(dir, "t"), filepath.Join(dir, "r")
	for _, p := range []string{dir, sticky, rootDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	rootSh := filepath.Join(sticky, "sh")
	if out, err := exec.Command("cp", "/bin/sh", rootSh).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	// The requester's interpreter says which name the kernel ran it by.
	src := filepath.Join(dir, "agent-interp")
	if err := os.WriteFile(src, []byte("#!/bin/sh\nprintf '%s ran as uid %s\\n' \"$0\" \"$(id -u)\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var policy strings.Builder
	type scriptCase struct{ name, end, script string }
	var scripts []scriptCase
	for _, c := range []scriptCase{{name: "CR", end: "\r"}, {name: "FF", end: "\f"}} {
		end := c.end
		script := filepath.Join(rootDir, c.name)
		if err := os.WriteFile(script, []byte("#!"+rootSh+end+"\nid -u\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		c.script = script
		scripts = append(scripts, c)
		policy.WriteString("allow privileged " + script + "\n")
		// The requester plants its own file at the name the kernel
		// reads: the sticky directory lets it create one, not replace
		// root's.
		cp := exec.Command("cp", src, rootSh+end)
		cp.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: ag.uid, Gid: ag.gid}}
		if out, err := cp.CombinedOutput(); err != nil {
			t.Fatalf("cp as %s: %v: %s", ag.name, err, out)
		}
	}

	d := startDaemon(t, opts{Policy: policy.String()})
	openToAll(t, d)
	as := func(script string) response {
		t.Helper()
		return sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"pipeline": [][]string{{script}}}))
	}
	for _, c := range scripts {
		t.Run(c.name+" not run by the rule", func(t *testing.T) {
			r := as(c.script)
			if r.Status == wire.StatusOK {
				t.Fatalf("allowed by the rule, the requester's interpreter ran: %q", r.Stdout)
			}
			wantNoApprover(t, r)
		})
	}
	t.Run("the person is told the interpreter that runs", func(t *testing.T) {
		a := attachRaw(t, d)
		for _, c := range scripts {
			end, script := c.end, c.script
			// Asked about, not allowed: else no prompt would come.
			chk := sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"pipeline": [][]string{{script}}, "check": true}))
			if chk.Status != wire.StatusOK || chk.Check != wire.CheckAsk {
				t.Fatalf("check: got %s, want %q", chk.raw, wire.CheckAsk)
			}
			ch := make(chan response, 1)
			go func() {
				r, err := trySendAs(d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"pipeline": [][]string{{script}}}))
				if err != nil {
					r.raw = err.Error()
				}
				ch <- r
			}()
			p := promptAfterResults(a)
			a.decide(p, true)
			r := wantOK(t, <-ch)
			ran, _, ok := strings.Cut(string(r.Stdout), " ran as uid 0\n")
			if !ok || ran != rootSh+end {
				t.Fatalf("the kernel ran %q, want the requester's %q", r.Stdout, rootSh+end)
			}
			want := "the interpreter of " + script + ": " + termsafe.Sanitize(ran) + " is owned by uid "
			if !strings.Contains(p.Request.Hint, want) {
				t.Fatalf("the hint does not name the interpreter the kernel ran (%q):\n%s", want, p.Request.Hint)
			}
		}
	})
}

// TestExecuteOnlyScriptInterpreterChecked: a root script that only root
// may read (mode 0711), run as another account by an allow rule, has its
// #! line read all the same: the kernel reads it whoever runs the file,
// and runs the interpreter it names as that account. Read with the
// account's identity, the line could not be read and the check took the
// file for a binary, so the requester's interpreter ran as the account
// with no person asked.
func TestExecuteOnlyScriptInterpreterChecked(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rgeoag")
	runAs := addAccount(t, "rgeorun")
	dir := shortDir(t)
	agentDir, rootDir := filepath.Join(dir, "agent"), filepath.Join(dir, "root")
	for _, p := range []string{dir, agentDir, rootDir} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(agentDir, int(ag.uid), int(ag.gid)); err != nil {
		t.Fatal(err)
	}
	// The requester's interpreter says who ran it.
	interp := filepath.Join(agentDir, "interp")
	if err := os.WriteFile(interp, []byte("#!/bin/sh\nid -u\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(interp, int(ag.uid), int(ag.gid)); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(rootDir, "job")
	if err := os.WriteFile(script, []byte("#!"+interp+"\necho the job\n"), 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(script, 0o711); err != nil { // past the umask
		t.Fatal(err)
	}
	d := startDaemon(t, opts{Policy: "allow privileged,runas=" + runAs.name + " " + script + "\n"})
	openToAll(t, d)
	r := sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"pipeline": [][]string{{script}}, "run_as": runAs.name}))
	if r.Status == wire.StatusOK {
		t.Fatalf("allowed by the rule, the requester's interpreter ran as uid %q: %s", strings.TrimSpace(string(r.Stdout)), r.raw)
	}
	wantNoApprover(t, r)
}

// TestWritableImageRunsFromACopy: an ELF file someone other than root may
// write, run as root, runs from a sealed copy of the file as checked. The
// kernel reads the file at exec, after the daemon's last check of it: the
// file's owner (the requester) rewrote it in between, and another program
// ran as root (a race a red-team review won 8 times in 20). A file of the
// run's own user, run as that user, runs as it is.
func TestWritableImageRunsFromACopy(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rgimag")
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := filepath.Join(dir, "prog")
	if out, err := exec.Command("cp", "/bin/sleep", prog).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	if err := os.Chown(prog, int(ag.uid), int(ag.gid)); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{})
	openToAll(t, d)
	for _, c := range []struct {
		name       string
		uid, gid   uint32
		privileged bool
		copied     bool
	}{
		{"as root", 0, 0, true, true},
		{"as its owner", ag.uid, ag.gid, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := runMarker()
			killAtEnd(t, m)
			go func() {
				_, _ = trySendAs(d.Sock, c.uid, c.gid, []uint32{c.gid}, request(map[string]any{"pipeline": [][]string{{prog, m}}, "privileged": c.privileged}))
			}()
			var pids []int
			waitFor(t, "the run", 10*time.Second, func() bool { pids = procsWith(m); return len(pids) == 1 })
			exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pids[0]))
			if err != nil {
				t.Fatal(err)
			}
			if copied := strings.Contains(exe, "memfd:rootgate-image"); copied != c.copied {
				t.Errorf("the run's executable is %q, want a copy: %v", exe, c.copied)
			}
		})
	}
}
