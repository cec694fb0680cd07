package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/pipeline"
)

// fidelityCase is a command line as an agent or an install script types
// it, run by /bin/sh as the test account, in the work tree's root.
type fidelityCase struct {
	line  string
	stdin string
}

// fidelityCorpus is what TestSudoFidelity runs through real sudo and
// through rootgate sudo. ./app holds root's fixtures (appFixtures), ./out
// is the test account's, for its shell's redirections.
var fidelityCorpus = []fidelityCase{
	{line: "sudo true"},
	{line: "sudo false"},
	{line: "sudo id -u"},
	{line: "sudo id -un"},
	{line: "sudo id -Gn"},
	{line: "sudo whoami"},
	{line: "sudo echo hello world"},
	{line: "sudo sh -c 'exit 3'"},
	{line: "sudo sh -c 'echo out; echo err >&2; exit 2'"},
	{line: "sudo printenv HOME USER LOGNAME SHELL"},
	{line: "sudo printenv PATH"},
	{line: `sudo sh -c 'echo "$SUDO_USER"'`},
	{line: "sudo printenv SUDO_USER SUDO_UID SUDO_GID"},
	{line: "sudo printenv SUDO_COMMAND"},
	{line: `sudo sh -c 'echo "$SUDO_COMMAND"' a "b  c" ''`},
	{line: "sudo sh -c 'echo ${#SUDO_COMMAND}' $(seq 1 3000)"},
	{line: "sudo ./app/showcmd.sh one two"},
	{line: "sudo -u nobody id -un"},
	{line: "sudo -u nobody printenv SUDO_USER HOME"},
	{line: "sudo -u nobody -g adm id -un -gn"},
	{line: "sudo -g adm id -un"},
	{line: "sudo pwd"},
	{line: "sudo touch made && ls -ln made"},
	{line: "echo data | sudo tee teed.txt"},
	{line: "sudo sh -c 'echo x > root.txt; chmod 600 root.txt'"},
	{line: "sudo mkdir -p d/e && sudo chmod 700 d && sudo ls -ld d"},
	{line: "sudo cp app/lib.sh copied.sh && sudo chown nobody copied.sh"},
	{line: "sudo rgfid-no-such-command"},
	{line: "sudo ./app/no-such-script"},
	{line: "sudo /nonexistent/cmd arg"},
	{line: "sudo -S id -un", stdin: "hunter2\n"},
	{line: "sudo -S true", stdin: "hunter2\n"},
	{line: "sudo -n true"},
	{line: "sudo -k id -u"},
	{line: "sudo TZ=UTC printenv TZ"},
	{line: "LANG=C.UTF-8 sudo -E printenv LANG"},
	{line: "TZ=UTC sudo --preserve-env=TZ printenv TZ"},
	{line: "sudo cat /etc/hostname"},
	{line: "sudo wc -c < /etc/passwd"},
	{line: "sudo seq 1 5 | tail -2"},
	{line: "sudo sh -c 'test -t 0; echo $?'"},
	{line: "sudo sh -c 'sleep 0.1 & echo backgrounded'"},
	{line: "sudo env -i /usr/bin/printenv; echo $?"},
	{line: "sudo ls /root >/dev/null; echo $?"},
	{line: "sudo test -w /etc/shadow; echo $?"},
	{line: "sudo stat -c %U:%a /etc/shadow"},
	{line: "sudo timeout 3 tail -f app/lib.sh"},
	{line: "sudo sh -c 'cat > fromstdin.txt'", stdin: "line one\nline two\n"},
	{line: "sudo sh -c 'kill -TERM $$'; echo $?"},
	{line: "sudo npm --version"},
	{line: "sudo npx --version"},
	{line: "sudo corepack --version"},
	{line: "sudo ./app/install.sh"},
	{line: "sudo ./app/main.py"},
	{line: "sudo ./app/configure --prefix=/usr"},
	{line: "sudo ./app/findbin.pl"},
	// The same, from a tree the account owns (an agent's checkout): the
	// daemon captures each script and a person is asked (here, an
	// approver that approves everything).
	{line: "sudo ./mine/install.sh"},
	{line: "sudo ./mine/main.py"},
	{line: "sudo ./mine/configure --prefix=/usr"},
	{line: "sudo ./mine/findbin.pl"},
	{line: "sudo ./mine/showcmd.sh one two"},
	{line: "cd mine && sudo ./install.sh"},
	{line: "sudo \"$PWD/mine/install.sh\""},
	{line: "sudo head -c 30000000 /dev/zero > out/big; echo $?; wc -c < out/big"},
	{line: "sudo seq 1 3000000 > out/seq; echo $?; wc -c < out/seq"},
	{line: "sudo yes | head -1"},
	{line: "sudo yes | head -1 >/dev/null; echo done"},
	{line: "sudo sh -c 'yes; echo \"yes ended: $?\" >&2' | head -1"},
	{line: "timeout 3 sudo tail -f app/lib.sh; echo $?"},
	{line: "sudo -u nobody env | sort"},
	{line: "printf 'hunter2\\nrest\\n' | sudo -S cat"},
	{line: "sudo -v; echo $?"},
}

// fidelityByDesign are the lines that differ from sudo on purpose, each
// with the reason; they are required to differ too, so that the list
// stays true.
var fidelityByDesign = map[string]string{
	"sudo -u nobody env | sort": "SUDO_HOME: rootgate sets it as sudo 1.9.16 does, and the sudo of Debian 12 (1.9.13) and of Ubuntu 24.04 (1.9.15) predates it; " +
		"MAIL: rootgate sets none, as no mail is read by a run; " +
		"TERM: sudo sets \"unknown\" where its caller has none, rootgate passes TERM only when the request sends it",
	"printf 'hunter2\\nrest\\n' | sudo -S cat": "with a NOPASSWD rule sudo reads no password and the command gets all of stdin; " +
		"rootgate sudo -S always drops the first line, as sudo does when it asks for a password, since a password must never reach the daemon",
	"sudo -v; echo $?": "rootgate sudo -v says on stderr that rootgated answers and that nothing is cached; sudo validates silently",
}

// securePathByDesign returns fidelityByDesign, with the lines whose PATH
// differs where this machine's sudoers sets a secure_path other than
// rootgate's fixed search path (docs/protocol.md): Ubuntu's adds
// /snap/bin.
func securePathByDesign(t *testing.T) map[string]string {
	t.Helper()
	byDesign := maps.Clone(fidelityByDesign)
	b, err := os.ReadFile("/etc/sudoers")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^Defaults\s+secure_path="?([^"\n]*)"?$`).FindSubmatch(b)
	if m == nil || string(m[1]) == pipeline.SearchPath {
		return byDesign
	}
	why := fmt.Sprintf("PATH: rootgate's is its fixed search path %s, this machine's sudo's its secure_path %s", pipeline.SearchPath, m[1])
	byDesign["sudo printenv PATH"] = why
	byDesign["sudo -u nobody env | sort"] += "; " + why
	return byDesign
}

// appFixtures are scripts that find files next to themselves, the way
// installers, configure and Perl and Python programs do: root's in ./app,
// where only root can change them or a directory above them, and the
// test account's in ./mine.
var appFixtures = map[string]string{
	"lib.sh":     "greeting() { echo \"hello from lib.sh\"; }\n",
	"install.sh": "#!/bin/sh\nset -e\n. \"$(dirname \"$0\")/lib.sh\"\ngreeting\necho \"installing as $(id -un) for $SUDO_USER\"\n",
	"showcmd.sh": "#!/bin/sh\necho \"$0|$SUDO_COMMAND\"\n",
	"helper.py":  "def hello():\n    return 'hello from helper.py'\n",
	"main.py":    "#!/usr/bin/python3\nimport os, helper\nprint(helper.hello(), os.path.basename(__file__))\n",
	"configure": "#!/bin/sh\n# a stand-in for an autoconf configure: it finds its sources by $0\n" +
		"srcdir=`echo \"$0\" | sed 's,[^/]*$,,'`\nsrcdir=${srcdir:-.}\n" +
		"test -f \"$srcdir/configure.ac\" || { echo \"configure: error: cannot find sources in $srcdir\" >&2; exit 1; }\n" +
		"echo \"checking for $1... $(cat \"$srcdir/configure.ac\")\"\n",
	"configure.ac":  "AC_INIT(rgfid)",
	"findbin.pl":    "#!/usr/bin/perl\nuse FindBin;\nuse lib \"$FindBin::Bin/lib\";\nuse Helper;\nprint Helper::hello(), \"\\n\";\n",
	"lib/Helper.pm": "package Helper;\nsub hello { return 'hello from Helper.pm' }\n1;\n",
}

// fidelityPolicy allows what the sudoers rule of the test account does:
// any command, as any account and group.
const fidelityPolicy = `allow any,env=*
allow privileged,runas=*,env=*
allow privileged,runas=*,rungroup=*,env=*
`

// fidelityResult is what a command line did.
type fidelityResult struct {
	code           int
	stdout, stderr string
	files          string // the work tree as fidelityTree lists it
	done           bool   // it ended within the case's bound
}

// TestSudoFidelity runs each line of fidelityCorpus through real sudo and
// through rootgate sudo, as the same account (one with a NOPASSWD rule
// for sudo, a daemon whose policy allows everything for rootgate), in the
// same work tree (one per line) made anew each time, and requires the same exit status,
// stdout, stderr (program names aside) and file effects, but for the
// lines listed as differing, which must differ.
func TestSudoFidelity(t *testing.T) {
	if _, err := exec.LookPath("sudo"); err != nil {
		t.Fatal("sudo is not installed: run the README's test command, which installs it")
	}
	const name = "rgfid"
	addRunAsAccount(t, name)
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	sudoers := "/etc/sudoers.d/rgfid-test"
	if err := os.WriteFile(sudoers, []byte(name+" ALL=(ALL:ALL) NOPASSWD: ALL\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(sudoers) })

	dir := testutil.ShortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: dir, Args: []string{"--exec-timeout", "20s"}, Policy: fidelityPolicy})
	if err := os.Chmod(d.Sock, 0o666); err != nil {
		t.Fatal(err)
	}
	autoApprove(t, d.ApproverSock())
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rgtest.Rootgate(t), filepath.Join(bin, "sudo")); err != nil {
		t.Fatal(err)
	}
	// Each line runs in a work tree of its own (root's, under a
	// directory only root can change), made anew for each run, so that
	// lines run side by side: a few at a time, within the daemon's
	// per-uid limits.
	run := func(t *testing.T, work string, c fidelityCase, path string) fidelityResult {
		t.Helper()
		makeFidelityTree(t, work, uid, gid)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", c.line)
		cmd.Dir = work
		cmd.Env = []string{"PATH=" + path, "HOME=" + u.HomeDir, "USER=" + name, "LOGNAME=" + name, "ROOTGATE_SOCKET=" + d.Sock, "ROOTGATE_REASON=fidelity"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.Stdin = strings.NewReader(c.stdin)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		r := fidelityResult{stdout: o.String(), stderr: e.String(), done: ctx.Err() == nil}
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			r.code = ee.ExitCode()
		case err != nil:
			t.Fatalf("%s: %v", c.line, err)
		}
		r.files = fidelityTree(t, work)
		return r
	}
	byDesignHere := securePathByDesign(t)
	seen := map[string]bool{}
	slots := make(chan struct{}, 3)
	t.Run("lines", func(t *testing.T) {
		for i, c := range fidelityCorpus {
			if seen[c.line] {
				t.Fatalf("%q is twice in the corpus", c.line)
			}
			seen[c.line] = true
			why, byDesign := byDesignHere[c.line]
			t.Run(strconv.Itoa(i+1), func(t *testing.T) {
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
				work, err := os.MkdirTemp("/srv", "rgfid-")
				if err != nil {
					t.Fatal(err)
				}
				defer os.RemoveAll(work)
				real := run(t, work, c, "/usr/bin:/bin")
				rg := run(t, work, c, bin+":/usr/bin:/bin")
				diff := fidelityDiff(real, rg)
				switch {
				case byDesign:
					if diff == "" {
						t.Errorf("%s: now matches sudo: take it off the list of lines that differ", c.line)
					} else {
						t.Logf("%s: differs, as listed (%s): %s", c.line, why, diff)
					}
				case diff != "":
					t.Errorf("%s: differs from sudo: %s", c.line, diff)
				}
			})
		}
	})
	for line := range byDesignHere {
		if !seen[line] {
			t.Errorf("%q is listed but not in the corpus", line)
		}
	}
	if len(fidelityCorpus)-len(byDesignHere) < 40 {
		t.Errorf("fewer than 40 lines are required to match sudo")
	}
}

// makeFidelityTree makes work anew: root's fixtures in ./app, the
// account's in ./mine, and its empty ./out.
func makeFidelityTree(t *testing.T, work string, uid, gid int) {
	t.Helper()
	ents, err := os.ReadDir(work)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(work, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(work, 0o755); err != nil {
		t.Fatal(err)
	}
	// One time for every fixture, so that what Python caches of them
	// (its .pyc holds the source's mtime) is the same in each run.
	when := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tree := range []string{"app", "mine"} {
		for rel, text := range appFixtures {
			p := filepath.Join(work, tree, rel)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			mode := os.FileMode(0o644)
			if strings.HasPrefix(text, "#!") {
				mode = 0o755
			}
			if err := os.WriteFile(p, []byte(text), mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, when, when); err != nil {
				t.Fatal(err)
			}
		}
	}
	// ./mine and all in it are the account's.
	if err := filepath.WalkDir(filepath.Join(work, "mine"), func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "out")
	if err := os.Mkdir(out, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(out, uid, gid); err != nil {
		t.Fatal(err)
	}
}

// fidelityTree lists every file under work: its path, type and mode,
// owner, and the SHA-256 of a regular file's content, or a link's target.
func fidelityTree(t *testing.T, work string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(work, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		what := ""
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			what = fmt.Sprintf("%d bytes %x", len(b), sha256.Sum256(b))
		case fi.Mode()&fs.ModeSymlink != 0:
			what, _ = os.Readlink(p)
		}
		rel, _ := filepath.Rel(work, p)
		lines = append(lines, fmt.Sprintf("%s %v %d:%d %s", rel, fi.Mode(), st.Uid, st.Gid, what))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// programName is the name a message starts with, sudo's or rootgate's.
var programName = regexp.MustCompile(`(?m)^(sudo|rootgate)( sudo)?: `)

// fidelityDiff says how rg differs from real; "" when it does not.
func fidelityDiff(real, rg fidelityResult) string {
	var d []string
	if !rg.done || !real.done {
		d = append(d, fmt.Sprintf("ended in time: sudo %v, rootgate %v", real.done, rg.done))
	}
	if real.code != rg.code {
		d = append(d, fmt.Sprintf("exit status: sudo %d, rootgate %d", real.code, rg.code))
	}
	if real.stdout != rg.stdout {
		d = append(d, fmt.Sprintf("stdout: sudo %q, rootgate %q", clipText(real.stdout), clipText(rg.stdout)))
	}
	if a, b := programName.ReplaceAllString(real.stderr, "PROG: "), programName.ReplaceAllString(rg.stderr, "PROG: "); a != b {
		d = append(d, fmt.Sprintf("stderr: sudo %q, rootgate %q", clipText(real.stderr), clipText(rg.stderr)))
	}
	if real.files != rg.files {
		a, b := strings.Split(real.files, "\n"), strings.Split(rg.files, "\n")
		onlyA := slices.DeleteFunc(slices.Clone(a), func(l string) bool { return slices.Contains(b, l) })
		onlyB := slices.DeleteFunc(slices.Clone(b), func(l string) bool { return slices.Contains(a, l) })
		d = append(d, fmt.Sprintf("files: sudo's alone %q, rootgate's alone %q", onlyA, onlyB))
	}
	return strings.Join(d, "; ")
}

// clipText is s, or its first and last 200 bytes when longer.
func clipText(s string) string {
	if len(s) <= 400 {
		return s
	}
	return s[:200] + "…" + s[len(s)-200:]
}

// autoApprove attaches an approver to the daemon's approver socket that
// approves every request put to it, until the test ends.
func autoApprove(t *testing.T, sock string) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	r := bufio.NewReader(c)
	if err := remote.WriteMessage(c, &remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: "fidelity"}); err != nil {
		t.Fatal(err)
	}
	if m, err := remote.ReadMessage(r, remote.MaxDaemonLine); err != nil || m.Type != remote.MsgWelcome {
		t.Fatalf("attach: %+v, %v", m, err)
	}
	go func() {
		yes := true
		for {
			m, err := remote.ReadMessage(r, remote.MaxDaemonLine)
			if err != nil {
				return
			}
			switch m.Type {
			case remote.MsgPing:
				err = remote.WriteMessage(c, &remote.Message{Type: remote.MsgPong})
			case remote.MsgPrompt:
				err = remote.WriteMessage(c, &remote.Message{Type: remote.MsgDecision, ID: m.ID, Hash: m.Hash, Approve: &yes})
			}
			if err != nil {
				return
			}
		}
	}()
}
