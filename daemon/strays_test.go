package daemon_test

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
