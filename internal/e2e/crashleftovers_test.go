package e2e

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"

	"github.com/rootgate/rootgate/internal/audit"
)

// TestCrashLeavesNoRunProcess: without cgroups, a daemon killed mid-run
// left every process of its runs that outlived its stage's leader (which
// dies with the daemon's thread): 21 of 21 in 30 SIGKILL trials, plain
// children of a `sh -c` stage among them. The next daemon on the same
// runtime directory now kills them: those that kept the run's tag in
// their environment, and those that dropped it but stayed in their
// stage's process group (a root run) or session (a run as another user).
// What the start-up warning says still escapes does: a process that
// left both and replaced its environment.
func TestCrashLeavesNoRunProcess(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	args := []string{"--cgroup", "none"}
	a := startDaemon(t, opts{Dir: dir, Args: args})
	openToAll(t, a)
	m, escapee := runMarker(), runMarker()
	killAtEnd(t, m, escapee)
	hold := func(id string, pipeline [][]string) {
		t.Helper()
		c, err := net.Dial("unix", a.Sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write([]byte(request(map[string]any{"id": id, "pipeline": pipeline}))); err != nil {
			t.Fatal(err)
		}
	}
	// A root run: plain background children, one in a session of its
	// own (tagged), one with an empty environment (in the stage's group).
	hold("crash-root-"+m, [][]string{{"sh", "-c", "sleep " + m + " & setsid sleep " + m + " & env -i /usr/bin/sleep " + m + " & sleep " + m + "; wait"}})
	// A root run whose child leaves the group and empties its
	// environment: what cannot be found.
	hold("crash-escape-"+m, [][]string{{"sh", "-c", "setsid env -i /usr/bin/sleep " + escapee + " & sleep " + m + "; wait"}})
	// A run as nobody, whose stage leads a session: a child that makes a
	// group of its own and empties its environment stays in it.
	const nobody = 65534
	line := request(map[string]any{"id": "crash-nobody-" + m, "privileged": false, "pipeline": [][]string{{"perl", "-e",
		`if (!fork) { setpgrp(0, 0); %ENV = (); exec "/usr/bin/sleep", "` + m + `" } exec "/usr/bin/sleep", "` + m + `"`}}})
	send := exec.Command(rootgateBin, "send", "--socket", a.Sock)
	send.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody, Groups: []uint32{}}}
	send.Stdin = strings.NewReader(line)
	if err := send.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = send.Process.Kill(); _ = send.Wait() })
	// Two sh stages and 4 + 1 + 2 sleeps with m in their command lines;
	// the escapee and the sh that started it with the other.
	// And the three runs' records name their stages' processes (written
	// once every stage has started, a moment after the first runs: see
	// trackRun), for a process that empties its environment is found by
	// its stage's group or session alone.
	recorded := func() bool {
		ents, _ := os.ReadDir(filepath.Join(dir, "run", "runs"))
		n := 0
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(dir, "run", "runs", e.Name())); err == nil && strings.Contains(string(b), `"stages"`) {
				n++
			}
		}
		return n == 3
	}
	if !testutil.Poll(20*time.Second, func() bool { return len(procsWith(m)) == 9 && len(procsWith(escapee)) == 2 && recorded() }) {
		for _, p := range append(procsWith(m), procsWith(escapee)...) {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/cmdline")
			t.Logf("%d %q", p, b)
		}
		t.Fatalf("the runs' processes did not all start: %s", a.Stderr.String())
	}

	a.Cmd.Process.Kill()
	<-a.Done()
	b := startDaemon(t, opts{Dir: dir, Args: args})
	waitFor(t, "no process of the runs", 10*time.Second, func() bool { return len(procsWith(m)) == 0 })
	if len(procsWith(escapee)) != 1 {
		t.Errorf("the process that left its group and emptied its environment was found after all: take it off the start-up warning")
	}
	logs := b.Stderr.String()
	if !strings.Contains(logs, "killed the processes left by runs of a daemon that did not stop cleanly") {
		t.Errorf("the new daemon does not say it killed what the runs left:\n%s", logs)
	}
	if !strings.Contains(logs, noCgroupWarning) {
		t.Errorf("the start-up warning is not %q:\n%s", noCgroupWarning, logs)
	}
	for _, id := range []string{"crash-root-" + m, "crash-escape-" + m, "crash-nobody-" + m} {
		rs := trail(t, dir, id)
		if len(rs) == 0 || rs[len(rs)-1].Kind != audit.KindOrphaned || !strings.Contains(rs[len(rs)-1].Error, "could be found") {
			t.Errorf("%s's records: %s, last %+v", id, kinds(rs), rs[len(rs)-1])
		}
	}
	b.alive()
}

// noCgroupWarning is what a daemon without cgroups says at start of what
// its runs can leave behind.
const noCgroupWarning = "a process that leaves what its stage leads (its process group, and its session where it leads one) and replaces its environment outlives its run and a daemon crash"
