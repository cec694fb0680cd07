package daemon_test

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
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/wire"
)

// cgroupParent is a test daemon's own --cgroup; the test fails where
// this machine has no writable cgroup v2 (CI has one).
func cgroupParent(t *testing.T) string {
	t.Helper()
	p := rgtest.CgroupParent(t)
	if p == "" {
		t.Fatal("no writable cgroup v2 on this machine")
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
	t.Cleanup(func() {
		for _, pid := range procsWith(m) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
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
	t.Cleanup(func() {
		for _, pid := range procsWith(m) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// Each '/' is three bytes in the cgroup's name: past its limit.
	id := m + strings.Repeat("/", wire.MaxIDLen-len(m))
	c, err := net.Dial("unix", a.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(request(map[string]any{"id": id, "pipeline": [][]string{{"sleep", m}}}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run", 10*time.Second, func() bool { return len(procsWith(m)) == 1 })
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
// one that never started (it died between making the cgroup and writing
// the started record: here an empty cgroup for an id with no records).
func TestCgroupLeftoversOfEndedRuns(t *testing.T) {
	t.Parallel()
	parent := cgroupParent(t)
	dir := shortDir(t)
	args := []string{"--cgroup", parent}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	m, stray := runMarker(), runMarker()+"1"
	t.Cleanup(func() {
		for _, pid := range append(procsWith(m), procsWith(stray)...) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	ended := "ended-" + m
	wantOK(t, a.send(map[string]any{"id": ended, "pipeline": [][]string{{"true"}}}))
	waitTrail(t, dir, ended, "received decided started finished")
	left := filepath.Join(parent, ended) // the id is its cgroup's name as it is
	if err := os.Mkdir(left, 0o755); err != nil {
		t.Fatal(err)
	}
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
	// And a run killed with its daemon: started, no end.
	lost := "lost-" + m
	c, err := net.Dial("unix", a.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(request(map[string]any{"id": lost, "pipeline": [][]string{{"sleep", m}}}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run", 10*time.Second, func() bool { return len(procsWith(m)) == 1 })
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
	ctl, _ := pipeline.Controllers(filepath.Dir(d.cgroup(t)))
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
	ctl, err := pipeline.Controllers(parent)
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

// TestCgroupFallback: with no usable cgroup (turned off, or --cgroup
// naming a directory that is no cgroup2 one), the daemon says so loudly
// at start and runs are still contained the fallback way: an escapee
// that keeps its environment is killed by the sweep.
func TestCgroupFallback(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct{ arg, why string }{
		"none":       {"none", "turned off (--cgroup none)"},
		"not cgroup": {"", "not in a cgroup2 file system"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			arg := c.arg
			if arg == "" {
				arg = t.TempDir()
			}
			d := startDaemon(t, opts{Args: []string{"--cgroup", arg}})
			log := d.Stderr.String()
			if !strings.Contains(log, "level=WARN") || !strings.Contains(log, "cgroup: none (") || !strings.Contains(log, c.why) || !strings.Contains(log, "outlives its run") {
				t.Errorf("no fallback warning naming %q:\n%s", c.why, log)
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
			ctl, err := pipeline.Controllers(parent)
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
			ctl, _ := pipeline.Controllers(parent)
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
