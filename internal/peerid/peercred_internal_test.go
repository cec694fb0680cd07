package peerid

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"golang.org/x/sys/unix"
)

// peerConn starts perl as a client of a fresh socket and returns the
// daemon's end of the connection and the client process. With exit, the
// client exits (and is reaped) right after connecting; otherwise it waits
// until its stdin closes.
func peerConn(t *testing.T, exit bool) (*net.UnixConn, *exec.Cmd) {
	t.Helper()
	dir := testutil.ShortDir(t)
	sock := filepath.Join(dir, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	script := `use IO::Socket::UNIX; my $c = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die; ` +
		`if ($ARGV[1] ne "exit") { my $x = <STDIN>; }`
	mode := "stay"
	if exit {
		mode = "exit"
	}
	cmd := exec.Command("perl", "-e", script, sock, mode)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	_ = ln.SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if exit {
		if err := cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	return c, cmd
}

// TestPeerExePinned: the executable of a live peer is read through its
// pidfd, by SO_PEERPIDFD and by the pidfd_open fallback.
func TestPeerExePinned(t *testing.T) {
	t.Parallel()
	c, cmd := peerConn(t, false)
	want, err := os.Readlink("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Of(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != cmd.Process.Pid || p.Exe != want {
		t.Errorf("peer = pid %d exe %q, want pid %d exe %q", p.PID, p.Exe, cmd.Process.Pid, want)
	}
	// This kernel has SO_PEERPIDFD: the pidfd it hands over is the peer's.
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	_ = rc.Control(func(fd uintptr) {
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_PEERPIDFD)
		if err != nil {
			t.Errorf("SO_PEERPIDFD: %v", err)
			return
		}
		defer unix.Close(v)
		if got := pidOfPidfd(v); got != cmd.Process.Pid {
			t.Errorf("SO_PEERPIDFD names pid %d, want %d", got, cmd.Process.Pid)
		}
	})
	pidfd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	if got, own := exeOf(pidfd, p.PID); got != want || own {
		t.Errorf("pidfd_open fallback: exe %q (own namespace %v), want %q in ours", got, own, want)
	}
	if got, _ := exeOf(pidfd, p.PID+1); got != "" {
		t.Errorf("a pidfd of another pid gave exe %q, want \"\"", got)
	}
}

// TestPeerExeGone: a peer that exited before it was looked at has no
// executable, rather than whatever process might now hold its pid.
func TestPeerExeGone(t *testing.T) {
	t.Parallel()
	c, cmd := peerConn(t, true)
	p, err := Of(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.PID != cmd.Process.Pid {
		t.Errorf("pid %d, want %d", p.PID, cmd.Process.Pid)
	}
	if p.Exe != "" {
		t.Errorf("exe of an exited peer = %q, want \"\"", p.Exe)
	}
}
