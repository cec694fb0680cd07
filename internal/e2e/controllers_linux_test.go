package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/rootgate/rootgate/internal/peerid"
)

// startSleeper starts a long sleep as root with the given set-up and
// returns it; it is killed at cleanup.
func startSleeper(t *testing.T, setup func(*exec.Cmd)) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "1000")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if setup != nil {
		setup(cmd)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

func controllers(t *testing.T, pid int) []int {
	t.Helper()
	c, err := peerid.Controllers(pid)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ptyOwnedBy opens a pseudo-terminal whose slave belongs to uid.
func ptyOwnedBy(t *testing.T, uid int) (master, slave *os.File) {
	t.Helper()
	master, slave, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close(); slave.Close() })
	if err := os.Chown(slave.Name(), uid, -1); err != nil {
		t.Fatal(err)
	}
	return master, slave
}

func TestControllers(t *testing.T) {
	t.Parallel()
	t.Run("plain root process", func(t *testing.T) {
		cmd := startSleeper(t, nil)
		for _, u := range []int{54320, 54321, 54322, 54323, 54324} {
			if slices.Contains(controllers(t, cmd.Process.Pid), u) {
				t.Fatalf("uid %d in %v", u, controllers(t, cmd.Process.Pid))
			}
		}
	})
	t.Run("SUDO_UID", func(t *testing.T) {
		cmd := startSleeper(t, func(c *exec.Cmd) { c.Env = append(c.Env, "SUDO_UID=54321") })
		if c := controllers(t, cmd.Process.Pid); !slices.Contains(c, 54321) {
			t.Fatalf("SUDO_UID=54321 not in %v", c)
		}
	})
	t.Run("loginuid", func(t *testing.T) {
		cmd := exec.Command("sh", "-c", "echo 54322 > /proc/self/loginuid && exec sleep 1000")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := cmd.Process.Pid
		waitFor(t, "loginuid to be set", 10*time.Second, func() bool {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/loginuid")
			return strings.TrimSpace(string(b)) == "54322"
		})
		if c := controllers(t, pid); !slices.Contains(c, 54322) {
			t.Fatalf("loginuid 54322 not in %v", c)
		}
	})
	t.Run("controlling terminal", func(t *testing.T) {
		// The terminal is the controlling one only: fds 0-2 are /dev/null.
		_, slave := ptyOwnedBy(t, 54323)
		cmd := startSleeper(t, func(c *exec.Cmd) {
			c.ExtraFiles = []*os.File{slave}
			c.SysProcAttr.Setsid, c.SysProcAttr.Setctty, c.SysProcAttr.Ctty = true, true, 3
		})
		if c := controllers(t, cmd.Process.Pid); !slices.Contains(c, 54323) {
			t.Fatalf("the owner 54323 of the controlling terminal %s not in %v", slave.Name(), c)
		}
	})
	t.Run("terminal on stdin", func(t *testing.T) {
		_, slave := ptyOwnedBy(t, 54324)
		cmd := startSleeper(t, func(c *exec.Cmd) { c.Stdin = slave })
		if c := controllers(t, cmd.Process.Pid); !slices.Contains(c, 54324) {
			t.Fatalf("the owner 54324 of the terminal on fd 0 not in %v", c)
		}
	})
	t.Run("ancestry", func(t *testing.T) {
		// An account runs sudo, which runs a root shell with SUDO_UID
		// removed: only sudo, its parent, names the account.
		op := addAccount(t, "rgtk0op", "--create-home")
		allowSudo(t, op.name, "/usr/bin/env")
		dir := t.TempDir()
		pidFile := filepath.Join(dir, "pid")
		cmd := exec.Command("runuser", "-u", op.name, "--", "sudo", "-n", "/usr/bin/env", "-u", "SUDO_UID",
			"/bin/sh", "-c", `echo $$ > "$1"; exec sleep 1000`, "sh", pidFile)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		var pid int
		t.Cleanup(func() {
			if pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			cmd.Wait()
		})
		waitFor(t, "the root shell under sudo to start", 10*time.Second, func() bool {
			b, err := os.ReadFile(pidFile)
			if err != nil || !strings.HasSuffix(string(b), "\n") {
				return false
			}
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			return true
		})
		env, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
		if err != nil || strings.Contains(string(env), "SUDO_UID=") {
			t.Fatalf("the shell's environment has SUDO_UID (or is unreadable: %v)", err)
		}
		waitFor(t, "sleep to replace the shell", 10*time.Second, func() bool {
			b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			return strings.TrimSpace(string(b)) == "sleep"
		})
		if c := controllers(t, pid); !slices.Contains(c, int(op.uid)) {
			t.Fatalf("uid %d of the account that ran sudo not in %v", op.uid, c)
		}
	})
	t.Run("gone", func(t *testing.T) {
		cmd := exec.Command("true")
		if err := cmd.Run(); err != nil {
			t.Fatal(err)
		}
		if _, err := peerid.Controllers(cmd.Process.Pid); err == nil {
			t.Fatal("no error for a process that is gone")
		}
	})
}
