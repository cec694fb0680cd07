package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/wire"
)

// TestPolicyAllowNeedsRootsFile: an allow rule never runs, as root, a
// file that someone other than root may change. The rule names a command
// (a bare name, found in the fixed search path, or a path); the requester,
// who can write the file found there or a directory on its real path (a
// /usr/local/sbin entry linking into its own tree, as `npm -g` leaves
// one under a prefix handed over to the user), or the interpreter a root
// script's #! line names, writes whatever it likes there and sends the
// request the rule allows. The rule does not decide
// it: a person is asked (with no one attached, it is denied), and a check
// says a person would be; the person is told which rule matched and why
// it did not decide. Root's file in root's directory, and
// the requester's own file run as the requester, are still allowed.
func TestPolicyAllowNeedsRootsFile(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rt2ag")
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	mkdir := func(p string, uid uint32) {
		t.Helper()
		if err := os.Mkdir(p, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, int(uid), -1); err != nil {
			t.Fatal(err)
		}
	}
	script := func(p string, uid uint32) {
		t.Helper()
		if err := os.WriteFile(p, []byte("#!/bin/sh\nid -u\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, int(uid), -1); err != nil {
			t.Fatal(err)
		}
	}
	agentDir, rootDir := filepath.Join(dir, "agent"), filepath.Join(dir, "root")
	mkdir(agentDir, ag.uid)
	mkdir(rootDir, 0)
	agentTool := filepath.Join(agentDir, "tool")    // the requester's own file
	rootInAgents := filepath.Join(agentDir, "root") // root's file in the requester's directory
	rootTool := filepath.Join(rootDir, "tool")      // root's file in root's directory
	script(agentTool, ag.uid)
	script(rootInAgents, 0)
	script(rootTool, 0)
	// Root's script in root's directory, run by the requester's own copy
	// of sh, which it may replace by anything.
	agentSh := filepath.Join(agentDir, "sh")
	sh, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(agentSh, sh, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(agentSh, int(ag.uid), -1); err != nil {
		t.Fatal(err)
	}
	viaAgentSh := filepath.Join(rootDir, "via")
	if err := os.WriteFile(viaAgentSh, []byte("#!"+agentSh+"\nid -u\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Root's script whose interpreter is root's script in root's
	// directory, whose own interpreter is the requester's sh: the kernel
	// follows the chain, and so must the check.
	wrap, nested := filepath.Join(rootDir, "wrap"), filepath.Join(rootDir, "nested")
	if err := os.WriteFile(wrap, []byte("#!"+agentSh+"\nid -u\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(nested, []byte("#!"+wrap+"\nid -u\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// An entry of the search path leading into the requester's tree.
	name := "rt2tool-" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	link := filepath.Join("/usr/local/sbin", name)
	if err := os.Symlink(agentTool, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })

	d := startDaemon(t, opts{Policy: "allow privileged " + name + "\n" +
		"allow privileged " + rootInAgents + "\n" +
		"allow privileged " + rootTool + "\n" +
		"allow privileged " + viaAgentSh + "\n" +
		"allow privileged " + nested + "\n" +
		"allow unprivileged " + agentTool + "\n"})
	openToAll(t, d)
	as := func(over map[string]any) response {
		t.Helper()
		return sendAs(t, d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(over))
	}
	for _, tc := range []struct{ what, argv0 string }{
		{"a bare name found through a search path link to the requester's file", name},
		{"root's file in the requester's directory", rootInAgents},
		{"root's script run by the requester's interpreter", viaAgentSh},
		{"root's script run by root's script run by the requester's interpreter", nested},
	} {
		t.Run(tc.what, func(t *testing.T) {
			r := as(map[string]any{"pipeline": [][]string{{tc.argv0}}})
			if r.Status == wire.StatusOK {
				t.Fatalf("allowed by the rule, ran as uid %q: %s", strings.TrimSpace(string(r.Stdout)), r.raw)
			}
			wantNoApprover(t, r)
			c := as(map[string]any{"pipeline": [][]string{{tc.argv0}}, "check": true})
			if c.Status != wire.StatusOK || c.Check != wire.CheckAsk {
				t.Fatalf("check: got %s, want %q", c.raw, wire.CheckAsk)
			}
		})
	}
	t.Run("root's file in root's directory is allowed", func(t *testing.T) {
		r := wantOK(t, as(map[string]any{"pipeline": [][]string{{rootTool}}}))
		if string(r.Stdout) != "0\n" {
			t.Fatalf("stdout %q, want 0", r.Stdout)
		}
	})
	t.Run("the person asked is told why", func(t *testing.T) {
		a := startApprover(t, d.asock(), 0)
		a.See("attached to rootgated")
		ch := make(chan response, 1)
		go func() {
			r, err := trySendAs(d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"id": "owner-hint", "pipeline": [][]string{{name}}}))
			if err != nil {
				r.raw = err.Error()
			}
			ch <- r
		}()
		a.See("owner-hint")
		a.pageToEnd()
		want := "(allow privileged " + name + ") allows this command, but not the file that runs: "
		if txt := a.Screen.Text(); !strings.Contains(txt[strings.LastIndex(txt, "rootgate approval request"):], want) {
			t.Fatalf("the prompt does not say %q:\n%s", want, txt)
		}
		a.wantAsked(ch, "owner-hint")
	})
	t.Run("the requester's own file run as the requester is allowed", func(t *testing.T) {
		r := wantOK(t, as(map[string]any{"pipeline": [][]string{{agentTool}}, "privileged": false}))
		if want := strconv.Itoa(int(ag.uid)) + "\n"; string(r.Stdout) != want {
			t.Fatalf("stdout %q, want %q", r.Stdout, want)
		}
	})
}
