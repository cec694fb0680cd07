package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
)

// TestRunShares: one requester cannot take every run slot. Account rt2op
// sends long runs a rule allows (the documented `journalctl -f` is one)
// to a daemon with --max-runs 2; once both are decided, root's request,
// also allowed, must run at once, not wait until the requester's runs end.
// The requester's second run waits for its first, so only one of its
// runs is in progress.
func TestRunShares(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rt2op")
	d := startDaemon(t, opts{Args: []string{"--max-runs", "2"}})
	openToAll(t, d)
	marker := fmt.Sprintf("%d.%d", 600+time.Now().Nanosecond()%100, time.Now().Nanosecond())
	var ids []string
	var clients []*exec.Cmd
	for range 2 {
		id := uuid.NewString()
		ids = append(ids, id)
		cmd := exec.Command(rootgateBin, "send", "--socket", d.Sock)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: ag.uid, Gid: ag.gid, Groups: []uint32{}}}
		cmd.Stdin = strings.NewReader(request(map[string]any{"id": id, "pipeline": [][]string{{"sleep", marker}}, "privileged": false}))
		clients = append(clients, cmd)
	}
	startClients(t, clients, marker)
	decided := func(id string) bool {
		b, _ := os.ReadFile(auditPath(d.Dir))
		for line := range bytes.Lines(b) {
			if bytes.Contains(line, []byte(`"kind":"decided"`)) && bytes.Contains(line, []byte(`"id":"`+id+`"`)) {
				return true
			}
		}
		return false
	}
	waitFor(t, "both of rt2op's runs decided, one running", 20*time.Second, func() bool {
		return decided(ids[0]) && decided(ids[1]) && len(procsWith(marker)) >= 1
	})
	type answer struct {
		r   response
		err error
	}
	done := make(chan answer, 1)
	go func() {
		r, err := trySendAs(d.Sock, 0, 0, []uint32{}, request(map[string]any{"pipeline": [][]string{{"echo", "ran"}}}))
		done <- answer{r, err}
	}()
	select {
	case a := <-done:
		if a.err != nil || string(a.r.Stdout) != "ran\n" {
			t.Fatalf("root's request: %v %s", a.err, a.r.raw)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("root's request still waits for a run slot: rt2op's %d runs of %s hold them all", len(procsWith(marker)), marker)
	}
	if n := len(procsWith(marker)); n != 1 {
		t.Errorf("rt2op has %d runs in progress, want 1 (half of --max-runs 2)", n)
	}
}

// TestEveryRunSlotUsable: root's eight long runs, on a daemon with the
// default --max-runs (8), all run at once: what a run may keep for its
// answer (its stderr's 16 MiB) is taken from the kept-output budget
// (--max-runs × 16 MiB), so the budget never leaves run slots idle.
// (When each run took twice that, only four ran.)
func TestEveryRunSlotUsable(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	marker := fmt.Sprintf("%d.%d", 700+time.Now().Nanosecond()%100, time.Now().Nanosecond())
	var clients []*exec.Cmd
	for range 8 {
		cmd := exec.Command(rootgateBin, "send", "--socket", d.Sock)
		cmd.Stdin = strings.NewReader(request(map[string]any{"pipeline": [][]string{{"sleep", marker}}}))
		clients = append(clients, cmd)
	}
	startClients(t, clients, marker)
	waitFor(t, "eight runs at once", 30*time.Second, func() bool { return len(procsWith(marker)) == 8 })
}

// startClients starts clients, whose runs sleep marker; when the test
// ends, the requesters leave, and their runs must be killed.
func startClients(t *testing.T, clients []*exec.Cmd, marker string) {
	t.Helper()
	t.Cleanup(func() {
		for _, cmd := range clients {
			if cmd.Process != nil {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}
		}
		noSurvivors(t, marker)
	})
	for _, cmd := range clients {
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
}
