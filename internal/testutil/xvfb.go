package testutil

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// StartXvfb starts a private X server (Debian package xvfb) on a display
// it picks itself, waits until the display takes connections, and
// returns its name (":N"). The server is killed when the test ends, and
// if the test process dies. It fails the test, with the server's own
// words, if the server does not come up.
func StartXvfb(t testing.TB, args ...string) (display string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// -displayfd: Xvfb picks a free display and writes its number to fd 3.
	// -noreset: by default an X server resets when its last client
	// leaves, and refuses connections meanwhile, so that a test's next
	// zenity or xdotool, started just as the one before ended, would be
	// told "cannot open display" now and then.
	cmd := exec.Command("Xvfb", append([]string{"-displayfd", "3", "-nolisten", "tcp", "-noreset"}, args...)...)
	cmd.ExtraFiles = []*os.File{w}
	var stderr SyncBuffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start Xvfb (apt-get install xvfb): %v", err)
	}
	w.Close()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	num, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("read Xvfb's display number: %v\n%s", err, &stderr)
	}
	num = strings.TrimSpace(num)
	// The number is written once the server listens; a client is still
	// only told "cannot open display" if it is gone or not listening
	// after all, so wait here for a connection it takes.
	sock := "/tmp/.X11-unix/X" + num
	if !Poll(20*time.Second, func() bool {
		select {
		case <-exited:
			t.Fatalf("Xvfb on :%s exited:\n%s", num, &stderr)
		default:
		}
		var c net.Conn
		if c, err = net.Dial("unix", sock); err != nil {
			return false
		}
		c.Close()
		return true
	}) {
		t.Fatalf("Xvfb on :%s takes no connection on %s after 20s: %v\n%s", num, sock, err, &stderr)
	}
	return ":" + num
}
