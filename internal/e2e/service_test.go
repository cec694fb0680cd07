package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// unitSetting is the value of key= in systemd/rootgate.service, the unit
// the package installs; the test fails when it is not set exactly once.
func unitSetting(t *testing.T, key string) string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "systemd", "rootgate.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var vals []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && k == key {
			vals = append(vals, strings.TrimSpace(v))
		}
	}
	if len(vals) != 1 {
		t.Fatalf("rootgate.service sets %s= %d times, want once", key, len(vals))
	}
	return vals[0]
}

// TestConfigErrorStopsService: a configuration error (a policy with a
// typo, an audit log that cannot be opened) or a bad flag ends rootgated
// with an exit status that rootgate.service's RestartPreventExitStatus=
// lists, so systemd marks the unit failed rather than restarting it for
// ever, and says why on lines the journal files at priority err ("<3>",
// as journalctl -p err shows) when its stderr is the journal's stream. A
// failure that is not the configuration's (the socket already served)
// still exits 1, which Restart=on-failure retries.
func TestConfigErrorStopsService(t *testing.T) {
	t.Parallel()
	var prevent []int
	for _, f := range strings.Fields(unitSetting(t, "RestartPreventExitStatus")) {
		n, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("RestartPreventExitStatus= holds %q", f)
		}
		prevent = append(prevent, n)
	}
	if r := unitSetting(t, "Restart"); r != "on-failure" {
		t.Fatalf("Restart=%s", r)
	}

	live := startDaemon(t, opts{})
	for _, tc := range []struct {
		name   string
		policy string
		args   func(dir string) []string
		code   int
		says   string
	}{
		{"policy typo", "alow any\n", nil, 78, `policy:1: `},
		{"audit path unusable", "ask any\n", func(dir string) []string {
			return []string{"--audit", filepath.Join(dir, "policy", "audit.jsonl")}
		}, 78, `audit: mkdir `},
		{"bad flag", "ask any\n", func(string) []string { return []string{"--idle-exit", "soon"} }, 2, `invalid value "soon" for flag -idle-exit`},
		{"socket in use", "ask any\n", func(string) []string { return []string{"--socket", live.Sock} }, 1, `address already in use`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := shortDir(t)
			if err := os.WriteFile(filepath.Join(dir, "policy"), []byte(tc.policy), 0o600); err != nil {
				t.Fatal(err)
			}
			args := []string{"--socket", filepath.Join(dir, "s"), "--approver-socket", "", "--runtime-dir", filepath.Join(dir, "run"),
				"--policy", filepath.Join(dir, "policy"), "--audit", auditPath(dir)}
			if tc.args != nil {
				args = append(args, tc.args(dir)...)
			}
			for _, journal := range []bool{true, false} {
				code, stderr := runStderrFile(t, journal, rootgated, args...)
				if code != tc.code {
					t.Fatalf("journal %v: exit code %d, want %d\n%s", journal, code, tc.code, stderr)
				}
				if restarts := !slices.Contains(prevent, code); restarts != (tc.code == 1) {
					t.Errorf("exit code %d: systemd restarts it: %v (RestartPreventExitStatus=%v)", code, restarts, prevent)
				}
				prefix := "rootgated: error: "
				if journal {
					prefix = "<3>" + prefix
				}
				var errLine string
				for l := range strings.Lines(stderr) {
					if strings.Contains(l, "rootgated: error: ") {
						errLine = l
						break
					}
				}
				if !strings.HasPrefix(errLine, prefix) || !strings.Contains(errLine, tc.says) {
					t.Errorf("journal %v: error line %q, want %q…%q\n%s", journal, errLine, prefix, tc.says, stderr)
				}
				for l := range strings.Lines(stderr) {
					if journal && strings.HasPrefix(l, "rootgated: ") {
						t.Errorf("line not at priority err: %q", l)
					}
				}
			}
		})
	}
}

// runStderrFile runs bin with args, its stderr a file, and returns its
// exit code and what it wrote there. With journal, JOURNAL_STREAM names
// that file, as systemd names the journal's stream for a unit with
// StandardError=journal.
func runStderrFile(t *testing.T, journal bool, bin string, args ...string) (int, string) {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stderr = f
	cmd.Env = os.Environ()
	if journal {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		cmd.Env = append(cmd.Env, fmt.Sprintf("JOURNAL_STREAM=%d:%d", st.Dev, st.Ino))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var werr error
	select {
	case werr = <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("%s %v still running after 30s", bin, args)
	}
	out, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		return ee.ExitCode(), string(out)
	}
	if werr != nil {
		t.Fatal(werr)
	}
	return 0, string(out)
}

// TestConfigErrorActivated: started by its socket (systemd-socket-activate,
// as rootgate.socket does), a daemon whose policy does not parse exits 78
// on the connection that started it.
func TestConfigErrorActivated(t *testing.T) {
	t.Parallel()
	d := startActivated(t, "alow any\n", []string{"requests", "approvers"})
	if c, err := net.Dial("unix", d.Sock); err == nil {
		defer c.Close()
	}
	if code := d.exited(30 * time.Second); code != 78 {
		t.Fatalf("exit code %d, want 78\n%s", code, d.Stderr)
	}
	if !strings.Contains(d.Stderr.String(), "rootgated: error: ") {
		t.Errorf("no error line:\n%s", d.Stderr)
	}
}

// TestIdleExitAfterLastRequest: the idle exit comes --idle-exit after the
// last connection ended, as the README says, not --idle-exit after the
// replay window (2 × --max-skew) of the last request: the window only
// holds the exit back when it ends later.
func TestIdleExitAfterLastRequest(t *testing.T) {
	t.Parallel()
	// A 5s window and a 5s idle time: the exit comes about 5s after the
	// last request (it would be 9s or more with the window added).
	d := startActivated(t, "allow any\n", []string{"requests", "approvers"}, "--idle-exit", "5s", "--max-skew", "2500ms")
	d.alive()
	last := time.Now()
	if code := d.exited(60 * time.Second); code != 0 {
		t.Fatalf("exit code %d\n%s", code, d.Stderr)
	}
	if took := time.Since(last); took < 4*time.Second || took > 8500*time.Millisecond {
		t.Errorf("idle exit %s after the last request, want about 5s", took.Round(time.Millisecond))
	}
}

// activator plays systemd's part for rootgate.socket,
// rootgate-approve.socket and rootgate.service: it holds the two listening
// sockets for as long as they are "started" and, whenever one has a
// connection waiting and no daemon runs, starts a real rootgated with both
// (LISTEN_FDS, LISTEN_FDNAMES, LISTEN_PID), as socket activation does.
// systemd-socket-activate cannot show this: its sockets end with the
// daemon it started.
type activator struct {
	t       *testing.T
	dir     string
	files   []*os.File // requests, approvers
	stderr  syncBuffer
	mu      sync.Mutex
	daemons []*exec.Cmd // every daemon started, the current one last
	running bool        // the last one has not exited
	exits   chan error  // each daemon's end
	stop    chan struct{}
	done    chan struct{}
}

// startActivator binds dir/s and dir/a and starts serving them.
func startActivator(t *testing.T, dir, policy string) *activator {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "policy"), []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	act := &activator{t: t, dir: dir, exits: make(chan error, 16), stop: make(chan struct{}), done: make(chan struct{})}
	for _, name := range []string{"s", "a"} {
		path := filepath.Join(dir, name)
		_ = os.Remove(path) // systemd replaces a stale socket file too
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		l.SetUnlinkOnClose(false) // the files are the socket units'
		f, err := l.File()
		l.Close()
		if err != nil {
			t.Fatal(err)
		}
		act.files = append(act.files, f)
	}
	go act.loop()
	t.Cleanup(func() { act.stopAll() })
	return act
}

// loop starts a daemon when a connection waits and none runs, until
// stopAll.
func (act *activator) loop() {
	defer close(act.done)
	fds := []unix.PollFd{{Fd: int32(act.files[0].Fd()), Events: unix.POLLIN}, {Fd: int32(act.files[1].Fd()), Events: unix.POLLIN}}
	for {
		select {
		case <-act.stop:
			return
		default:
		}
		n, err := unix.Poll(fds, 50)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			act.t.Errorf("poll: %v", err)
			return
		}
		if n <= 0 {
			continue
		}
		select {
		case <-act.stop: // a stop is pending: no start (systemd does the same)
			return
		default:
		}
		// The shell's pid is the daemon's after exec.
		cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$0" "$@"`, rootgated,
			"--policy", filepath.Join(act.dir, "policy"), "--runtime-dir", filepath.Join(act.dir, "run"), "--audit", auditPath(act.dir))
		cmd.Env = append(os.Environ(), "LISTEN_FDS=2", "LISTEN_FDNAMES=requests:approvers")
		cmd.ExtraFiles = act.files
		cmd.Stderr = &act.stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			act.t.Errorf("start rootgated: %v", err)
			return
		}
		act.mu.Lock()
		act.daemons = append(act.daemons, cmd)
		act.running = true
		act.mu.Unlock()
		err = cmd.Wait()
		act.mu.Lock()
		act.running = false
		act.mu.Unlock()
		act.exits <- err
	}
}

// started is how many daemons were started so far.
func (act *activator) started() int {
	act.mu.Lock()
	defer act.mu.Unlock()
	return len(act.daemons)
}

// stopService is systemctl stop rootgate.service: SIGTERM to the running
// daemon, which must exit 0; the sockets stay.
func (act *activator) stopService() {
	act.t.Helper()
	act.mu.Lock()
	cmd := act.daemons[len(act.daemons)-1]
	act.mu.Unlock()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-act.exits:
		if err != nil {
			act.t.Fatalf("rootgated exited with %v\n%s", err, &act.stderr)
		}
	case <-time.After(30 * time.Second):
		act.t.Fatalf("rootgated did not stop\n%s", &act.stderr)
	}
}

// stopAll is systemctl stop rootgate.socket rootgate-approve.socket
// rootgate.service: the stop is pending first (no connection starts a
// daemon from then on), the daemon stops, then the sockets close.
func (act *activator) stopAll() {
	act.t.Helper()
	select {
	case <-act.stop:
		return
	default:
	}
	close(act.stop)
	act.mu.Lock()
	running := act.running
	act.mu.Unlock()
	if running {
		act.stopService()
	}
	<-act.done
	for _, f := range act.files {
		f.Close()
	}
}

// TestStopWithApproverAttached: with rootgate approve attached, stopping
// rootgate.service alone is a restart (the approver re-attaches at once
// through its socket, which starts a new daemon), and the approver says
// what stops rootgate; stopping the sockets with the service, as the
// README says, keeps it stopped: the approver waits, starts nothing, and
// rootgate ping says what to start. Starting the sockets again brings the
// approver back without a hand on it.
func TestStopWithApproverAttached(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	act := startActivator(t, dir, "ask any\n")
	a := startApprover(t, filepath.Join(dir, "a"), 0)
	a.See("attached to rootgated")
	if n := act.started(); n != 1 {
		t.Fatalf("%d daemons started by one approver", n)
	}

	// systemctl stop rootgate.service
	act.stopService()
	a.See("which under systemd starts it again: to stop rootgate, stop its sockets too: systemctl stop rootgate.socket rootgate-approve.socket rootgate.service")
	a.See("attached to rootgated")
	if n := act.started(); n != 2 {
		t.Fatalf("%d daemons started, want 2: the approver's re-attach starts one", n)
	}

	// systemctl stop rootgate.socket rootgate-approve.socket rootgate.service
	act.stopAll()
	a.See("connection to rootgated lost")
	a.See("rootgate: waiting for rootgated at " + filepath.Join(dir, "a"))
	if n := act.started(); n != 2 {
		t.Fatalf("%d daemons started after everything was stopped", n)
	}
	out, err := exec.Command(rootgateBin, "ping", "--socket", filepath.Join(dir, "s")).CombinedOutput()
	if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 70 ||
		!strings.Contains(string(out), "rootgate: hint: is rootgated running? as a service: sudo systemctl start rootgate.socket rootgate-approve.socket") {
		t.Errorf("ping with rootgate stopped: %v\n%s", err, out)
	}

	// systemctl start rootgate.socket rootgate-approve.socket
	act2 := startActivator(t, dir, "ask any\n")
	a.See("attached to rootgated")
	if n := act2.started(); n != 1 {
		t.Fatalf("%d daemons started by the approver's return", n)
	}
	act2.stopAll()
}
