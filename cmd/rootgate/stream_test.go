package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// streamLimit bounds each wait of these tests for a client to end: far
// under the daemon's run time limit (5 minutes), which would otherwise end
// a run the client failed to end, so that a run left going fails the test
// instead of passing it late.
const streamLimit = 90 * time.Second

// waitClient waits for cmd, started, to exit within streamLimit, and
// returns its exit code (128+N for a death by signal N, as a shell says).
func waitClient(t *testing.T, cmd *exec.Cmd, stderr *testutil.SyncBuffer) int {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return 128 + int(ws.Signal())
			}
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(streamLimit):
		if a := cmd.SysProcAttr; a != nil && a.Setpgid {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the shell's pipeline with it
		}
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%v still running after %s: the run was not ended\nstderr: %s", cmd.Args, streamLimit, stderr)
		return -1
	}
}

// auditRecords returns the records of kind in d's audit log, decoded.
func auditRecords(t *testing.T, d *rgtest.Daemon, kind string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(rgtest.AuditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	var rs []map[string]any
	for line := range strings.SplitSeq(string(data), "\n") {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["kind"] == kind {
			rs = append(rs, r)
		}
	}
	return rs
}

// TestSudoStreamsWholeOutput: 30 MB of stdout, past the 16 MiB an answer
// line holds, reaches a file whole through rootgate sudo, byte for byte
// what seq writes itself, with seq's exit code; the audit record counts
// every byte.
func TestSudoStreamsWholeOutput(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "allow privileged seq ...\n"})
	want, err := exec.Command("seq", "1", "3000000").Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(want) <= 16<<20 {
		t.Fatalf("seq wrote %d bytes: not past the answer line's cap", len(want))
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := sudoCmd(t, d, "seq", "1", "3000000")
	var stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = f, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if code := waitClient(t, cmd, &stderr); code != 0 || stderr.String() != "" {
		t.Fatalf("sudo seq 1 3000000 > f: exit %d, stderr %q", code, stderr.String())
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("f holds %d bytes, seq wrote %d (the same: %v)", len(got), len(want), bytes.HasPrefix(want, got))
	}
	var fin []map[string]any
	testutil.WaitFor(t, "the run's finished record", 30*time.Second, func() bool {
		fin = auditRecords(t, d, "finished")
		return len(fin) == 1
	})
	res, _ := fin[0]["result"].(map[string]any)
	if n, _ := res["stdout_bytes"].(float64); int(n) != len(want) || res["stdout_truncated"] != false {
		t.Errorf("finished record: %v, want stdout_bytes %d, not truncated", res, len(want))
	}
}

// TestSudoClosedPipeEndsRun: `sudo yes | head -1` in a shell returns as
// soon as head has its line, with the exit codes real sudo gives
// (PIPESTATUS 141 0: the run's writer dies of SIGPIPE), long before its
// time limit: the run's stdout ends as head's exit ended rootgate's, yes
// dies of SIGPIPE and the audit log records it so. And as under a shell,
// only the writer is ended: `sudo sh -c 'yes; echo …' | head -1` goes on
// after yes, its stderr reaching the caller, and exits 0.
func TestSudoClosedPipeEndsRun(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "allow privileged yes ...\nallow privileged sh -c ...\n"})
	bin := filepath.Join(t.TempDir(), "sudo")
	if err := os.Symlink(rgtest.Rootgate(t), bin); err != nil {
		t.Fatal(err)
	}
	marker := "rg-yes-" + filepath.Base(t.TempDir())
	cmd := exec.Command("bash", "-c", `"$0" yes "$1" | head -1; echo "${PIPESTATUS[@]}"; `+
		`"$0" sh -c 'yes "$0"; echo "yes ended: $?" >&2' "$1" | head -1; echo "${PIPESTATUS[@]}"`, bin, marker)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "ROOTGATE_SOCKET=" + d.Sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	want := marker + "\n141 0\n" + marker + "\n0 0\n"
	if code := waitClient(t, cmd, &stderr); code != 0 || stdout.String() != want || stderr.String() != "yes ended: 141\n" {
		t.Fatalf("exit %d, stdout %q, want %q; stderr %q, want the shell's line after yes", code, stdout.String(), want, stderr.String())
	}
	var fin []map[string]any
	testutil.WaitFor(t, "the runs' finished records", 30*time.Second, func() bool {
		fin = auditRecords(t, d, "finished")
		return len(fin) == 2
	})
	codes := ""
	for _, r := range fin {
		res, _ := r["result"].(map[string]any)
		st, _ := res["stages"].([]any)
		if len(st) == 1 {
			c, _ := st[0].(map[string]any)["exit_code"].(float64)
			codes += fmt.Sprint(int(c), " ")
		}
	}
	if codes != "141 0 " {
		t.Errorf("the runs exited %q, want yes dead of SIGPIPE, then the shell's 0", codes)
	}
	if n := len(procsWith("yes", marker)); n != 0 {
		t.Errorf("%d yes left", n)
	}
}

// TestSudoStreamsAndSignalEnds: `sudo sh -c '…; tail -f F'` passes each
// line to its caller's stdout, and stderr to its stderr, as they are
// written (each is read before the next is written), and SIGTERM to the
// client, as timeout(1) sends it, ends the run: tail is gone and the
// audit log records the run cancelled, and rootgate sudo ends by that
// signal, silently, as sudo does. Likewise SIGINT (Ctrl-C).
func TestSudoStreamsAndSignalEnds(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "allow privileged sh ...\n"})
	for i, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "rg-tailed")
			if err := os.WriteFile(file, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := sudoCmd(t, d, "sh", "-c", `echo to-stderr >&2; exec tail -f "$0"`, file)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			errs, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			errLine, err := readLine(t, bufio.NewReader(errs))
			if err != nil || errLine != "to-stderr\n" {
				t.Fatalf("stderr: %q, %v", errLine, err)
			}
			lines := bufio.NewReader(out)
			for _, l := range []string{"one\n", "two\n"} {
				af, err := os.OpenFile(file, os.O_APPEND|os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = af.WriteString(l)
				af.Close()
				got, err := readLine(t, lines)
				if err != nil || got != l {
					t.Fatalf("stdout: %q, %v; want %q", got, err, l)
				}
			}
			if len(procsWith("tail", "-f", file)) == 0 {
				t.Fatal("tail is not running")
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			rest, _ := io.ReadAll(errs)
			_, _ = io.ReadAll(out)
			// As sudo does, it ends by the signal, saying nothing.
			code := waitClient(t, cmd, &testutil.SyncBuffer{})
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != sig || len(rest) != 0 {
				t.Errorf("after %v: exit %d (%v), stderr %q; want it ended by %v, silently", sig, code, cmd.ProcessState, rest, sig)
			}
			testutil.WaitFor(t, "tail to be gone", 30*time.Second, func() bool { return len(procsWith("tail", "-f", file)) == 0 })
			testutil.WaitFor(t, "the run's cancelled record", 30*time.Second, func() bool { return len(auditRecords(t, d, "cancelled")) == i+1 })
		})
	}
}

// readLine reads a line from r within streamLimit, or fails the test: a
// line that comes only at the run's end (its time limit) never comes.
func readLine(t *testing.T, r *bufio.Reader) (string, error) {
	t.Helper()
	type line struct {
		s   string
		err error
	}
	got := make(chan line, 1)
	go func() {
		s, err := r.ReadString('\n')
		got <- line{s, err}
	}()
	select {
	case l := <-got:
		return l.s, l.err
	case <-time.After(streamLimit):
		t.Fatalf("no line within %s: the output does not stream", streamLimit)
		return "", nil
	}
}

// procsWith lists the processes whose command line is argv (NUL-joined),
// or begins so.
func procsWith(argv ...string) []int {
	want := []byte(strings.Join(argv, "\x00") + "\x00")
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.HasPrefix(b, want) {
			pids = append(pids, pid)
		}
	}
	return pids
}
