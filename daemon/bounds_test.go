package daemon_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/testutil"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sys/unix"
)

// The tests of this file hold the daemon to bounds of memory and CPU
// time under hostile load (docs/performance.md, "Bounds under hostile
// load"), measured from /proc, never by the clock.

// clockTick is the unit of /proc/PID/stat's utime and stime (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTime is the CPU time (user and system) pid has used so far.
func cpuTime(t testing.TB, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// The fields after the command's name, which may hold spaces, in ( ).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * clockTick
}

// peakRSS is pid's peak resident set size (VmHWM), in KiB.
func peakRSS(t testing.TB, pid int) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.Fields(v)[0])
			return n
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// raceFactor scales a bound of CPU or memory for a daemon built with the
// race detector, which makes every memory access several times dearer
// and keeps shadow memory besides.
func raceFactor() int {
	if rgtest.Race() {
		return 8
	}
	return 1
}

// nestedLines are 1 MiB request lines (newline included) of the shapes
// that cost a parser most: a valid request's beginning, then arrays or
// objects opened to the end of the line.
func nestedLines() map[string]string {
	prefix := fmt.Sprintf(`{"id":%q,"time":%q,"pipeline":`, uuid.NewString(), time.Now().UTC().Format(time.RFC3339Nano))
	fill := func(unit string) string {
		n := (wire.MaxLine - 1 - len(prefix)) / len(unit)
		return prefix + strings.Repeat(unit, n) + "\n"
	}
	return map[string]string{
		"arrays":  fill("["),
		"objects": fill(`{"a":`),
		// Not nested: many tokens, for the walk's cost per token.
		"flat":   prefix + `[["rootgate-test-absent",` + strings.Repeat(`"a",`, (wire.MaxLine-len(prefix)-40)/4) + `"a"]]}` + "\n",
		"env":    strings.TrimSuffix(prefix, `"pipeline":`) + `"pipeline":[["true"]],"env":{` + envKeys(wire.MaxLine-len(prefix)-40) + `}}` + "\n",
		"stages": prefix + "[" + strings.Repeat(`[],`, (wire.MaxLine-len(prefix)-40)/3) + `[]]}` + "\n",
	}
}

// TestNestedLineCost: a 1 MiB line of any shape costs the daemon a pass
// over it, not work (and stack) per level of nesting: each is answered
// invalid_request within 100 ms of the daemon's CPU, and the four at once
// add a few MiB to its peak RSS. Before the depth bound, one line of
// arrays took 43 s of CPU and 615 MB.
func TestNestedLineCost(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	pid := d.Cmd.Process.Pid
	d.alive()
	for name, l := range nestedLines() {
		if len(l) > wire.MaxLine {
			t.Fatalf("%s: a line of %d bytes", name, len(l))
		}
		cpu0 := cpuTime(t, pid)
		r := d.sendRaw(l)
		cpu := cpuTime(t, pid) - cpu0
		t.Logf("%s (%d bytes): %v of CPU; %s", name, len(l), cpu, strings.TrimSpace(r.raw))
		wantShape(t, name, r)
		if limit := 100*time.Millisecond*time.Duration(raceFactor()) + clockTick; cpu > limit {
			t.Errorf("%s: the daemon used %v of CPU for one line; the bound is %v", name, cpu, limit)
		}
	}
	// Four at once, of each shape: the peak grows by the lines' buffers
	// and the flat ones' arguments (a few MiB each), not more.
	hwm0 := peakRSS(t, pid)
	var wg sync.WaitGroup
	for range 4 {
		for name, l := range nestedLines() {
			wg.Go(func() {
				c, err := net.Dial("unix", d.Sock)
				if err != nil {
					t.Error(err)
					return
				}
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(60 * time.Second))
				if _, err := c.Write([]byte(l)); err != nil {
					t.Error(err)
					return
				}
				wantShape(t, name, readResponse(t, c))
			})
		}
	}
	wg.Wait()
	grew := peakRSS(t, pid) - hwm0
	t.Logf("%d lines of 1 MiB at once: peak RSS %d → %d KiB", 4*len(nestedLines()), hwm0, hwm0+grew)
	if limit := 32 << 10 * max(1, raceFactor()/2); grew > limit {
		t.Errorf("%d lines of 1 MiB at once raised the daemon's peak RSS by %d KiB; the bound is %d KiB", 4*len(nestedLines()), grew, limit)
	}
	d.alive()
}

// wantShape checks the answer to nestedLines()[name]: the nested ones are
// refused for their depth, the flat one (a valid request) for its
// program, which does not exist.
func wantShape(t *testing.T, name string, r response) {
	t.Helper()
	code, msg := wire.CodeInvalidRequest, (&wire.DepthError{}).Error()
	switch name {
	case "flat":
		code, msg = wire.CodeNotFound, `stage 1: executable not found: "rootgate-test-absent"`
	case "env":
		code, msg = wire.CodeInvalidRequest, "env must have at most 32768 keys"
	case "stages":
		code, msg = wire.CodeInvalidRequest, "pipeline must have 1 to 16 stages"
	}
	if r.Status != wire.StatusError || r.Code != code || r.Message != msg {
		t.Errorf("%s: got %.200s, want error %s %q", name, r.raw, code, msg)
	}
}

// TestSlowReaderServed: a client that reads its answer slowly but
// steadily reads all of it; only one that reads nothing for
// --stall-timeout is dropped (TestStallDeadline). Scaled down: a 2 s
// timeout and 40 KiB/s, as 10 s and 8 KiB/s; before, the timeout bounded
// each write of the answer, which waits until the reader has taken three
// quarters of the socket's buffer (3.75 s here), and the reader was
// dropped.
func TestSlowReaderServed(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Args: []string{"--stall-timeout", "2s"}})
	const size = 320 << 10
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(request(map[string]any{"id": "slow-reader", "pipeline": [][]string{{"head", "-c", strconv.Itoa(size), "/dev/zero"}}}))); err != nil {
		t.Fatal(err)
	}
	// 1 KiB every 25 ms, to the end of the answer's line.
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	var got []byte
	buf := make([]byte, 1<<10)
	for !bytes.HasSuffix(got, []byte("}\n")) {
		<-tick.C
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("after %d bytes: %v\n%s", len(got), err, d.Stderr)
		}
	}
	lines := bytes.Split(bytes.TrimSuffix(got, []byte("\n")), []byte("\n"))
	var r wire.Response
	if err := json.Unmarshal(lines[len(lines)-1], &r); err != nil {
		t.Fatalf("the answer: %v", err)
	}
	if r.Status != wire.StatusOK || len(r.Stdout) != size {
		t.Fatalf("got status %s with %d bytes of stdout, want ok with %d", r.Status, len(r.Stdout), size)
	}
}

// TestReplayTornWrite: with the runtime directory's file system full, a
// request whose replay record cannot be written whole is refused, and the
// half line it leaves does not swallow the next record: after a SIGKILL,
// the next daemon refuses every request that was answered, the one
// recorded once there was room again included. Before, that one's line
// was appended to the half line and dropped at the restart, so its
// request could run again.
func TestReplayTornWrite(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	run := testutil.Tmpfs(t, filepath.Join(dir, "run"), "64k")
	d := startDaemon(t, opts{Dir: dir})
	ping := func(d *daemonProc, id string) response {
		return d.send(map[string]any{"id": id, "action": "ping", "pipeline": nil})
	}
	// One record begins the file's first page; fill the file system,
	// then send pings with long ids until one cannot be recorded: its
	// line goes past that page, and only its beginning is written.
	if r := ping(d, "before-the-full-disk"); r.Status != wire.StatusOK {
		t.Fatalf("first ping: %s", r.raw)
	}
	answered := []string{"before-the-full-disk"}
	filler, err := os.Create(filepath.Join(run, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = filler.Write(make([]byte, 4<<10))
	}
	filler.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("200 requests recorded on a full file system")
		}
		id := fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 120))
		r := ping(d, id)
		if r.Status == wire.StatusOK {
			answered = append(answered, id)
			continue
		}
		wantError(t, r, wire.ErrReplayRecord.Error())
		break
	}
	if err := os.Remove(filepath.Join(run, "filler")); err != nil {
		t.Fatal(err)
	}
	// Room again: this one is recorded, and the daemon killed.
	if r := ping(d, "after-the-full-disk"); r.Status != wire.StatusOK {
		t.Fatalf("with room again: %s", r.raw)
	}
	answered = append(answered, "after-the-full-disk")
	if err := d.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-d.Done()

	d2 := startDaemon(t, opts{Dir: dir})
	for _, id := range answered {
		wantError(t, ping(d2, id), wire.DuplicateError(id).Error())
	}
	t.Logf("%d requests answered before and after the full file system, each refused again after a SIGKILL", len(answered))
}

// TestOutOfDescriptors: a daemon whose descriptor limit is 64, flooded
// with requests, answers each one it cannot serve busy, never with a
// claim about the request: before, 842 of 1,000 got `cwd "/" is not an
// existing directory`, and others `executable not found` and `no such
// user`, recorded so in the audit log. A soft limit under the hard one is
// raised to it.
func TestOutOfDescriptors(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Prefix: []string{"prlimit", "--nofile=64:64"}})
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 12 {
				over := map[string]any{"pipeline": [][]string{{"sh", "-c", "exec cat", "x"}, {"cat"}, {"true"}}, "stdin": "eA=="}
				if i%3 == 1 {
					over["run_as"] = "root"
				}
				if g%2 == 0 {
					over["cwd"] = "/tmp"
				}
				r := d.send(over)
				mu.Lock()
				counts[r.Code]++
				mu.Unlock()
				if r.Status != wire.StatusOK && r.Code != wire.CodeBusy {
					t.Errorf("got %s, want ok or busy", strings.TrimSpace(r.raw))
				}
			}
		})
	}
	wg.Wait()
	t.Logf("answers by code (\"\": ok): %v", counts)
	d.alive()
	audit, err := os.ReadFile(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, claim := range []string{`not an existing directory`, `executable not found`, `no such user`, `no user named`, `stage 1: `, `stage 2: `, `stage 3: `} {
		if n := bytes.Count(audit, []byte(claim)); n > 0 {
			t.Errorf("the audit log holds %d records saying %s", n, claim)
		}
	}

	raised := startDaemon(t, opts{Prefix: []string{"prlimit", "--nofile=64:4096"}})
	limits, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", raised.Cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	// The Go runtime raises it, to 4095 of 4096 here.
	if !regexp.MustCompile(`(?m)^Max open files +409[56] +4096 `).Match(limits) {
		t.Errorf("the soft limit of open files was not raised to the hard one:\n%s", limits)
	}
}

// memoryCgroup is a cgroup v1 memory controller's group limited to limit
// bytes, removed when t ends, or "" when this machine has none (cgroup v2
// machines run the daemon's runs in their own cgroups; this test needs
// the daemon itself in one). pid is moved into it: what it allocates
// from then on is charged to it.
func memoryCgroup(t *testing.T, pid int, limit int64) string {
	t.Helper()
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		return ""
	}
	dir, err := os.MkdirTemp(root, "rgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Back to the root, then the empty group removed.
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, p := range strings.Fields(string(b)) {
				_ = os.WriteFile(filepath.Join(root, "cgroup.procs"), []byte(p), 0)
			}
		}
		if err := os.Remove(dir); err != nil {
			t.Errorf("memory cgroup: %v", err)
		}
	})
	for _, f := range []struct{ name, v string }{
		{"memory.limit_in_bytes", strconv.FormatInt(limit, 10)},
		{"cgroup.procs", strconv.Itoa(pid)},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.name), []byte(f.v), 0); err != nil {
			t.Fatalf("%s: %v", f.name, err)
		}
	}
	return dir
}

// TestMemoryBoundUnderFlood: 16 requests at once whose runs write 16 MiB
// of stderr each, with the daemon in a 256 MiB memory cgroup: the output
// kept for answers not yet written stays within its budget (--max-runs ×
// 16 MiB: 128 MiB), the daemon's peak RSS within the bound documented
// (the budget and 64 MiB), and the daemon lives. Before, a finished run
// gave its slot back with its 16 MiB still kept until its answer was
// written, 16 such requests peaked at 277 MB, and the cgroup's OOM killer
// took the daemon.
func TestMemoryBoundUnderFlood(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	pid := d.Cmd.Process.Pid
	limit := int64(256<<20) * int64(raceFactor()) / 2
	if raceFactor() == 1 {
		limit = 256 << 20
	}
	cg := memoryCgroup(t, pid, limit)
	if cg == "" {
		t.Log("no cgroup v1 memory controller here: the peak RSS alone is checked")
	}
	const n = 16
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c, err := net.Dial("unix", d.Sock)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
			if _, err := c.Write([]byte(request(map[string]any{"id": fmt.Sprintf("flood-%d-%s", i, uuid.NewString()), "pipeline": [][]string{{"sh", "-c", "head -c 16777216 /dev/zero >&2"}}}))); err != nil {
				t.Error(err)
				return
			}
			// Read it all, keeping only its beginning and end.
			var head, tail []byte
			buf := make([]byte, 64<<10)
			for {
				m, err := c.Read(buf)
				if len(head) < 200 {
					head = append(head, buf[:min(m, 200)]...)
				}
				tail = append(tail, buf[:m]...)
				if len(tail) > 4<<10 {
					tail = tail[len(tail)-(4<<10):]
				}
				if err != nil {
					break
				}
			}
			if !bytes.HasSuffix(tail, []byte("}\n")) || !bytes.Contains(head, []byte(`"status":"ok"`)) {
				t.Errorf("request %d: the answer is %q … %q", i, head, tail[max(0, len(tail)-300):])
			}
		})
	}
	wg.Wait()
	select {
	case <-d.Done():
		t.Fatalf("the daemon died: %v\n%s", d.Err(), d.Stderr)
	default:
	}
	d.alive()
	hwm := peakRSS(t, pid)
	bound := (keptBudgetMiB + 64) << 10 * raceFactor()
	if raceFactor() > 1 {
		bound = (keptBudgetMiB + 64) << 10 * 3
	}
	var usage string
	if cg != "" {
		b, _ := os.ReadFile(filepath.Join(cg, "memory.max_usage_in_bytes"))
		usage = strings.TrimSpace(string(b))
	}
	t.Logf("%d requests of 16 MiB of stderr at once: daemon peak RSS %d KiB (bound %d KiB); cgroup peak %s bytes of %d", n, hwm, bound, usage, limit)
	if hwm > bound {
		t.Errorf("the daemon's peak RSS is %d KiB; the bound is %d KiB", hwm, bound)
	}
}

// keptBudgetMiB is the budget of output kept for answers not yet written
// of a daemon with the default --max-runs (8 × 16 MiB).
const keptBudgetMiB = 128

// TestAuditFileNotFollowed: a symlink at the audit log's path (to a file
// the daemon would chmod 0600 and append to), or a file there of another
// uid, makes the daemon refuse to start rather than write through it.
func TestAuditFileNotFollowed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		plant func(t *testing.T, path, target string)
	}{
		{"symlink", func(t *testing.T, path, target string) {
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"another uid's file", func(t *testing.T, path, target string) {
			if err := os.Rename(target, path); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(path, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := shortDir(t)
			if err := os.WriteFile(filepath.Join(dir, "policy"), []byte("allow any\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			target := filepath.Join(dir, "target")
			if err := os.WriteFile(target, []byte("not a log\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			path := auditPath(dir)
			c.plant(t, path, target)
			d := startDaemonNoWait(t, dir)
			if err := d.WaitExit(30 * time.Second); err == nil {
				t.Fatalf("the daemon started\n%s", d.Stderr)
			}
			if !strings.Contains(d.Stderr.String(), "audit") {
				t.Errorf("the daemon did not say why: %s", d.Stderr)
			}
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(path); fi.Mode().Perm() != 0o644 || string(b) != "not a log\n" {
				t.Errorf("the file at the audit path was changed: mode %v, %q", fi.Mode().Perm(), b)
			}
		})
	}
}

// TestRefusedPeerReadsAnswer: a peer answered busy without its request
// read, or too_large with the rest of its line unread, reads that answer,
// not ECONNRESET: the daemon half-closes and reads what it sent before
// closing. Before, 605 of 1,000 busy peers in a flood got the reset.
func TestRefusedPeerReadsAnswer(t *testing.T) {
	t.Parallel()
	// Started without a probe connection, whose end could still hold the
	// slot when the test's first connection comes.
	d := startDaemon(t, opts{NoProbe: true, Args: []string{"--max-conns", "1", "--first-byte-timeout", "60s", "--read-timeout", "60s"}})
	// The one slot is held by a connection that has sent part of its
	// line: once the daemon has read those bytes (none left in the
	// socket's queue), it serves the connection, or it refused it and
	// then the refusal is there to read.
	hold, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if _, err := hold.Write([]byte(`{"id":`)); err != nil {
		t.Fatal(err)
	}
	rc, err := hold.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var queued, readable int
	waitFor(t, "the daemon to read the holding connection's first bytes", 10*time.Second, func() bool {
		_ = rc.Control(func(fd uintptr) {
			queued, _ = unix.IoctlGetInt(int(fd), unix.SIOCOUTQ)
			readable, _, _ = unix.Recvfrom(int(fd), make([]byte, 1), unix.MSG_DONTWAIT|unix.MSG_PEEK)
		})
		return queued == 0
	})
	if readable > 0 {
		t.Fatal("the daemon refused its first connection")
	}
	if r := d.send(map[string]any{"action": "ping", "pipeline": nil}); r.Code != wire.CodeBusy {
		t.Fatalf("with the slot held, a ping is answered %s; want busy", r.raw)
	}
	// Each sends its whole request, without a half-close, then reads.
	answer := func(line []byte) ([]byte, error) {
		c, err := net.Dial("unix", d.Sock)
		if err != nil {
			return nil, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		_, _ = c.Write(line) // the daemon may have closed its end by now
		return io.ReadAll(c)
	}
	refused := func(line []byte, want string) {
		if got, err := answer(line); err != nil || !bytes.Contains(got, []byte(want)) {
			t.Errorf("read %q, %v; want the answer %s", got, err, want)
		}
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 25 {
				refused([]byte(request(map[string]any{"reason": strings.Repeat("r", 4000)})), `"code":"busy"`)
			}
		})
	}
	wg.Wait()
	hold.Close()
	// A line too long, with the slot free, is answered too_large, and
	// its peer reads that. The slot is free a moment after the hold's
	// connection ends: until then the line is refused busy, and its
	// sender, past what a refusal drains, may be reset.
	var got []byte
	waitFor(t, "the slot to be free", 10*time.Second, func() bool {
		got, err = answer(append(bytes.Repeat([]byte("x"), wire.MaxLine+200<<10), '\n'))
		return !bytes.Contains(got, []byte(`"code":"busy"`))
	})
	if err != nil || !bytes.Contains(got, []byte(`"code":"too_large"`)) {
		t.Errorf("read %q, %v; want the answer too_large", got, err)
	}
}

// TestFrozenAuditLog: while the audit log's file system is frozen
// (fsfreeze), where every write to it blocks, a ping is answered pong and
// a run refused for its record (nothing runs), each within the client's
// 10 s for its first line, and the daemon serves on once it thaws, its
// log whole. Before, both waited for the thaw: rootgate run for its
// progress line's 375 s.
func TestFrozenAuditLog(t *testing.T) {
	t.Parallel()
	mnt := ext4Mount(t)
	log := filepath.Join(mnt, "audit.jsonl")
	d := startDaemon(t, opts{Args: []string{"--audit", log, "--audit-min-free", "1M"}})
	d.alive()
	if out, err := exec.Command("fsfreeze", "-f", mnt).CombinedOutput(); err != nil {
		t.Fatalf("fsfreeze: %v\n%s", err, out)
	}
	thawed := false
	thaw := func() {
		if !thawed {
			thawed = true
			if out, err := exec.Command("fsfreeze", "-u", mnt).CombinedOutput(); err != nil {
				t.Errorf("fsfreeze -u: %v\n%s", err, out)
			}
		}
	}
	t.Cleanup(thaw)
	// The client's deadline for a first line (internal/client).
	within := client.DefaultAnswerWithin
	ask := func(over map[string]any) response {
		c, err := net.Dial("unix", d.Sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(within))
		if _, err := c.Write([]byte(request(over))); err != nil {
			t.Fatal(err)
		}
		return readResponse(t, c)
	}
	if r := ask(map[string]any{"action": "ping", "pipeline": nil}); r.Message != "pong" {
		t.Errorf("ping with the audit log frozen: %s", r.raw)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	r := ask(map[string]any{"pipeline": [][]string{{"touch", marker}}})
	if r.Status != wire.StatusError || r.Message != wire.ErrAudit.Error() {
		t.Errorf("a run with the audit log frozen: %s", r.raw)
	}
	thaw()
	if _, err := os.Stat(marker); err == nil {
		t.Error("the run ran without its records")
	}
	wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"true"}}}))
	d.Stop()
	if out, err := exec.Command(rootgateBin, "audit", "verify", "--file", log).CombinedOutput(); err != nil {
		t.Errorf("the audit log does not verify: %v\n%s", err, out)
	}
}

// ext4Mount mounts a fresh 32 MiB ext4 file system (one that fsfreeze
// can freeze) on a loop device, unmounted when t ends.
func ext4Mount(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v\n%s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("no loop device here: mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	return mnt
}

// envKeys is JSON object members "X0":"", "X1":"", … of at most n bytes.
func envKeys(n int) string {
	var b strings.Builder
	for i := 0; ; i++ {
		m := fmt.Sprintf(`"X%d":""`, i)
		if b.Len()+len(m)+1 > n {
			return b.String()
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(m)
	}
}
