package e2e

import (
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
)

// TestUnfinishedRunRecordedOrphaned: the record of a run's end is synced
// after the answer is sent, so a daemon that dies (SIGKILL, a crash, a
// power cut) may leave a trail that ends at started, with no cgroup left
// to tell (here: --cgroup none). The next daemon on the same audit log
// records the run as orphaned, its outcome unknown, once; a later daemon
// does not record it again.
func TestUnfinishedRunRecordedOrphaned(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	args := []string{"--cgroup", "none"}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	m := runMarker()
	killAtEnd(t, m)
	// A finished run before it, whose trail is whole.
	done := wantOK(t, a.send(map[string]any{"pipeline": [][]string{{"true"}}}))
	id := "unfinished-" + m
	blockedRun(t, a, id, m)
	a.Cmd.Process.Kill()
	<-a.Done()
	waitFor(t, "the run's death with its daemon", 10*time.Second, func() bool { return len(procsWith(m)) == 0 })

	b := startDaemon(t, opts{Dir: dir, Args: args})
	rs := trail(t, dir, id)
	if k := kinds(rs); k != "received decided started "+string(audit.KindOrphaned) {
		t.Fatalf("records of %s: %s", id, k)
	}
	if o := rs[3]; !strings.Contains(o.Error, "unknown") || o.Peer != nil {
		t.Errorf("orphaned record: error %q, peer %v", o.Error, o.Peer)
	}
	if k := kinds(trail(t, dir, done.ID)); k != "received decided started finished" {
		t.Errorf("records of the finished run %s: %s", done.ID, k)
	}
	if !strings.Contains(b.Stderr.String(), "event=orphaned") {
		t.Errorf("the orphan is not in the log:\n%s", b.Stderr)
	}
	wantOK(t, b.send(map[string]any{"pipeline": [][]string{{"true"}}}))
	b.Stop()

	// The next daemon finds nothing left to record.
	startDaemon(t, opts{Dir: dir, Args: args}).alive()
	if k := kinds(trail(t, dir, id)); k != "received decided started "+string(audit.KindOrphaned) {
		t.Errorf("records of %s after a third daemon: %s", id, k)
	}
}

// TestUnfinishedPidReused: a daemon killed mid-run whose pid another
// process holds by the time the next daemon starts (after pids wrap, or a
// reboot; a requester can fork until it gets the pid) is still gone: the
// next daemon tells them apart by the boot id and start time its opened
// record carries, and records the run as orphaned. By its pid alone it
// took the process for the daemon, still running, and recorded nothing.
func TestUnfinishedPidReused(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	args := []string{"--cgroup", "none"}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	m := runMarker()
	killAtEnd(t, m)
	id := "reused-" + m
	blockedRun(t, a, id, m)
	pid := a.Cmd.Process.Pid
	var o *audit.Record
	for _, r := range records(t, dir) {
		if r.Kind == audit.KindOpened {
			o = r
		}
	}
	if o == nil || o.Daemon == nil || o.Daemon.PID != pid || o.Daemon.BootID == "" || o.Daemon.Start == 0 {
		t.Fatalf("the daemon's opened record: %+v", o)
	}
	a.Cmd.Process.Kill()
	<-a.Done()
	waitFor(t, "the run's death with its daemon", 10*time.Second, func() bool { return len(procsWith(m)) == 0 })

	// A process of another uid takes the dead daemon's pid.
	squat := runMarker()
	killAtEnd(t, squat)
	reusePid(t, pid, "setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sleep", "1000", squat)
	b := startDaemon(t, opts{Dir: dir, Args: args})
	rs := trail(t, dir, id)
	if k := kinds(rs); k != "received decided started "+string(audit.KindOrphaned) {
		t.Fatalf("records of %s with its daemon's pid %d held by %v: %s", id, pid, procsWith(squat), k)
	}
	if !strings.Contains(rs[3].Error, "unknown") {
		t.Errorf("orphaned record: error %q", rs[3].Error)
	}
	if !slices.Contains(procsWith(squat), pid) {
		t.Errorf("the process holding pid %d is gone", pid)
	}
	b.alive()
}

// reusePid starts argv in the background with pid pid, which no process
// may hold, by clone3 with set_tid (from perl: Go cannot fork without
// exec). Unlike writing /proc/sys/kernel/ns_last_pid, this leaves the
// machine's next pid where it was: rewound, every later fork of every
// test running meanwhile takes a pid freed since, and a test that then
// reads or signals a process it knew by pid meets a stranger (one such
// kill took down another test's daemon).
func reusePid(t *testing.T, pid int, argv ...string) {
	t.Helper()
	const script = `my ($pid, @argv) = @ARGV;
my $tid = pack("q", $pid);
# struct clone_args up to set_tid_size: exit_signal SIGCHLD, set_tid.
my $args = pack("Q10", 0, 0, 0, 0, 17, 0, 0, 0, unpack("J", pack("p", $tid)), 1);
my $got = syscall(435, $args, length $args);
die "clone3: $!\n" if $got < 0;
if ($got == 0) { open STDIN, "<", "/dev/null"; open STDOUT, ">", "/dev/null"; open STDERR, ">", "/dev/null"; exec { $argv[0] } @argv; require POSIX; POSIX::_exit(127) }
print "$got\n"`
	out, err := exec.Command("perl", append([]string{"-e", script, strconv.Itoa(pid)}, argv...)...).Output()
	if err != nil {
		t.Fatalf("a process with pid %d: %v (%s)", pid, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != strconv.Itoa(pid) {
		t.Fatalf("a process with pid %d: perl said %q", pid, got)
	}
}

// blockedRun sends d a request with this id to run sleep m, leaves its
// connection open until the test ends, and waits for the sleep to run.
func blockedRun(t *testing.T, d *daemonProc, id, m string) {
	t.Helper()
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write([]byte(request(map[string]any{"id": id, "pipeline": [][]string{{"sleep", m}}}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run", 10*time.Second, func() bool { return len(procsWith(m)) == 1 })
}
