package e2e

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
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/wire"
)

// rootgated and rootgateBin are the real binaries (rgtest.Binaries),
// built once for the whole run by TestMain.
var rootgated, rootgateBin string

func TestMain(m *testing.M) {
	if path := os.Getenv(mmapEnv); path != "" {
		os.Exit(mmapWriter(path))
	}
	if sock := os.Getenv(proxyEnv); sock != "" {
		os.Exit(relayProxy(sock))
	}
	if socks := os.Getenv(twinEnv); socks != "" {
		os.Exit(twinSend(socks))
	}
	if path := os.Getenv(markEnv); path != "" {
		os.Exit(markRan(path))
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "daemon tests run real daemons and need root")
		os.Exit(1)
	}
	rootgated, rootgateBin = rgtest.Binaries(mainTB{})
	os.Exit(rgtest.Main(m))
}

// mainTB reports a failure to build the binaries before any test runs.
type mainTB struct{ testing.TB }

func (mainTB) Helper() {}
func (mainTB) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

// shortDir is a private directory with a short path, for sockets.
var shortDir = testutil.ShortDir

// syncBuffer is a goroutine-safe buffer for output read while written.
type syncBuffer = testutil.SyncBuffer

// daemonProc is a running rootgated (rgtest.Daemon) with this package's
// request helpers.
type daemonProc struct{ *rgtest.Daemon }

// opts of a test daemon.
type opts = rgtest.Opts

// startDaemon starts rootgated on a private socket and waits until it
// answers. It is stopped with SIGTERM at cleanup, and must exit 0.
func startDaemon(t testing.TB, o opts) *daemonProc {
	t.Helper()
	return &daemonProc{rgtest.StartDaemon(t, o)}
}

// newDaemon is a daemon in dir that the test starts itself.
func newDaemon(t testing.TB, dir string) *daemonProc {
	return &daemonProc{rgtest.NewDaemon(t, dir)}
}

// auditPath is where a test daemon in dir keeps its audit log.
var auditPath = rgtest.AuditPath

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
	d.T.Helper()
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		d.T.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	// A daemon that refuses the connection at once (busy) may answer and
	// close before the request is written: read its answer anyway, as
	// internal/client does.
	if _, err := c.Write([]byte(raw)); err == nil {
		c.(*net.UnixConn).CloseWrite()
	}
	return readResponse(d.T, c)
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
	d.T.Helper()
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
	d.T.Helper()
	r := d.send(map[string]any{"action": "ping", "pipeline": nil})
	if r.Status != wire.StatusOK || r.Message != "pong" {
		d.T.Fatalf("daemon no longer answers ping: %s", r.raw)
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

// killAtEnd kills, when the test ends, every process whose command line
// holds one of markers: what a test's killed daemon left running.
func killAtEnd(t testing.TB, markers ...string) {
	t.Cleanup(func() {
		for _, m := range markers {
			for _, pid := range procsWith(m) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

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
	return &daemonProc{rgtest.StartDaemonNoWait(t, dir)}
}

// userAccount is a throw-away local account made with useradd (addAccount).
type userAccount struct {
	name     string
	uid, gid uint32
}

// addAccount creates the account name (removed again at cleanup), with
// more useradd flags; concurrent useradds may hold /etc/passwd's lock for
// a moment, so it retries. A test that runs in parallel uses names no
// other test uses; tests sharing a name stay serial.
func addAccount(t *testing.T, name string, flags ...string) userAccount {
	t.Helper()
	_ = exec.Command("userdel", "-r", name).Run() // a leftover of a killed run
	// A killed run may also leave the home directory without the account;
	// useradd -m would keep it, root's, and the account could not use it.
	if _, err := user.Lookup(name); err != nil {
		_ = os.RemoveAll(filepath.Join("/home", name))
	}
	var out []byte
	var err error
	if !testutil.Poll(10*time.Second, func() bool {
		out, err = exec.Command("useradd", append(flags, name)...).CombinedOutput()
		return err == nil
	}) {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if !testutil.Poll(10*time.Second, func() bool { return exec.Command("userdel", "-r", name).Run() == nil }) {
			t.Errorf("userdel %s failed", name)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return userAccount{name: name, uid: uint32(uid), gid: uint32(gid)}
}
