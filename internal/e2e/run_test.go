package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/wire"
)

func TestPipelines(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	t.Run("one stage", func(t *testing.T) {
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"echo", "hello"}}}))
		if string(r.Stdout) != "hello\n" || len(r.Stages) != 1 || r.Stages[0].ExitCode != 0 {
			t.Fatalf("%s", r.raw)
		}
	})
	t.Run("two stages", func(t *testing.T) {
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"printf", "b\\na\\nc\\n"}, {"sort"}}}))
		if string(r.Stdout) != "a\nb\nc\n" || len(r.Stages) != 2 {
			t.Fatalf("%s", r.raw)
		}
	})
	t.Run("five stages with codes and stderr", func(t *testing.T) {
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{
			{"sh", "-c", "echo one >&2; seq 1 100"},
			{"sh", "-c", "echo two >&2; cat; exit 3"},
			{"grep", "5"},
			{"sh", "-c", "cat; echo four >&2"},
			{"sh", "-c", "wc -l; echo five >&2; exit 7"},
		}}))
		if len(r.Stages) != 5 {
			t.Fatalf("%s", r.raw)
		}
		codes := []int{0, 3, 0, 0, 7}
		errs := []string{"one\n", "two\n", "", "four\n", "five\n"}
		for i, st := range r.Stages {
			if st.ExitCode != codes[i] || string(st.Stderr) != errs[i] || st.Signal != "" {
				t.Errorf("stage %d: %+v", i, st)
			}
		}
		if strings.TrimSpace(string(r.Stdout)) != "19" {
			t.Errorf("stdout %q", r.Stdout)
		}
	})
	t.Run("binary round trip", func(t *testing.T) {
		all := make([]byte, 256*64)
		for i := range all {
			all[i] = byte(i)
		}
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"cat"}}, "stdin": all}))
		if !bytes.Equal(r.Stdout, all) {
			t.Fatal("binary bytes changed on the way")
		}
	})
	t.Run("early exit", func(t *testing.T) {
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"yes"}, {"head", "-1"}}}))
		if string(r.Stdout) != "y\n" || r.Stages[1].ExitCode != 0 {
			t.Fatalf("%s", r.raw)
		}
		if r.Stages[0].Signal != "SIGPIPE" || r.Stages[0].ExitCode != 128+13 {
			t.Fatalf("yes should die of SIGPIPE: %+v", r.Stages[0])
		}
	})
	t.Run("signal death", func(t *testing.T) {
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"sh", "-c", "kill -SEGV $$"}, {"sh", "-c", "kill -KILL $$"}}}))
		if r.Stages[0].Signal != "SIGSEGV" || r.Stages[0].ExitCode != 139 || r.Stages[1].Signal != "SIGKILL" || r.Stages[1].ExitCode != 137 {
			t.Fatalf("%s", r.raw)
		}
	})
}

func TestLargeOutputIsCapped(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	const cap16 = 16 << 20
	// 100 MiB on stdout, and 100 MiB on a middle stage's stderr.
	r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{
		{"head", "-c", "104857600", "/dev/zero"},
		{"sh", "-c", "head -c 104857600 /dev/zero | tr '\\0' e >&2; cat"},
		{"cat"},
	}}))
	if len(r.Stdout) != cap16 || !r.StdoutTruncated {
		t.Errorf("stdout: %d bytes, truncated %v; want %d, true", len(r.Stdout), r.StdoutTruncated, cap16)
	}
	st := r.Stages[1]
	if len(st.Stderr) != cap16 || !st.StderrTruncated || st.Stderr[0] != 'e' {
		t.Errorf("middle stderr: %d bytes, truncated %v", len(st.Stderr), st.StderrTruncated)
	}
	for i, s := range r.Stages {
		if s.ExitCode != 0 {
			t.Errorf("stage %d exit %d", i, s.ExitCode)
		}
	}
	if r.Stages[0].StderrTruncated || strings.Contains(r.raw, `"stderr_truncated":false`) {
		t.Errorf("a false truncation flag was sent")
	}
	// Exactly the cap is not truncated.
	r = wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"head", "-c", fmt.Sprint(cap16), "/dev/zero"}}}))
	if len(r.Stdout) != cap16 || r.StdoutTruncated || strings.Contains(r.raw, "stdout_truncated") {
		t.Errorf("16 MiB exactly: %d bytes, truncated %v", len(r.Stdout), r.StdoutTruncated)
	}
}

// TestOutputExactInAnswerAndAudit: output the daemon keeps in many chunks
// (5 MiB - 1 on a stage's stderr, 16 MiB of 16 MiB + 1 on stdout) comes back
// in the answer exactly as written, random bytes that show any chunk out of
// place, and the run's finished record holds the byte counts written and
// the sha256 of the bytes kept.
func TestOutputExactInAnswerAndAudit(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	const cap16 = 16 << 20
	data := make([]byte, cap16+100)
	rand.Read(data)
	file := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	const outN, errN = cap16 + 1, 5<<20 - 1
	id := uuid.NewString()
	r := wantOK(t, d.send(map[string]any{"id": id, "pipeline": [][]string{
		{"sh", "-c", fmt.Sprintf("head -c %d %s >&2; head -c %d %s", errN, file, outN, file)},
		{"cat"},
	}}))
	if !bytes.Equal(r.Stdout, data[:cap16]) || !r.StdoutTruncated {
		t.Errorf("stdout: %d bytes, truncated %v; want the first %d bytes written, truncated", len(r.Stdout), r.StdoutTruncated, cap16)
	}
	if len(r.Stages) != 2 || !bytes.Equal(r.Stages[0].Stderr, data[:errN]) || r.Stages[0].StderrTruncated || len(r.Stages[1].Stderr) != 0 {
		t.Fatalf("stderr: %d stages; want stage 0's %d bytes as written, stage 1's none", len(r.Stages), errN)
	}

	res := waitTrail(t, d.Dir, id, "received decided started finished")[3].Result
	if res.StdoutBytes != outN || !res.StdoutTruncated || res.StdoutSHA256 != hexSum(data[:cap16]) {
		t.Errorf("finished record: stdout %d bytes, truncated %v, sha256 %s; want %d, true, that of the first %d bytes", res.StdoutBytes, res.StdoutTruncated, res.StdoutSHA256, outN, cap16)
	}
	if st := res.Stages[0]; st.StderrBytes != errN || st.StderrTruncated || st.StderrSHA256 != hexSum(data[:errN]) {
		t.Errorf("finished record: stage 0 stderr %+v; want %d bytes, sha256 %s", st, errN, hexSum(data[:errN]))
	}
	if st := res.Stages[1]; st.StderrBytes != 0 || st.StderrSHA256 != hexSum(nil) {
		t.Errorf("finished record: stage 1 stderr %+v; want none", st)
	}
}

// hostile runs a pipeline that tries to outlive its time limit and checks
// that everything is killed and the answer is a timeout with what was
// captured.
func TestHostileChildren(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Args: []string{"--kill-grace", "1s"}})
	for _, tc := range []struct {
		name  string
		stage func(marker string) []string
	}{
		{"ignores SIGTERM", func(m string) []string { return []string{"sh", "-c", "trap '' TERM; echo started; sleep " + m} }},
		{"grandchild holds the pipes", func(m string) []string {
			return []string{"sh", "-c", "sleep " + m + " & echo started; exec sleep " + m}
		}},
		{"closes stdout early", func(m string) []string { return []string{"sh", "-c", "echo started; exec >&- 2>&-; sleep " + m} }},
		{"sleeps past the limit", func(m string) []string { return []string{"sh", "-c", "echo started; sleep " + m} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			marker := fmt.Sprintf("%d.%d", 4000+time.Now().Nanosecond()%1000, time.Now().Nanosecond())
			start := time.Now()
			r := d.send(map[string]any{"pipeline": [][]string{tc.stage(marker), {"cat"}}, "timeout": 1})
			if r.Status != wire.StatusTimeout || (r.Message != "run exceeded its time limit of 1s" || r.Code != wire.CodeRunTimeout) {
				t.Fatalf("got %s", r.raw)
			}
			if string(r.Stdout) != "started\n" || len(r.Stages) != 2 {
				t.Errorf("captured output lost: %s", r.raw)
			}
			// A hang detector, not a speed test: limit 1 s + grace 1 s.
			if el := time.Since(start); el > 20*time.Second {
				t.Errorf("answer took %v", el)
			}
			noSurvivors(t, marker)
		})
	}
}

func TestBackgroundChildKilledAtEnd(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	marker := fmt.Sprintf("%d.5", 7000+time.Now().Nanosecond()%1000)
	r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"sh", "-c", "sleep " + marker + " >/dev/null 2>&1 & echo done"}}}))
	if string(r.Stdout) != "done\n" {
		t.Fatalf("%s", r.raw)
	}
	noSurvivors(t, marker)
}

// sendAs runs `rootgate send` as the given user with line on stdin.
func sendAs(t *testing.T, sock string, uid, gid uint32, groups []uint32, line string) response {
	t.Helper()
	r, err := trySendAs(sock, uid, gid, groups, line)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// trySendAs is sendAs for goroutines other than the test's own, which
// must not call t.Fatal.
func trySendAs(sock string, uid, gid uint32, groups []uint32, line string) (response, error) {
	cmd := exec.Command(rootgateBin, "send", "--socket", sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	cmd.Stdin = strings.NewReader(line)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return response{}, fmt.Errorf("rootgate send as %d: %v: %s%s", uid, err, out, stderr.String())
	}
	var r response
	r.raw = string(out)
	if err := json.Unmarshal(out, &r.Response); err != nil {
		return response{}, fmt.Errorf("%q: %v", out, err)
	}
	return r, nil
}

// openToAll lets any user reach the test daemon's socket.
func openToAll(t *testing.T, d *daemonProc) {
	t.Helper()
	if err := os.Chmod(d.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.Sock, 0o666); err != nil {
		t.Fatal(err)
	}
}

func TestIdentity(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	openToAll(t, d)
	const nobody = 65534
	// A run in a cgroup of its own gets no tag (pipeline.RunEnvKey): its
	// environment holds nothing of rootgate's.
	show := [][]string{{"sh", "-c", `id -u; id -g; id -G; env | sort`}}
	want := func(uid, gids, home, user, shell string) string {
		return uid + "\n" + gids + "\nHOME=" + home + "\nLOGNAME=" + user + "\nPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nPWD=/\nSHELL=" + shell + "\nUSER=" + user + "\n"
	}
	home, shell := passwd(t, "nobody")
	gid := groupOf(t, "nobody")
	t.Run("unprivileged from nobody runs as nobody", func(t *testing.T) {
		r := wantOK(t, sendAs(t, d.Sock, nobody, nobody, []uint32{}, request(map[string]any{"pipeline": show, "privileged": false})))
		if got, w := string(r.Stdout), want(fmt.Sprint(nobody), gid+"\n"+groupsOf(t, "nobody"), home, "nobody", shell); got != w {
			t.Fatalf("got\n%s\nwant\n%s", got, w)
		}
	})
	t.Run("unprivileged runs with the peer's own groups", func(t *testing.T) {
		// The peer holds groups the group database does not give nobody
		// (100, 4): the run has exactly the peer's, not the database's.
		r := wantOK(t, sendAs(t, d.Sock, nobody, nobody, []uint32{4, 100}, request(map[string]any{"pipeline": [][]string{{"id", "-G"}}, "privileged": false})))
		if got, w := string(r.Stdout), gid+" 4 100\n"; got != w {
			t.Fatalf("id -G = %q, want %q", got, w)
		}
	})
	t.Run("privileged from nobody runs as root with a clean env and SUDO_*", func(t *testing.T) {
		r := wantOK(t, sendAs(t, d.Sock, nobody, nobody, []uint32{}, request(map[string]any{"pipeline": show, "env": map[string]string{"LANG": "C.UTF-8"}})))
		rhome, rshell := passwd(t, "root")
		w := want("0", "0\n0", rhome, "root", rshell)
		w = strings.Replace(w, "LOGNAME=", "LANG=C.UTF-8\nLOGNAME=", 1)
		// And what sudo sets, of the requester, from the daemon.
		w = strings.Replace(w, "USER=root\n", "SUDO_COMMAND=/usr/bin/sh -c id -u; id -g; id -G; env | sort\nSUDO_GID=65534\nSUDO_HOME="+home+"\nSUDO_UID=65534\nSUDO_USER=nobody\nUSER=root\n", 1)
		if got := string(r.Stdout); got != w {
			t.Fatalf("got\n%s\nwant\n%s", got, w)
		}
	})
}

// passwd returns a user's home and shell.
func passwd(t *testing.T, name string) (home, shell string) {
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ":")
		if len(f) == 7 && f[0] == name {
			return f[5], f[6]
		}
	}
	t.Fatalf("no passwd entry for %s", name)
	return
}

func groupOf(t *testing.T, name string) string {
	out, err := exec.Command("id", "-g", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func groupsOf(t *testing.T, name string) string {
	out, err := exec.Command("id", "-G", name).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func TestDisconnectCancelsRun(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	marker := fmt.Sprintf("%d.25", 8000+time.Now().Nanosecond()%1000)
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(request(map[string]any{"pipeline": [][]string{{"sh", "-c", "trap '' TERM; sleep " + marker}}}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run to start", 20*time.Second, func() bool { return len(procsWith(marker)) > 0 })
	c.Close()
	noSurvivors(t, marker)
	waitFor(t, "the daemon to log the cancel", 10*time.Second, func() bool {
		return strings.Contains(d.Stderr.String(), `msg="audit: cancelled"`)
	})
	d.alive()
}

func TestHalfCloseDoesNotCancel(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte(request(map[string]any{"pipeline": [][]string{{"sh", "-c", "sleep 1; echo finished"}}}))); err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	r := wantOK(t, readResponse(t, c))
	if string(r.Stdout) != "finished\n" {
		t.Fatalf("%s", r.raw)
	}
}

func TestConcurrentClients(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	pid := d.Cmd.Process.Pid
	before := fdCount(t, pid)
	const n = 100 // 64 in flight at most; the rest are told "server busy"
	var wg sync.WaitGroup
	results := make([]response, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := uuid.NewString()
			c, err := net.Dial("unix", d.Sock)
			if err != nil {
				errs[i] = err
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(60 * time.Second))
			// Each run holds its slot a moment so the connections overlap.
			_, _ = c.Write([]byte(request(map[string]any{"id": id, "pipeline": [][]string{{"sh", "-c", "sleep 0.5; echo " + id}}})))
			c.(*net.UnixConn).CloseWrite()
			results[i] = readResponse(t, c)
			if results[i].Status == wire.StatusOK && (results[i].ID != id || string(results[i].Stdout) != id+"\n") {
				errs[i] = fmt.Errorf("answer for another request: %s", results[i].raw)
			}
		}()
	}
	wg.Wait()
	ok, busy := 0, 0
	for i, r := range results {
		if errs[i] != nil {
			t.Errorf("client %d: %v", i, errs[i])
			continue
		}
		switch {
		case r.Status == wire.StatusOK:
			ok++
		case r.Status == wire.StatusError && r.Message == "server busy":
			busy++
		default:
			t.Errorf("client %d: %s", i, r.raw)
		}
	}
	if ok < 64 || ok+busy != n {
		t.Errorf("%d ok, %d busy of %d", ok, busy, n)
	}
	t.Logf("%d answered, %d busy", ok, busy)
	waitFor(t, "the daemon's descriptors to return", 10*time.Second, func() bool { return fdCount(t, pid) <= before })
}

func TestShutdownAnswersAndKills(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "allow any sh ...\n"})
	marker := fmt.Sprintf("%d.75", 9000+time.Now().Nanosecond()%1000)
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	_, _ = c.Write([]byte(request(map[string]any{"pipeline": [][]string{{"sh", "-c", "sleep " + marker}}})))
	c.(*net.UnixConn).CloseWrite()
	waitFor(t, "the run to start", 20*time.Second, func() bool { return len(procsWith(marker)) > 0 })
	d.Stop()
	wantError(t, readResponse(t, c), wire.ErrKilledStopping.Error()) // it ran: not "daemon stopping"
	noSurvivors(t, marker)
}

// TestMaxRuns checks --max-runs by a lock only one run at a time can hold:
// with a cap of 1 no run ever finds it taken; with the default cap of 8
// they overlap and some do.
func TestMaxRuns(t *testing.T) {
	t.Parallel()
	lockTest := func(t *testing.T, d *daemonProc) (taken int) {
		lock := filepath.Join(shortDir(t), "lock")
		script := "mkdir " + lock + " 2>/dev/null || exit 9; sleep 0.3; rmdir " + lock
		var wg sync.WaitGroup
		results := make([]response, 6)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = d.send(map[string]any{"pipeline": [][]string{{"sh", "-c", script}}})
			}()
		}
		wg.Wait()
		for _, r := range results {
			if wantOK(t, r).Stages[0].ExitCode == 9 {
				taken++
			}
		}
		return taken
	}
	if n := lockTest(t, startDaemon(t, opts{Args: []string{"--max-runs", "1"}})); n != 0 {
		t.Errorf("--max-runs 1: %d runs overlapped", n)
	}
	if n := lockTest(t, startDaemon(t, opts{})); n == 0 {
		t.Errorf("default cap: no two runs ever overlapped")
	}
}
