package e2e

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sys/unix"
)

// cgroupParent is a test daemon's own --cgroup; the test fails where
// this machine has no writable cgroup v2 (CI has one), with one line
// saying so.
func cgroupParent(t *testing.T) string {
	t.Helper()
	p, err := rgtest.CgroupParentErr(t)
	if p == "" {
		t.Fatal(testutil.NoCgroupV2(err))
	}
	return p
}

// TestCgroupOrphansOfCrashedDaemon: a daemon killed with SIGKILL mid-run
// leaves its run's escaped process (its stage leader dies with it, by
// PR_SET_PDEATHSIG; the escapee does not) in the run's cgroup. The next
// daemon on the same --cgroup kills it at start, removes the cgroup and
// records the run as orphaned, under its request id.
func TestCgroupOrphansOfCrashedDaemon(t *testing.T) {
	t.Parallel()
	parent := cgroupParent(t)
	dir := shortDir(t)
	args := []string{"--cgroup", parent}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	m := runMarker()
	killAtEnd(t, m)
	// An id that is no directory name as it is: it is escaped for the
	// cgroup's name and read back.
	id := "crash/" + m
	script := "(setsid env -i sleep " + m + " >/dev/null 2>&1 &); exec sleep " + m
	// Sent without waiting for an answer, which never comes.
	c, err := net.Dial("unix", a.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(request(map[string]any{"id": id, "pipeline": [][]string{{"sh", "-c", script}}}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the escapee and the stage", 10*time.Second, func() bool { return len(procsWith(m)) == 2 })
	if runs := subdirs(parent); len(runs) != 1 || runs[0] != "crash%2F"+m {
		t.Fatalf("cgroups %q in %s, want the run's", runs, parent)
	}
	if run := filepath.Join(parent, "crash%2F"+m); !cgroupMarked(run) {
		t.Fatalf("the run's cgroup %s is not marked as rootgated's (%s)", run, cgroupMark)
	}
	a.Cmd.Process.Kill()
	<-a.Done()
	waitFor(t, "the stage leader's death", 10*time.Second, func() bool { return len(procsWith(m)) == 1 })
	if len(procsWith(m)) != 1 {
		t.Fatal("the escapee died with the daemon: nothing left to test")
	}

	b := startDaemon(t, opts{Dir: dir, Args: args})
	if left := procsWith(m); len(left) > 0 {
		t.Errorf("the crashed daemon's orphan %v survives the next daemon's start", left)
	}
	if runs := subdirs(parent); len(runs) != 0 {
		t.Errorf("cgroups left in %s: %v", parent, runs)
	}
	rs := trail(t, dir, id)
	if k := kinds(rs); k != "received decided started "+string(audit.KindOrphaned) {
		t.Fatalf("records of %s: %s", id, k)
	}
	if o := rs[3]; !strings.Contains(o.Error, "unknown") || o.Peer != nil {
		t.Errorf("orphaned record: error %q, peer %v", o.Error, o.Peer)
	}
	if !strings.Contains(b.Stderr.String(), "event=orphaned") {
		t.Errorf("the orphan is not in the log:\n%s", b.Stderr)
	}
	b.alive()
}

// TestCgroupOrphanLongID: a run whose id is too long for a cgroup's name
// (its cgroup is named for the id's start) and whose daemon is killed
// mid-run is recorded orphaned once, under its whole id: the cgroup found
// at the next start is killed, and only the trail's started record
// without an end makes the record.
func TestCgroupOrphanLongID(t *testing.T) {
	t.Parallel()
	parent := cgroupParent(t)
	dir := shortDir(t)
	args := []string{"--cgroup", parent}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	m := runMarker()
	killAtEnd(t, m)
	// Each '/' is three bytes in the cgroup's name: past its limit.
	id := m + strings.Repeat("/", wire.MaxIDLen-len(m))
	blockedRun(t, a, id, m)
	if runs := subdirs(parent); len(runs) != 1 || !strings.HasPrefix(runs[0], m+"%2F") || len(runs[0]) >= 3*len(id) {
		t.Fatalf("cgroups %q in %s, want the run's, its name cut", runs, parent)
	}
	a.Cmd.Process.Kill()
	<-a.Done()
	waitFor(t, "the run's death with its daemon", 10*time.Second, func() bool { return len(procsWith(m)) == 0 })

	b := startDaemon(t, opts{Dir: dir, Args: args})
	if runs := subdirs(parent); len(runs) != 0 {
		t.Errorf("cgroups left in %s: %v", parent, runs)
	}
	orphans := orphanedRecords(t, dir)
	if len(orphans) != 1 || orphans[0].ID != id {
		t.Fatalf("orphaned records %s, want one for %s", recordIDs(orphans), id)
	}
	if !strings.Contains(orphans[0].Error, "killed") || !strings.Contains(orphans[0].Error, "unknown") {
		t.Errorf("orphaned record's error %q: not that its cgroup was killed", orphans[0].Error)
	}
	if k := kinds(trail(t, dir, id)); k != "received decided started "+string(audit.KindOrphaned) {
		t.Errorf("records of %s: %s", id, k)
	}
	b.alive()
}

// TestCgroupLeftoversOfEndedRuns: run cgroups a killed daemon leaves
// behind are killed and removed at the next start, but only a run whose
// trail has a started record and no end is recorded orphaned, once. Not
// one whose end is recorded (the daemon died before removing its cgroup:
// here a cgroup left with a process in it for a run that finished), nor
// one that never started (here an empty cgroup for an id with no
// records).
func TestCgroupLeftoversOfEndedRuns(t *testing.T) {
	t.Parallel()
	parent := cgroupParent(t)
	dir := shortDir(t)
	args := []string{"--cgroup", parent}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	m, stray := runMarker(), runMarker()+"1"
	killAtEnd(t, m, stray)
	ended := "ended-" + m
	wantOK(t, a.send(map[string]any{"id": ended, "pipeline": [][]string{{"true"}}}))
	waitTrail(t, dir, ended, "received decided started finished")
	left := filepath.Join(parent, ended) // the id is its cgroup's name as it is
	// The daemon removes the run's cgroup once it has answered.
	waitFor(t, "the ended run's cgroup removed", 10*time.Second, func() bool { _, err := os.Stat(left); return os.IsNotExist(err) })
	if err := os.Mkdir(left, 0o755); err != nil {
		t.Fatal(err)
	}
	markCgroup(t, left) // as the daemon marks each run's cgroup it makes
	sleeper := exec.Command("sleep", stray)
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	reaped := make(chan struct{})
	go func() { sleeper.Wait(); close(reaped) }()
	if err := os.WriteFile(filepath.Join(left, "cgroup.procs"), []byte(strconv.Itoa(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	never := "never-" + m
	if err := os.Mkdir(filepath.Join(parent, never), 0o755); err != nil {
		t.Fatal(err)
	}
	markCgroup(t, filepath.Join(parent, never))
	// And a run killed with its daemon: started, no end.
	lost := "lost-" + m
	blockedRun(t, a, lost, m)
	if runs := subdirs(parent); len(runs) != 3 {
		t.Fatalf("cgroups %q in %s, want 3", runs, parent)
	}
	a.Cmd.Process.Kill()
	<-a.Done()
	waitFor(t, "the run's death with its daemon", 10*time.Second, func() bool { return len(procsWith(m)) == 0 })

	b := startDaemon(t, opts{Dir: dir, Args: args})
	select {
	case <-reaped:
	case <-time.After(10 * time.Second):
		t.Error("the process left in the ended run's cgroup survives the next daemon's start")
	}
	if runs := subdirs(parent); len(runs) != 0 {
		t.Errorf("cgroups left in %s: %v", parent, runs)
	}
	if orphans := orphanedRecords(t, dir); len(orphans) != 1 || orphans[0].ID != lost {
		t.Errorf("orphaned records %s, want one, for %s", recordIDs(orphans), lost)
	}
	if k := kinds(trail(t, dir, ended)); k != "received decided started finished" {
		t.Errorf("records of %s: %s", ended, k)
	}
	if k := kinds(trail(t, dir, never)); k != "" {
		t.Errorf("records of %s: %s", never, k)
	}
	for _, id := range []string{ended, never, lost} {
		said := slices.ContainsFunc(strings.Split(b.Stderr.String(), "\n"), func(l string) bool {
			return strings.Contains(l, "killed and removed a run's cgroup") && strings.Contains(l, "id="+id)
		})
		if !said {
			t.Errorf("the daemon's log does not say it killed %s's cgroup:\n%s", id, b.Stderr)
		}
	}
	b.alive()
}

// cgroupMark is the extended attribute, set to "1", by which rootgated
// knows a cgroup for one it made.
const cgroupMark = "user.rootgate.run"

// markCgroup marks the cgroup at dir as rootgated marks each it makes.
func markCgroup(t *testing.T, dir string) {
	t.Helper()
	if err := unix.Setxattr(dir, cgroupMark, []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
}

// cgroupMarked reports whether the cgroup at dir has rootgated's mark.
func cgroupMarked(dir string) bool {
	buf := make([]byte, 8)
	n, err := unix.Getxattr(dir, cgroupMark, buf)
	return err == nil && string(buf[:n]) == "1"
}

// newCgroup makes the cgroup dir; rgtest.CgroupParent's cleanup removes
// it, with what is left in it.
func newCgroup(t *testing.T, dir string) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// cgroupSleeper is a sleep the test started in a cgroup.
type cgroupSleeper struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// sleepIn starts a sleep inside the cgroup at dir (CLONE_INTO_CGROUP).
func sleepIn(t *testing.T, dir string) *cgroupSleeper {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := &cgroupSleeper{cmd: exec.Command("sleep", "3600"), done: make(chan struct{})}
	s.cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(f.Fd()), Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.cmd.Process.Kill(); <-s.done })
	return s
}

// survived ends the sleep with SIGTERM and reports whether that is what
// ended it: false when something killed it before (cgroup.kill's SIGKILL).
func (s *cgroupSleeper) survived(t *testing.T) bool {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("a sleep outlives SIGTERM")
	}
	ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM
}

// killed waits for the sleep to be killed with SIGKILL by someone else.
func (s *cgroupSleeper) killed(t *testing.T) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the sleep in a crashed daemon's run cgroup survives the next daemon's start")
	}
	if ws, ok := s.cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("the sleep ended with %v, want SIGKILL", s.cmd.ProcessState)
	}
}

// refusedStart runs rootgated with args (and a private socket, runtime
// directory, policy and audit log) and wants it to exit by itself
// without ever listening; it returns the exit code (-1 when it serves
// instead) and what it wrote.
func refusedStart(t *testing.T, args ...string) (int, string) {
	t.Helper()
	dir := shortDir(t)
	d := newDaemon(t, dir)
	d.Cmd = exec.Command(rootgated, append([]string{"--socket", d.Sock, "--approver-socket", "", "--runtime-dir", filepath.Join(dir, "run"), "--policy", filepath.Join(dir, "policy"), "--audit", auditPath(dir)}, args...)...)
	d.Start()
	waitFor(t, "rootgated to exit", 30*time.Second, func() bool {
		select {
		case <-d.Done():
			return true
		default:
			return strings.Contains(d.Stderr.String(), "msg=serving")
		}
	})
	select {
	case <-d.Done():
	default:
		t.Errorf("rootgated started and serves:\n%s", d.Stderr)
		return -1, d.Stderr.String()
	}
	if _, err := os.Lstat(d.Sock); err == nil {
		t.Error("it listened before refusing")
	}
	return d.exited(time.Second), d.Stderr.String() // it has exited
}

// TestCgroupForeignRefused: a --cgroup directory holding a cgroup the
// daemon did not make (here another service's, with a process in it; in
// life a mistyped --cgroup, or /sys/fs/cgroup/system.slice) stops the
// daemon at start with exit 78, a configuration error systemd does not
// restart, naming it; the process in it lives on and its cgroup stays.
// A daemon that took every cgroup there for a leftover run of its own
// would kill it.
func TestCgroupForeignRefused(t *testing.T) {
	t.Parallel()
	parent := cgroupParent(t)
	foreign := newCgroup(t, filepath.Join(parent, "other.service"))
	s := sleepIn(t, foreign)
	code, log := refusedStart(t, "--cgroup", parent)
	if code != 78 {
		t.Errorf("exit %d, want 78\n%s", code, log)
	}
	want := "rootgated: error: --cgroup: " + parent + " holds cgroups rootgated did not make (" + foreign + "): "
	if !strings.Contains(log, want) || !strings.Contains(log, "--cgroup-shared") {
		t.Errorf("no %q (and the way out) in:\n%s", want, log)
	}
	if !s.survived(t) {
		t.Error("the daemon killed a process in a cgroup it did not make")
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("the foreign cgroup: %v", err)
	}
	if cgroupMarked(foreign) {
		t.Error("the foreign cgroup was marked as rootgated's")
	}
}

// TestCgroupForeignShared: with --cgroup-shared the daemon starts beside
// a foreign cgroup and leaves it alone, at start and at its stop, while a
// crashed daemon's marked run cgroup next to it is killed and removed.
// A request whose id is the foreign cgroup's name gets a cgroup of its
// own: the requester cannot have the daemon take the foreign one over.
func TestCgroupForeignShared(t *testing.T) {
	t.Parallel()
	parent := cgroupParent(t)
	foreign := newCgroup(t, filepath.Join(parent, "other.service"))
	alien := sleepIn(t, foreign)
	left := newCgroup(t, filepath.Join(parent, "left-"+runMarker()))
	markCgroup(t, left)
	orphan := sleepIn(t, left)

	d := startDaemon(t, opts{Args: []string{"--cgroup", parent, "--cgroup-shared"}})
	orphan.killed(t)
	if _, err := os.Stat(left); err == nil {
		t.Errorf("the crashed daemon's run cgroup %s is left", left)
	}
	r := wantOK(t, d.send(map[string]any{"id": "other.service", "pipeline": [][]string{{"cat", "/proc/self/cgroup"}}}))
	if !strings.HasSuffix(strings.TrimSpace(string(r.Stdout)), "/other.service~2") {
		t.Errorf("the run's cgroup: %q, want other.service~2", r.Stdout)
	}
	d.Stop()
	if !alien.survived(t) {
		t.Error("the daemon killed a process in a cgroup it did not make")
	}
	if runs := subdirs(parent); len(runs) != 1 || runs[0] != "other.service" || cgroupMarked(foreign) {
		t.Errorf("cgroups %q in %s (the foreign one marked: %v), want the foreign one alone, unmarked", runs, parent, cgroupMarked(foreign))
	}
}

// TestCgroupMarkInUserNamespace: root of a user namespace (a container
// without CAP_SYS_ADMIN over the host) can mark the cgroups it makes, so
// a directory named works there (the start-up probe makes and marks one)
// rather than stopping the daemon: the mark is a user.* attribute, which
// the cgroup's owner may set, not a trusted.* one, which it may not.
// (Runs cannot start in such a namespace here: no setgroups.)
//
// Group rootgate exists for the test (as it does on any machine where the
// .deb was once installed: purge keeps it) and has no gid in the
// namespace: the daemon must still start, with its socket root's alone
// and a warning saying why, instead of failing its chown.
func TestCgroupMarkInUserNamespace(t *testing.T) {
	t.Parallel()
	testutil.LockGroup(t)
	if _, err := lookupGroup("rootgate"); err != nil {
		if out, err := exec.Command("groupadd", "--system", "rootgate").CombinedOutput(); err != nil {
			t.Fatalf("groupadd: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("groupdel", "rootgate").Run() })
	}
	parent := cgroupParent(t)
	d := startDaemon(t, opts{Prefix: []string{"unshare", "--user", "--map-root-user"}, Args: []string{"--cgroup", parent}})
	if want := "cgroup: " + parent + ": runs contained"; !strings.Contains(d.Stderr.String(), want) {
		t.Errorf("no %q:\n%s", want, d.Stderr)
	}
	if want := "group rootgate (gid "; !strings.Contains(d.Stderr.String(), want) || !strings.Contains(d.Stderr.String(), "the socket is root's alone") {
		t.Errorf("no warning that the socket is root's alone:\n%s", d.Stderr)
	}
	// Seen from outside the namespace, its root is uid 0.
	fi, err := os.Stat(d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode %v, want 0600", fi.Mode().Perm())
	}
}

// TestCgroupUnusableDirectory: a --cgroup directory the daemon cannot use
// (not cgroup2, missing, relative, held by another daemon) stops it at
// start with exit 78 and says why: runs are never contained less than
// the operator asked. Only the default, auto, falls back
// (TestCgroupFallback).
func TestCgroupUnusableDirectory(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		dir  func(t *testing.T) (dir, why string)
	}{
		{"not cgroup2", func(t *testing.T) (string, string) {
			dir := t.TempDir()
			return dir, dir + ": not in a cgroup2 file system"
		}},
		{"missing", func(t *testing.T) (string, string) {
			dir := filepath.Join(cgroupParent(t), "no", "such")
			return dir, dir + ": mkdir " + dir + ": no such file or directory"
		}},
		{"relative", func(t *testing.T) (string, string) {
			return "rootgate-runs", "rootgate-runs: not an absolute path"
		}},
		{"in use", func(t *testing.T) (string, string) {
			dir := cgroupParent(t)
			startDaemon(t, opts{Args: []string{"--cgroup", dir}})
			return dir, dir + ": in use by another rootgated"
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir, why := c.dir(t)
			code, log := refusedStart(t, "--cgroup", dir)
			if code != 78 {
				t.Errorf("exit %d, want 78\n%s", code, log)
			}
			if want := "rootgated: error: --cgroup: " + why; !strings.Contains(log, want) {
				t.Errorf("no %q in:\n%s", want, log)
			}
			if strings.Contains(log, "cgroup: none") {
				t.Errorf("it fell back:\n%s", log)
			}
		})
	}
}

// orphanedRecords is the orphaned records in the audit log of the daemon in dir.
func orphanedRecords(t *testing.T, dir string) []*audit.Record {
	t.Helper()
	var out []*audit.Record
	for _, r := range records(t, dir) {
		if r.Kind == audit.KindOrphaned {
			out = append(out, r)
		}
	}
	return out
}

// recordIDs lists the request ids of rs.
func recordIDs(rs []*audit.Record) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// TestCgroupUsage: the answer and the finished record of a busy run
// carry the CPU time its cgroup counted.
func TestCgroupUsage(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	id := "busy-" + runMarker()
	r := wantOK(t, d.send(map[string]any{"id": id, "pipeline": [][]string{{"sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"}}}))
	u := r.Usage
	if u == nil || u.CPUUsec <= 0 || u.UserUsec+u.SystemUsec <= 0 {
		t.Fatalf("usage %+v in %s", u, r.raw)
	}
	if !strings.Contains(r.raw, `"usage":{"cpu_usec":`) {
		t.Errorf("usage not in the answer's line: %s", r.raw)
	}
	rs := waitTrail(t, d.Dir, id, "received decided started finished")
	au := rs[3].Result.Usage
	if au == nil || au.CPUUsec != u.CPUUsec || au.UserUsec != u.UserUsec || au.SystemUsec != u.SystemUsec {
		t.Errorf("finished record's usage %+v, answer's %+v", au, u)
	}
	// rootgate audit show says it too.
	out, err := exec.Command(rootgateBin, "audit", "show", "--file", auditPath(d.Dir)).CombinedOutput()
	if want := "usage:     cpu " + (time.Duration(u.CPUUsec) * time.Microsecond).String() + " (user "; err != nil || !strings.Contains(string(out), want) {
		t.Errorf("audit show: %v, no %q in:\n%s", err, want, out)
	}
	// memory.peak only where the memory controller is.
	ctl, _ := cgroup.Controllers(filepath.Dir(d.cgroup(t)))
	if has := slices.Contains(ctl, "memory"); has != (u.MemoryPeak != nil) {
		t.Errorf("memory controller %v, memory_peak %v", has, u.MemoryPeak)
	}
}

// cgroup is the --cgroup a test daemon was started with.
func (d *daemonProc) cgroup(t *testing.T) string {
	t.Helper()
	i := slices.Index(d.Cmd.Args, "--cgroup")
	if i < 0 || i+1 >= len(d.Cmd.Args) {
		t.Fatalf("no --cgroup in %q", d.Cmd.Args)
	}
	return filepath.Join(d.Cmd.Args[i+1], "x")
}

// TestCgroupStartupLine: the daemon says at start where runs' cgroups go
// and which limits it can enforce, and why not.
func TestCgroupStartupLine(t *testing.T) {
	t.Parallel()
	parent := cgroupParent(t)
	d := startDaemon(t, opts{Args: []string{"--cgroup", parent}})
	ctl, err := cgroup.Controllers(parent)
	if err != nil {
		t.Fatal(err)
	}
	want := "cgroup: " + parent + ": runs contained; limits: "
	for _, c := range []struct{ limit, controller string }{{"memory", "memory"}, {"tasks", "pids"}} {
		if slices.Contains(ctl, c.controller) {
			want += c.limit + " yes, "
		} else {
			want += c.limit + " no (no " + c.controller + " controller in the cgroup v2 tree at " + parent + "), "
		}
	}
	want = strings.TrimSuffix(want, ", ")
	if !strings.Contains(d.Stderr.String(), want) {
		t.Errorf("start-up log lacks %q:\n%s", want, d.Stderr)
	}
}

// TestCgroupFallback: with no usable cgroup (turned off, or the default,
// auto, in a cgroup that was not delegated to the daemon: here a test
// cgroup it is started in, without a --cgroup flag), the daemon says so
// loudly at start and runs are still contained the fallback way: an
// escapee that keeps its environment is killed by the sweep. Only a
// directory named is all or nothing (TestCgroupUnusableDirectory).
func TestCgroupFallback(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ arg, why string }{
		"none":          {"none", "turned off (--cgroup none)"},
		"not delegated": {"", ": not delegated to rootgated (Delegate=yes in its unit)"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			o := opts{Args: []string{"--cgroup", c.arg}}
			why := c.why
			if c.arg == "" {
				// Started in a cgroup of its own under the test's, which
				// is neither the tree's root nor marked delegated.
				cg := cgroupParent(t)
				o = opts{DefaultCgroup: true, Prefix: []string{"sh", "-c", `echo $$ >"$0/cgroup.procs" && exec "$@"`, cg}}
				why = cg + why
			}
			d := startDaemon(t, o)
			log := d.Stderr.String()
			if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "cgroup: none (") || !strings.Contains(log, why) || !strings.Contains(log, "outlives its run") {
				t.Errorf("no fallback warning naming %q:\n%s", why, log)
			}
			m := runMarker()
			r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"sh", "-c", "setsid sleep " + m + " >/dev/null 2>&1 & echo started"}}}))
			if r.Usage != nil {
				t.Errorf("usage without a cgroup: %+v", r.Usage)
			}
			noSurvivors(t, m)
		})
	}
}

// TestCgroupLimits: a limit the runs' cgroups cannot enforce stops the
// daemon at start, saying which and why; one it can is set on the run's
// cgroup. (This development machine's cgroup v2 has no controllers: here
// the refusal is what is tested; where they are, the limit.)
func TestCgroupLimits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ flag, value, limit, controller, file, want string }{
		{"--run-tasks-max", "100", "tasks", "pids", "pids.max", "100"},
		{"--run-memory-max", "64M", "memory", "memory", "memory.max", "67108864"},
	} {
		t.Run(c.limit, func(t *testing.T) {
			t.Parallel()
			parent := cgroupParent(t)
			ctl, err := cgroup.Controllers(parent)
			if err != nil {
				t.Fatal(err)
			}
			args := []string{"--cgroup", parent, c.flag, c.value}
			if !slices.Contains(ctl, c.controller) {
				dir := shortDir(t)
				cmd := exec.Command(rootgated, append([]string{"--socket", filepath.Join(dir, "s"), "--approver-socket", "", "--runtime-dir", filepath.Join(dir, "run"), "--policy", filepath.Join(dir, "policy"), "--audit", filepath.Join(dir, "audit.jsonl")}, args...)...)
				out, err := cmd.CombinedOutput()
				want := "limits cannot be enforced here: " + c.limit + " (no " + c.controller + " controller"
				if err == nil || !strings.Contains(string(out), want) {
					t.Fatalf("rootgated %s %s: %v, want a refusal with %q:\n%s", c.flag, c.value, err, want, out)
				}
				if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 78 {
					t.Errorf("rootgated %s %s: %v, want exit 78, a configuration error systemd does not restart", c.flag, c.value, err)
				}
				if _, err := os.Stat(filepath.Join(dir, "s")); err == nil {
					t.Error("it listened before refusing")
				}
				return
			}
			d := startDaemon(t, opts{Args: args})
			r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"sh", "-c", `cat "/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/` + c.file + `"`}}}))
			if got := strings.TrimSpace(string(r.Stdout)); got != c.want {
				t.Errorf("%s = %q, want %s", c.file, got, c.want)
			}
		})
	}
}

// subdirs lists the cgroups in dir.
func subdirs(dir string) []string {
	ents, _ := os.ReadDir(dir)
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names
}

// TestCgroupPolicyLimits: an allow rule's tasks= qualifier limits the run
// it allows. Where the limit cannot be enforced (this machine's cgroup v2
// has no pids controller; and without a cgroup at all) the daemon warns
// at start and refuses the requests the rule allows, recorded as failed:
// they never run without the limit.
func TestCgroupPolicyLimits(t *testing.T) {
	t.Parallel()
	for _, path := range containments {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, opts{Policy: "allow any,tasks=50 sh ...\nallow any,env=*\n", Args: path.args})
			script := []string{"sh", "-c", `cat "/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/pids.max"`}
			id := "limited-" + runMarker()
			r := d.send(map[string]any{"id": id, "pipeline": [][]string{script}})
			parent := ""
			if path.args == nil {
				parent = filepath.Dir(d.cgroup(t))
			}
			ctl, _ := cgroup.Controllers(parent)
			if parent != "" && slices.Contains(ctl, "pids") {
				wantOK(t, r)
				if got := strings.TrimSpace(string(r.Stdout)); got != "50" {
					t.Errorf("pids.max = %q, want 50", got)
				}
				return
			}
			why := "runs have no cgroup"
			if parent != "" {
				why = "no pids controller in the cgroup v2 tree at " + parent
			}
			wantError(t, r, "cannot start pipeline: limits cannot be enforced here: tasks ("+why+")")
			waitTrail(t, d.Dir, id, "received decided failed")
			if !strings.Contains(d.Stderr.String(), "policy rule sets limits this machine cannot enforce") {
				t.Errorf("no start-up warning about the rule:\n%s", d.Stderr)
			}
			// The rule without limits still runs.
			wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"true"}}}))
		})
	}
}

// TestCgroupPipelineKeepsEveryStagesLimits: the requester puts a stage
// an unlimited rule allows (true, by the catch-all) before the one whose
// rule sets tasks=50; the run is limited by every stage's rule, not only
// the first's: pids.max is 50 where runs have a pids controller, and the
// request is refused where the limit cannot be enforced, as without the
// first stage.
func TestCgroupPipelineKeepsEveryStagesLimits(t *testing.T) {
	t.Parallel()
	for _, path := range containments {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, opts{Policy: "allow any,tasks=50 sh ...\nallow any,env=*\n", Args: path.args})
			script := []string{"sh", "-c", `cat >/dev/null; cat "/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/pids.max"`}
			id := "pipe-limited-" + runMarker()
			r := d.send(map[string]any{"id": id, "pipeline": [][]string{{"true"}, script}})
			parent := ""
			if path.args == nil {
				parent = filepath.Dir(d.cgroup(t))
			}
			if ctl, _ := cgroup.Controllers(parent); parent != "" && slices.Contains(ctl, "pids") {
				wantOK(t, r)
				if got := strings.TrimSpace(string(r.Stdout)); got != "50" {
					t.Errorf("pids.max = %q, want 50 (the second stage's rule)", got)
				}
				return
			}
			why := "runs have no cgroup"
			if parent != "" {
				why = "no pids controller in the cgroup v2 tree at " + parent
			}
			wantError(t, r, "cannot start pipeline: limits cannot be enforced here: tasks ("+why+")")
			waitTrail(t, d.Dir, id, "received decided failed")
		})
	}
}

// TestCgroupPromptShowsLimits: the person asked sees how the run will be
// contained and which limits apply, in the real approver's terminal.
func TestCgroupPromptShowsLimits(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"cgroup", nil, "Limits:      none (the run's own cgroup)"},
		{"fallback", []string{"--cgroup", "none"}, "Limits:      none; no cgroup (contained by sessions and an environment tag only)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := approverDaemon(t, c.args...)
			a := startApprover(t, d.asock(), 0)
			a.See("attached to rootgated")
			ch := d.ask(map[string]any{"id": "lim-" + c.name})
			a.See("lim-" + c.name)
			a.See(c.want)
			a.See("n or Esc deny")
			a.Key("n")
			if r := <-ch; r.Status != wire.StatusDenied {
				t.Fatalf("%s", r.raw)
			}
		})
	}
}

// TestCgroupReloadWarnsLimits: a policy reload that brings in a rule
// whose limits cannot be enforced (here: runs without cgroups) is warned
// about, as at start.
func TestCgroupReloadWarnsLimits(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Args: []string{"--cgroup", "none"}})
	const warning = "policy rule sets limits this machine cannot enforce"
	if strings.Contains(d.Stderr.String(), warning) {
		t.Fatalf("a warning before any rule sets limits:\n%s", d.Stderr)
	}
	if err := os.WriteFile(filepath.Join(d.Dir, "policy"), []byte("allow any,memory=1G make ...\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reload's warning", 10*time.Second, func() bool {
		return strings.Contains(d.Stderr.String(), warning+`: the requests it allows will be refused" file=`) &&
			strings.Contains(d.Stderr.String(), "memory (runs have no cgroup)")
	})
}
