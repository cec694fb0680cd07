package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// zombiesOf counts the processes whose parent is ppid and that have
// exited without being reaped.
func zombiesOf(ppid int) (n int) {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
		if len(f) > 1 && f[0] == "Z" && f[1] == strconv.Itoa(ppid) {
			n++
		}
	}
	return n
}

// TestStrayChildrenReaped: a run cannot leave zombies in the daemon. A
// stage that clones with CLONE_PARENT makes its children the daemon's own
// (of the thread that started the stage), which nothing waited for: 50 of
// them, from one run of uid nobody, stayed zombies of the daemon, each
// holding a pid, for as long as it ran; a requester could run that until
// the machine's pids ran out. By the answer, the daemon has reaped them,
// on both ways it contains runs.
func TestStrayChildrenReaped(t *testing.T) {
	t.Parallel()
	const nobody = 65534
	// clone(CLONE_PARENT|SIGCHLD) 50 times; each child exits at once.
	script := `for (1..50) { my $r = syscall(56, 0x8000|17, 0, 0, 0, 0); if ($r == 0) { require POSIX; POSIX::_exit(0) } } print "cloned\n"`
	for _, path := range containments {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, opts{Args: path.args})
			openToAll(t, d)
			r := wantOK(t, sendAs(t, d.Sock, nobody, nobody, []uint32{}, request(map[string]any{"pipeline": [][]string{{"perl", "-e", script}}, "privileged": false})))
			if string(r.Stdout) != "cloned\n" {
				t.Fatalf("the run did not clone: %s", r.raw)
			}
			if n := zombiesOf(d.Cmd.Process.Pid); n != 0 {
				t.Fatalf("the daemon has %d zombie children after the answer", n)
			}
		})
	}
}

// TestRootRunStraysReaped: a root run cannot leave zombies in the daemon
// either. Root's stages stay in the daemon's session, whose zombies the
// daemon left alone: without a cgroup (the daemon is then the subreaper)
// every background process of a root run that outlived its parent and
// exited by itself, as `(cmd &)` in a script does, stayed a zombie of the
// daemon for as long as it ran (3 per run of `sh -c '(true &) ...'`), and
// so did a root stage's children cloned with CLONE_PARENT. By the answer,
// the daemon has reaped them.
func TestRootRunStraysReaped(t *testing.T) {
	t.Parallel()
	// 20 double forks whose grandchildren exit at once, orphaned; the
	// stage waits until each is a zombie (of the daemon, without a
	// cgroup), then clones with CLONE_PARENT 20 times.
	script := `use POSIX;
pipe(my $r, my $w) or die;
for (1..20) { my $p = fork; if ($p == 0) { my $g = fork; if ($g == 0) { POSIX::_exit(0) } syswrite $w, "$g\n"; POSIX::_exit(0) } waitpid($p, 0) }
close $w;
my @g = map { chomp; $_ } <$r>;
for my $g (@g) { for (;;) { open my $f, "<", "/proc/$g/stat" or last; my $s = <$f>; last if $s =~ /\) Z /; select(undef, undef, undef, 0.005) } }
for (1..20) { my $c = syscall(56, 0x8000|17, 0, 0, 0, 0); if ($c == 0) { POSIX::_exit(0) } }
print scalar(@g), " orphaned\n"`
	for _, path := range containments {
		t.Run(path.name, func(t *testing.T) {
			t.Parallel()
			d := startDaemon(t, opts{Args: path.args})
			r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"perl", "-e", script}}, "privileged": true}))
			if string(r.Stdout) != "20 orphaned\n" {
				t.Fatalf("the run did not fork: %s", r.raw)
			}
			if n := zombiesOf(d.Cmd.Process.Pid); n != 0 {
				t.Fatalf("the daemon has %d zombie children after the answer", n)
			}
			d.alive()
		})
	}
}
