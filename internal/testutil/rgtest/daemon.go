package rgtest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// Daemon is a real rootgated on a private socket.
type Daemon struct {
	T      testing.TB
	Cmd    *exec.Cmd
	Dir    string // its directory: sockets, policy, runtime dir, audit log
	Sock   string // its request socket
	Stderr *testutil.SyncBuffer
	done   chan struct{}
	err    error
}

// Opts are a test daemon's settings.
type Opts struct {
	Policy string   // policy file text; "" means "allow any,env=*" (everything)
	NoFile bool     // no policy file at all
	Args   []string // more flags
	Dir    string   // reuse this directory (runtime dir and socket)
	Prefix []string // run the daemon through this command (e.g. nohup)
	Env    []string // the daemon's whole environment; nil means the test's

	// DefaultCgroup leaves out the --cgroup CgroupParent a daemon gets
	// when Args has no --cgroup: its default (auto) applies.
	DefaultCgroup bool
	// NoProbe waits for the daemon to say it serves without connecting
	// to it: a test of the connection caps then knows that its first
	// connection is the daemon's first (WaitServing).
	NoProbe bool
}

// StartDaemon starts rootgated on a private socket and waits until it
// serves. It is stopped with SIGTERM when t ends, and must then exit 0,
// remove its socket and leave an audit log that `rootgate audit verify`
// accepts.
func StartDaemon(t testing.TB, o Opts) *Daemon {
	t.Helper()
	dir := o.Dir
	if dir == "" {
		dir = testutil.ShortDir(t)
	}
	d := NewDaemon(t, dir)
	policy := filepath.Join(d.Dir, "policy")
	if !o.NoFile {
		text := o.Policy
		if text == "" {
			text = "allow any,env=*\n"
		}
		if err := os.WriteFile(policy, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	args := append([]string{"--socket", d.Sock, "--approver-socket", d.ApproverSock(), "--runtime-dir", filepath.Join(d.Dir, "run"), "--policy", policy, "--audit", AuditPath(d.Dir)}, o.Args...)
	if !hasCgroupFlag(o.Args) && !o.DefaultCgroup {
		if cg := CgroupParent(t); cg != "" {
			args = append(args, "--cgroup", cg)
		}
	}
	bin := Rootgated(t)
	if len(o.Prefix) > 0 {
		d.Cmd = exec.Command(o.Prefix[0], append(append(o.Prefix[1:], bin), args...)...)
	} else {
		d.Cmd = exec.Command(bin, args...)
	}
	d.Cmd.Env = o.Env
	d.Start()
	if o.NoProbe {
		d.WaitServing()
	} else {
		d.WaitReady()
	}
	return d
}

// Start starts Cmd, set by the caller after NewDaemon, with its stderr
// kept in Stderr and killed if the test process dies, and stops it (Stop)
// when the test ends.
func (d *Daemon) Start() {
	d.T.Helper()
	if d.Cmd.Stderr == nil {
		d.Cmd.Stderr = d.Stderr
	}
	if d.Cmd.SysProcAttr == nil {
		d.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := d.Cmd.Start(); err != nil {
		d.T.Fatal(err)
	}
	d.Watch()
	d.T.Cleanup(func() { d.Stop() })
}

// NewDaemon is a Daemon in dir (socket dir/s) that the caller starts
// itself: it sets Cmd, then calls Start (or starts Cmd and calls Watch).
func NewDaemon(t testing.TB, dir string) *Daemon {
	return &Daemon{T: t, Dir: dir, Sock: filepath.Join(dir, "s"), Stderr: &testutil.SyncBuffer{}, done: make(chan struct{})}
}

// Watch waits for the started Cmd in the background (Done, Err).
func (d *Daemon) Watch() {
	go func() { d.err = d.Cmd.Wait(); close(d.done) }()
}

// StartDaemonNoWait starts a daemon on dir's socket (with the policy file
// dir/policy) without waiting for it to serve: for a test that expects it
// to exit. One still running when the test ends is killed, so a daemon
// that wrongly serves fails the test's wait rather than outliving it.
func StartDaemonNoWait(t testing.TB, dir string) *Daemon {
	t.Helper()
	d := NewDaemon(t, dir)
	d.Cmd = exec.Command(Rootgated(t), "--socket", d.Sock, "--approver-socket", filepath.Join(dir, "a2"), "--runtime-dir", filepath.Join(dir, "run2"), "--policy", filepath.Join(dir, "policy"), "--audit", AuditPath(dir))
	d.Cmd.Stderr = d.Stderr
	d.Cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.Watch()
	t.Cleanup(func() {
		d.Cmd.Process.Kill()
		<-d.done
	})
	return d
}

// WaitExit waits at most limit for the daemon to exit and returns how it
// ended; it fails the test if it is still running then.
func (d *Daemon) WaitExit(limit time.Duration) error {
	d.T.Helper()
	select {
	case <-d.done:
		return d.err
	case <-time.After(limit):
		d.T.Fatalf("rootgated still running after %s:\n%s", limit, d.Stderr)
		return nil
	}
}

// ApproverSock is the daemon's approver socket.
func (d *Daemon) ApproverSock() string { return filepath.Join(d.Dir, "a") }

// Done is closed when the daemon has exited; Err then says how.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Err is the daemon's exit error, once Done is closed.
func (d *Daemon) Err() error { return d.err }

// Wait waits for the daemon to exit and returns its exit error.
func (d *Daemon) Wait() error { <-d.done; return d.err }

// WaitServing waits until the daemon has logged that it serves (after
// it listens and set the socket's mode), without connecting to it.
func (d *Daemon) WaitServing() {
	d.T.Helper()
	testutil.WaitFor(d.T, "rootgated to say it serves on "+d.Sock, 30*time.Second, func() bool {
		select {
		case <-d.done:
			d.T.Fatalf("rootgated exited early: %v\n%s", d.err, d.Stderr)
		default:
		}
		return strings.Contains(d.Stderr.String(), "msg=serving")
	})
}

// WaitReady waits until the daemon accepts connections and has logged
// that it serves (after it set the socket's mode).
func (d *Daemon) WaitReady() {
	d.T.Helper()
	testutil.WaitFor(d.T, "rootgated to serve on "+d.Sock, 30*time.Second, func() bool {
		select {
		case <-d.done:
			d.T.Fatalf("rootgated exited early: %v\n%s", d.err, d.Stderr)
		default:
		}
		c, err := net.Dial("unix", d.Sock)
		if err != nil {
			return false
		}
		c.Close()
		return strings.Contains(d.Stderr.String(), "msg=serving")
	})
}

// Stop sends SIGTERM and requires a clean exit that removes the socket.
func (d *Daemon) Stop() {
	d.T.Helper()
	if !d.Terminate() {
		return
	}
	if _, err := os.Lstat(d.Sock); err == nil {
		d.T.Errorf("socket %s left behind after exit", d.Sock)
	}
}

// Terminate sends SIGTERM to a daemon still running and requires it to
// exit 0 within 30 s with an audit log that verifies. It reports whether
// it stopped the daemon cleanly.
func (d *Daemon) Terminate() bool {
	d.T.Helper()
	select {
	case <-d.done:
		// Killed by the test, or dead by itself: a failing test's
		// errors (a connection reset, say) may be that death's.
		if d.T.Failed() {
			d.T.Logf("rootgated had ended (%v) before the test did\n%s", d.err, d.Stderr)
		}
		return false
	default:
	}
	_ = d.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		d.Cmd.Process.Kill()
		<-d.done
		d.T.Errorf("rootgated did not stop on SIGTERM\n%s", d.Stderr)
		return false
	}
	if d.err != nil {
		d.T.Errorf("rootgated exited with %v\n%s", d.err, d.Stderr)
		return false
	}
	d.VerifyAudit()
	return true
}

// AuditPath is where a test daemon in dir keeps its audit log.
func AuditPath(dir string) string { return filepath.Join(dir, "audit.jsonl") }

// VerifyAudit checks the daemon's audit log with the real
// `rootgate audit verify`: every test daemon's trail must hold together.
func (d *Daemon) VerifyAudit() {
	d.T.Helper()
	if _, err := os.Stat(AuditPath(d.Dir)); err != nil {
		return // this daemon kept its log elsewhere
	}
	out, err := exec.Command(Rootgate(d.T), "audit", "verify", "--file", AuditPath(d.Dir)).CombinedOutput()
	if err != nil {
		d.T.Errorf("audit log of the daemon in %s does not verify: %v\n%s", d.Dir, err, out)
	}
}
