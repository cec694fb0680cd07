package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// The real binaries, built once for the whole run.
var rootgated, rootgateBin string

func TestMain(m *testing.M) {
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "daemon tests run real daemons and need root")
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "rootgate-bin")
	if err == nil {
		err = os.Chmod(dir, 0o755) // tests run the client as nobody too
	}
	if err != nil {
		panic(err)
	}
	// Build with the race detector when the tests have it, so the daemon is
	// checked too.
	args := []string{"build"}
	if raceEnabled {
		args = append(args, "-race")
	}
	rootgated = filepath.Join(dir, "rootgated")
	rootgateBin = filepath.Join(dir, "rootgate")
	for bin, pkg := range map[string]string{rootgated: "../cmd/rootgated", rootgateBin: "../cmd/rootgate"} {
		cmd := exec.Command("go", append(args, "-o", bin, pkg)...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// shortDir is a private directory with a short path, for sockets.
var shortDir = testutil.ShortDir

// syncBuffer is a goroutine-safe buffer for output read while written.
type syncBuffer = testutil.SyncBuffer

// daemonProc is a running rootgated.
type daemonProc struct {
	t      testing.TB
	cmd    *exec.Cmd
	dir    string
	sock   string
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

// opts of a test daemon.
type opts struct {
	policy string   // policy file text; "" means "allow any,env=*" (everything)
	noFile bool     // no policy file at all
	args   []string // more flags
	dir    string   // reuse this directory (runtime dir and socket)
	prefix []string // run the daemon through this command (e.g. nohup)
}

// startDaemon starts rootgated on a private socket and waits until it
// answers. It is stopped with SIGTERM at cleanup, and must exit 0.
func startDaemon(t testing.TB, o opts) *daemonProc {
	t.Helper()
	d := &daemonProc{t: t, dir: o.dir, stderr: &syncBuffer{}, done: make(chan struct{})}
	if d.dir == "" {
		d.dir = shortDir(t)
	}
	d.sock = filepath.Join(d.dir, "s")
	policy := filepath.Join(d.dir, "policy")
	if !o.noFile {
		text := o.policy
		if text == "" {
			text = "allow any,env=*\n"
		}
		if err := os.WriteFile(policy, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"--socket", d.sock, "--approver-socket", filepath.Join(d.dir, "a"), "--runtime-dir", filepath.Join(d.dir, "run"), "--policy", policy, "--audit", auditPath(d.dir)}, o.args...)
	if len(o.prefix) > 0 {
		d.cmd = exec.Command(o.prefix[0], append(append(o.prefix[1:], rootgated), args...)...)
	} else {
		d.cmd = exec.Command(rootgated, args...)
	}
	d.cmd.Stderr = d.stderr
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.err = d.cmd.Wait(); close(d.done) }()
	t.Cleanup(func() { d.stop() })
	d.waitReady()
	return d
}

func (d *daemonProc) waitReady() {
	d.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-d.done:
			d.t.Fatalf("rootgated exited early: %v\n%s", d.err, d.stderr)
		default:
		}
		// A connection succeeds as soon as the socket is bound, before
		// the daemon has set its mode; "serving" is logged after that.
		if c, err := net.Dial("unix", d.sock); err == nil {
			c.Close()
			if strings.Contains(d.stderr.String(), "msg=serving") {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.t.Fatalf("rootgated did not listen on %s\n%s", d.sock, d.stderr)
}

// stop sends SIGTERM and requires a clean exit that removes the socket.
func (d *daemonProc) stop() {
	d.t.Helper()
	if !d.terminate() {
		return
	}
	if _, err := os.Lstat(d.sock); err == nil {
		d.t.Errorf("socket %s left behind after exit", d.sock)
	}
}

// terminate sends SIGTERM to a daemon still running and requires it to
// exit 0 within 30 s. It reports whether it stopped the daemon cleanly.
func (d *daemonProc) terminate() bool {
	d.t.Helper()
	select {
	case <-d.done:
		return false
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.cmd.Process.Kill()
		<-d.done
		d.t.Errorf("rootgated did not stop on SIGTERM\n%s", d.stderr)
		return false
	}
	if d.err != nil {
		d.t.Errorf("rootgated exited with %v\n%s", d.err, d.stderr)
		return false
	}
	d.verifyAudit()
	return true
}

// auditPath is where a test daemon in dir keeps its audit log.
func auditPath(dir string) string { return filepath.Join(dir, "audit.jsonl") }

// verifyAudit checks the daemon's audit log with the real
// "rootgate audit verify": every test daemon's trail must hold together.
func (d *daemonProc) verifyAudit() {
	d.t.Helper()
	if _, err := os.Stat(auditPath(d.dir)); err != nil {
		return // this daemon kept its log elsewhere
	}
	out, err := exec.Command(rootgateBin, "audit", "verify", "--file", auditPath(d.dir)).CombinedOutput()
	if err != nil {
		d.t.Errorf("audit log of the daemon in %s does not verify: %v\n%s", d.dir, err, out)
	}
}

// request builds a fresh, valid request line with overrides; a nil value
// deletes the field.
func request(over map[string]any) string {
	m := map[string]any{
		"id":       uuid.NewString(),
		"time":     time.Now().UTC().Format(time.RFC3339Nano),
		"pipeline": [][]string{{"true"}},
	}
	for k, v := range over {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b) + "\n"
}

// response is a decoded answer plus its raw line.
type response struct {
	wire.Response
	raw string
}

// sendRaw writes raw bytes, half-closes, and reads the answer line.
func (d *daemonProc) sendRaw(raw string) response {
	d.t.Helper()
	c, err := net.Dial("unix", d.sock)
	if err != nil {
		d.t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	// A daemon that refuses the connection at once (busy) may answer and
	// close before the request is written: read its answer anyway, as
	// internal/client does.
	if _, err := c.Write([]byte(raw)); err == nil {
		c.(*net.UnixConn).CloseWrite()
	}
	return readResponse(d.t, c)
}

func readResponse(t testing.TB, c net.Conn) response {
	t.Helper()
	line, err := bufio.NewReaderSize(c, 1<<20).ReadString('\n')
	if err != nil {
		t.Fatalf("read answer: %v (got %q)", err, line)
	}
	var r response
	r.raw = line
	if err := json.Unmarshal([]byte(line), &r.Response); err != nil {
		t.Fatalf("answer %q: %v", line, err)
	}
	if r.Version == "" {
		t.Errorf("answer without version: %s", line)
	}
	return r
}

// send sends a request built from overrides.
func (d *daemonProc) send(over map[string]any) response {
	d.t.Helper()
	return d.sendRaw(request(over))
}

// wantError asserts an error answer with exactly msg.
func wantError(t testing.TB, r response, msg string) {
	t.Helper()
	if r.Status != wire.StatusError || r.Message != msg {
		t.Fatalf("got %s, want error %q", strings.TrimSpace(r.raw), msg)
	}
}

// wantOK asserts an ok answer and returns it.
func wantOK(t testing.TB, r response) response {
	t.Helper()
	if r.Status != wire.StatusOK {
		t.Fatalf("got %s, want ok", strings.TrimSpace(r.raw))
	}
	return r
}

// alive asserts the daemon still answers.
func (d *daemonProc) alive() {
	d.t.Helper()
	r := d.send(map[string]any{"action": "ping", "pipeline": nil})
	if r.Status != wire.StatusOK || r.Message != "pong" {
		d.t.Fatalf("daemon no longer answers ping: %s", r.raw)
	}
}

// procsWith lists the pids whose command line contains marker.
func procsWith(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(marker)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitFor polls cond until it holds or the deadline passes.
var waitFor = testutil.WaitFor

// noSurvivors asserts no process with marker in its command line remains.
func noSurvivors(t testing.TB, marker string) {
	t.Helper()
	waitFor(t, "no process with "+marker, 10*time.Second, func() bool { return len(procsWith(marker)) == 0 })
}

// fdCount counts a process's open descriptors.
func fdCount(t testing.TB, pid int) int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func lookupGroup(name string) (*user.Group, error) { return user.LookupGroup(name) }

// startDaemonNoWait starts a daemon on dir's socket without waiting for it.
func startDaemonNoWait(t testing.TB, dir string) *daemonProc {
	d := &daemonProc{t: t, dir: dir, sock: filepath.Join(dir, "s"), stderr: &syncBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(rootgated, "--socket", d.sock, "--approver-socket", filepath.Join(dir, "a2"), "--runtime-dir", filepath.Join(dir, "run2"), "--policy", filepath.Join(dir, "policy"), "--audit", auditPath(dir))
	d.cmd.Stderr = d.stderr
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return d
}

// Wait waits for a daemon started by startDaemonNoWait.
func (d *daemonProc) Wait() error { return d.cmd.Wait() }

// userAccount is a throw-away local account made with useradd (addAccount).
type userAccount struct {
	name     string
	uid, gid uint32
}

// addAccount creates the account name (removed again at cleanup), with
// more useradd flags; concurrent useradds may hold /etc/passwd's lock for
// a moment, so it retries.
func addAccount(t *testing.T, name string, flags ...string) userAccount {
	t.Helper()
	_ = exec.Command("userdel", "-r", name).Run() // a leftover of a killed run
	var out []byte
	var err error
	for range 20 {
		if out, err = exec.Command("useradd", append(flags, name)...).CombinedOutput(); err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		for range 20 {
			if exec.Command("userdel", "-r", name).Run() == nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Errorf("userdel %s failed", name)
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return userAccount{name: name, uid: uint32(uid), gid: uint32(gid)}
}
