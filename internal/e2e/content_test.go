package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// mmapEnv makes the test binary the requester's writer (mmapWriter): the
// file named keeps mapped MAP_SHARED, rewritten through the mapping.
const mmapEnv = "ROOTGATE_TEST_MMAP_WRITER"

// mmapWriter maps the file at path shared and writable and dirties it (a
// first write through the mapping, which may update its times), says
// "mapped"; then, at each line "write TEXT" on stdin, writes TEXT over the
// start of the file through the mapping (no write(2): its size, times and
// inode stay as they are) and says "written"; at a line "copy FROM", the
// same with the bytes of the file FROM, which must be as long. It holds
// the mapping until stdin ends.
func mmapWriter(path string) int {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	fi, err := f.Stat()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	m, err := syscall.Mmap(int(f.Fd()), 0, int(fi.Size()), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	// Dirty it now: the first write through the mapping faults, and
	// may update the file's times; later ones do not.
	copy(m[:1], []byte{m[0]})
	fmt.Println("mapped")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if from, ok := strings.CutPrefix(in.Text(), "copy "); ok {
			b, err := os.ReadFile(from)
			if err != nil || len(b) != len(m) {
				fmt.Println("cannot copy", len(b), "bytes over", len(m), err)
				continue
			}
			copy(m, b)
			fmt.Println("written")
			continue
		}
		text, ok := strings.CutPrefix(in.Text(), "write ")
		if !ok {
			continue
		}
		copy(m, strings.ReplaceAll(text, `\n`, "\n"))
		fmt.Println("written")
	}
	return 0
}

// mapper is a running mmapWriter.
type mapper struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startMapper starts mmapWriter on path as u, and waits until the file is
// mapped and dirty.
func startMapper(t *testing.T, u testUser, path string) *mapper {
	t.Helper()
	// The test binary, where the requester may run it.
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(shortDir(t), "writer")
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	var in io.WriteCloser
	var out io.ReadCloser
	// A process another test forks while the copy is still open for
	// writing holds it so until it execs: the exec of the copy fails
	// with ETXTBSY until then.
	if !testutil.Poll(10*time.Second, func() bool {
		cmd = exec.Command(bin)
		cmd.Env = []string{mmapEnv + "=" + path}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}}}
		if in, err = cmd.StdinPipe(); err != nil {
			return true
		}
		if out, err = cmd.StdoutPipe(); err != nil {
			return true
		}
		err = cmd.Start()
		return !errors.Is(err, syscall.ETXTBSY)
	}) || err != nil {
		t.Fatalf("start the requester's writer: %v", err)
	}
	t.Cleanup(func() { in.Close(); cmd.Wait() })
	m := &mapper{t: t, cmd: cmd, in: in, out: bufio.NewScanner(out)}
	m.expect("mapped")
	return m
}

func (m *mapper) expect(what string) {
	m.t.Helper()
	if !m.out.Scan() || m.out.Text() != what {
		m.t.Fatalf("the requester's writer said %q, want %q", m.out.Text(), what)
	}
}

// rewrite writes text over the file through the mapping, and checks that
// the file's size, times and inode did not change: nothing but its bytes
// tells the rewrite.
func (m *mapper) rewrite(path, text string) {
	m.t.Helper()
	var before, after syscall.Stat_t
	if err := syscall.Stat(path, &before); err != nil {
		m.t.Fatal(err)
	}
	fmt.Fprintf(m.in, "write %s\n", strings.ReplaceAll(text, "\n", `\n`))
	m.expect("written")
	if err := syscall.Stat(path, &after); err != nil {
		m.t.Fatal(err)
	}
	if before != after {
		m.t.Fatalf("the rewrite through the mapping changed the file's status:\n%+v\n%+v", before, after)
	}
	if b, _ := os.ReadFile(path); !strings.HasPrefix(string(b), text) {
		m.t.Fatalf("the rewrite did not take: %q", b)
	}
}

// copyOver writes the bytes of the file from over the file at path
// through the mapping, and checks, as rewrite does, that nothing but its
// bytes tells the rewrite. Then the writer lets go of the mapping and
// exits, so that no one holds the file open for writing (an exec of it
// would fail with ETXTBSY): the file is as the requester left it.
func (m *mapper) copyOver(path, from string) {
	m.t.Helper()
	var before, after syscall.Stat_t
	if err := syscall.Stat(path, &before); err != nil {
		m.t.Fatal(err)
	}
	fmt.Fprintf(m.in, "copy %s\n", from)
	m.expect("written")
	m.in.Close()
	if err := m.cmd.Wait(); err != nil {
		m.t.Fatalf("the requester's writer: %v", err)
	}
	if err := syscall.Stat(path, &after); err != nil {
		m.t.Fatal(err)
	}
	if before != after {
		m.t.Fatalf("the rewrite through the mapping changed the file's status:\n%+v\n%+v", before, after)
	}
}

// contentAttack is a script of the requester's, on a tmpfs (where a page
// written through a shared mapping is never written back, so nothing ever
// updates the file's times), and the requester's process holding it
// mapped, dirty.
func contentAttack(t *testing.T, d *daemonProc, name string) (agent testUser, script string, m *mapper) {
	t.Helper()
	agent = addTestUser(t, name)
	dir := testutil.Tmpfs(t, filepath.Join(shortDir(t), "fs"), "1m")
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(agent.uid), int(agent.gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script = filepath.Join(dir, "tool")
	writeFile(t, script, goodScript, &agent)
	openToAll(t, d)
	return agent, script, startMapper(t, agent, script)
}

// The requester's two versions of its script, of one length.
const (
	goodScript = "#!/bin/sh\necho approved\n"
	evilScript = "#!/bin/sh\necho REWRITES\n"
)

// TestGrantBindsContent: a standing grant is given for a script the
// requester can write. The requester then rewrites it through a shared
// mapping it held dirty all along: no size, time or inode changes. The
// grant does not cover the new content: the next request is put to a
// person (who is shown the new text) rather than run unasked. (With the
// grant bound to the file's status alone, the new content ran as root
// with no prompt.)
func TestGrantBindsContent(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := attachRaw(t, d)
	agent, script, m := contentAttack(t, d, "rgmmapg")
	run := map[string]any{"pipeline": [][]string{{script}}}

	ch := askAs(d, agent, []uint32{}, request(run))
	p := a.prompt()
	c := p.Request.Stages[0].Content
	if c == nil || string(c.Text) != goodScript || c.Size != int64(len(goodScript)) || len(c.SHA256) != 64 {
		t.Fatalf("the prompt shows the content %+v, want the script's", c)
	}
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Grant: 600, GrantRunsAnything: true})
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != "approved\n" {
		t.Fatalf("got %s, want the script run", r.raw)
	}
	// The grant holds for the very same content.
	if r := <-askAs(d, agent, []uint32{}, request(run)); r.Status != wire.StatusOK || r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByGrant {
		t.Fatalf("got %s, want the grant to run it again", r.raw)
	}

	m.rewrite(script, evilScript)
	ch = askAs(d, agent, []uint32{}, request(run))
	p = promptAfterResults(a)
	if c := p.Request.Stages[0].Content; c == nil || string(c.Text) != evilScript {
		t.Fatalf("the prompt shows %+v, want the new content", c)
	}
	a.decide(p, false)
	if r := <-ch; r.Status != wire.StatusDenied || strings.Contains(string(r.Stdout), "REWRITE") {
		t.Fatalf("got %s, want it denied by the person asked", r.raw)
	}
}

// TestApprovalBindsContent: the operator is shown the requester's script;
// after that, before the approval, the requester rewrites it through the
// shared mapping it held dirty. What runs is what was shown. (Run from the
// file, which still passed every status check, the new content ran.)
func TestApprovalBindsContent(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := attachRaw(t, d)
	agent, script, m := contentAttack(t, d, "rgmmapa")

	ch := askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": [][]string{{script}}}))
	p := a.prompt()
	if c := p.Request.Stages[0].Content; c == nil || string(c.Text) != goodScript {
		t.Fatalf("the prompt shows %+v, want the script", c)
	}
	m.rewrite(script, evilScript)
	a.decide(p, true)
	r := <-ch
	if r.Status != wire.StatusOK || string(r.Stdout) != "approved\n" {
		t.Fatalf("got %s, want what was shown run", r.raw)
	}
	// The audit log has the hash of what ran.
	found := false
	for _, rec := range records(t, d.Dir) {
		if rec.ID == p.ID && rec.Run != nil && len(rec.Run.Stages) == 1 && rec.Run.Stages[0].SHA256 == p.Request.Stages[0].Content.SHA256 {
			found = true
		}
	}
	if !found {
		t.Errorf("no record of %s holds the content's SHA-256 %s", p.ID, p.Request.Stages[0].Content.SHA256)
	}
}

// imagePrograms compiles a small C program that says "approved-image"
// and the uid it runs as, and returns its bytes and those of another
// program of the very same length: the same image with that string
// replaced by "REWRITTEN-PROG".
func imagePrograms(t *testing.T) (good, evil []byte) {
	t.Helper()
	cc := testutil.NeedTool(t, "gcc", "gcc")
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "prog.c"), filepath.Join(dir, "prog")
	prog := "#include <stdio.h>\n#include <unistd.h>\nint main(void) { printf(\"approved-image uid %d\\n\", (int)geteuid()); return 0; }\n"
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(cc, "-O2", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v: %s", err, out)
	}
	good, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(good, []byte("approved-image")); n != 1 {
		t.Fatalf("the compiled program holds its string %d times, want once", n)
	}
	return good, bytes.Replace(good, []byte("approved-image"), []byte("REWRITTEN-PROG"), 1)
}

// TestApprovalBindsImage: TestApprovalBindsContent for an ELF binary. The
// requester's own program, asked to run as root, is captured when the
// request is planned, and the prompt shows its SHA-256. After that, before
// the approval, the requester rewrites the file in place (same inode) to
// another program of the same length: through a MAP_SHARED mapping it
// held dirty all along (no size, time or inode changes), or with write(2)
// through a descriptor (dd conv=notrunc). What runs, as root, is the
// program shown; the audit record holds its SHA-256. (Run from the file,
// or from a copy of the file made when the run starts, the rewritten
// program ran as root.)
func TestApprovalBindsImage(t *testing.T) {
	t.Parallel()
	good, evil := imagePrograms(t)
	shown := sha256.Sum256(good)
	d := approverDaemon(t, "--prompt-timeout", "30s")
	a := attachRaw(t, d)
	openToAll(t, d)
	agent := addTestUser(t, "rgelfa")
	// A tmpfs, where a page written through a shared mapping is never
	// written back: nothing ever updates the file's times.
	dir := testutil.Tmpfs(t, filepath.Join(shortDir(t), "fs"), "4m")
	if err := os.Chmod(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, int(agent.uid), int(agent.gid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(dir, "other") // the program the requester writes in
	writeFile(t, other, string(evil), &agent)
	for _, how := range []string{"through a shared mapping", "with write(2)"} {
		t.Run(how, func(t *testing.T) {
			tool := filepath.Join(dir, strings.ReplaceAll(how, " ", "-"))
			writeFile(t, tool, string(good), &agent)
			var m *mapper
			if how == "through a shared mapping" {
				m = startMapper(t, agent, tool)
			}
			ch := askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": [][]string{{tool}}}))
			p := promptAfterResults(a)
			c := p.Request.Stages[0].Content
			if c == nil || c.SHA256 != hex.EncodeToString(shown[:]) || c.Size != int64(len(good)) || len(c.Text) != 0 {
				t.Fatalf("the prompt shows the content %+v, want the program's SHA-256 %x and size %d", c, shown, len(good))
			}
			if m != nil {
				m.copyOver(tool, other)
			} else {
				dd := exec.Command("dd", "if="+other, "of="+tool, "conv=notrunc", "status=none")
				dd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: agent.uid, Gid: agent.gid, Groups: []uint32{}}}
				if out, err := dd.CombinedOutput(); err != nil {
					t.Fatalf("dd as the requester: %v: %s", err, out)
				}
			}
			if b, err := os.ReadFile(tool); err != nil || !bytes.Equal(b, evil) {
				t.Fatalf("the rewrite did not take (%v)", err)
			}
			a.decide(p, true)
			r := <-ch
			if r.Status != wire.StatusOK || string(r.Stdout) != "approved-image uid 0\n" {
				t.Fatalf("got %s (stdout %q), want the program shown run as root", r.raw, r.Stdout)
			}
			if st := startedStages(t, d, p.ID); len(st) != 1 || st[0].SHA256 != c.SHA256 {
				t.Errorf("the started record's stages %+v, want the SHA-256 shown, %s", st, c.SHA256)
			}
		})
	}
}

// TestCapturedScriptFindsItsSiblings: a requester's installer, asked as
// ./install.sh from its own directory, runs captured and under the name
// it was asked by, as sudo runs it: $0 is ./install.sh, and the library
// it sources from "$(dirname "$0")" is found. The prompt says that the
// files beside it are the requester's to change.
func TestCapturedScriptFindsItsSiblings(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := attachRaw(t, d)
	openToAll(t, d)
	agent := addTestUser(t, "rgsibl")
	dir := shortDir(t)
	if err := os.Chown(dir, int(agent.uid), int(agent.gid)); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "install.sh"), "#!/bin/sh\n. \"$(dirname \"$0\")/lib.sh\"\necho \"$0 $LIB $(id -u)\"\n", &agent)
	writeFile(t, filepath.Join(dir, "lib.sh"), "LIB=sourced\n", &agent)
	ch := askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": [][]string{{"./install.sh"}}, "cwd": dir}))
	p := a.prompt()
	c := p.Request.Stages[0].Content
	if c == nil || c.Beside != dir {
		t.Fatalf("the prompt shows %+v, want the capture, and its directory as the requester's", c)
	}
	if text := approval.RenderWhole(p.Request); !p.Request.CwdOthers || !strings.Contains(text, "WARNING: others than root may change the files in it") ||
		!strings.Contains(text, "others than root may change the files beside it in "+dir) || !strings.Contains(text, `file 2:`) {
		t.Errorf("the prompt does not show the script and warn of its directory:\n%s", text)
	}
	a.decide(p, true)
	if r := <-ch; r.Status != wire.StatusOK || string(r.Stdout) != "./install.sh sourced 0\n" {
		t.Fatalf("got %s (stdout %q), want the installer run under its name, its library found", r.raw, r.Stdout)
	}
}

// TestCapturesBounded: what the daemon captures for requests not yet run
// is bounded (docs/performance.md, "Memory kept for answers"). A
// requester's own scripts of 12 MiB each, asked to run as root, are
// captured before anyone is asked and held while the person decides: a
// first request of four of them (48 MiB) waits at the approver, and a
// second of two more (24 MiB past the uid's 64 MiB) is answered busy at
// once, saying why, instead of holding another 24 MiB of the daemon's
// memory. Once the first is decided, the second goes to the approver.
func TestCapturesBounded(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := attachRaw(t, d)
	openToAll(t, d)
	agent := addTestUser(t, "rgcapb")
	dir := shortDir(t)
	if err := os.Chown(dir, int(agent.uid), int(agent.gid)); err != nil {
		t.Fatal(err)
	}
	big := "#!/bin/sh\n#" + strings.Repeat("x", 12<<20) + "\necho ran\n"
	var scripts []string
	for i := range 6 {
		f := filepath.Join(dir, fmt.Sprintf("s%d.sh", i))
		writeFile(t, f, big, &agent)
		scripts = append(scripts, f)
	}
	stages := func(s ...string) [][]string {
		var p [][]string
		for _, f := range s {
			p = append(p, []string{f})
		}
		return p
	}
	first := askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": stages(scripts[:4]...)}))
	p := a.prompt()
	if n := len(p.Request.Stages); n != 4 || p.Request.Stages[3].Content == nil {
		t.Fatalf("the first request's prompt has %d stages, the last %+v; want four captured", n, p.Request.Stages[n-1].Content)
	}
	r := <-askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": stages(scripts[4:]...)}))
	if r.Code != wire.CodeBusy || !strings.Contains(r.Message, "files captured for requests not yet run") {
		t.Fatalf("the second request, past the uid's captures: got %s; want busy, saying why", r.raw)
	}
	a.decide(p, false)
	if r := <-first; r.Status != wire.StatusDenied {
		t.Fatalf("the first request: got %s, want denied", r.raw)
	}
	second := askAs(d, agent, []uint32{}, request(map[string]any{"pipeline": stages(scripts[4:]...)}))
	p = a.prompt()
	a.decide(p, true)
	if r := <-second; r.Status != wire.StatusOK || string(r.Stdout) != "ran\n" {
		t.Fatalf("the second request once the first was decided: got %s; want it run", r.raw)
	}
}
