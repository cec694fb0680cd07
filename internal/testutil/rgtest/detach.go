package rgtest

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Tests started through sudo from a user's terminal (a tmux pane, an ssh
// login) run with that user above them: the user's shell and tmux among
// the test process's ancestors, the user's login uid, SUDO_UID in its
// environment, the user's terminal on its standard output. rootgated
// rightly takes every approver the tests start as one that user can
// control, and refuses to ask it what a root login session would be
// asked. So Main, in a test process in that position, runs the tests in a
// detached copy of itself instead: re-parented to pid 1 (started by a
// helper that exits at once), in a session of its own without a terminal,
// its login uid unset, without SUDO_* in its environment, its output
// relayed through pipes; this process waits for it and exits with its
// exit code, and the copy ends when this process does. RGTEST_NO_DETACH=1
// in the environment keeps the tests in this process.

// detachEnv tells a copy of the test binary which part it plays: "helper"
// (start the detached copy and exit), "detached" (run the tests).
const detachEnv = "RGTEST_DETACH"

// The detached copy's extra files: it writes its exit code to the first,
// and ends when the second (whose writer is the waiting process) closes.
const (
	codeFD = 3
	lifeFD = 4
)

// controlledBy says why the user-facing uid that started this process
// could control what it starts ("" when nothing but root is above it).
func controlledBy() string {
	if u := os.Getenv("SUDO_UID"); u != "" && u != "0" {
		return "SUDO_UID=" + u
	}
	if b, err := os.ReadFile("/proc/self/loginuid"); err == nil {
		if s := strings.TrimSpace(string(b)); s != "0" && s != "4294967295" {
			return "login uid " + s
		}
	}
	for pid, n := os.Getppid(), 0; pid > 1 && n < 64; n++ {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			return ""
		}
		ppid := 0
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 5 && f[0] == "Uid:":
				for _, u := range f[1:] {
					if u != "0" {
						return "ancestor pid " + strconv.Itoa(pid) + " of uid " + u
					}
				}
			case len(f) == 2 && f[0] == "PPid:":
				ppid, _ = strconv.Atoi(f[1])
			}
		}
		pid = ppid
	}
	return ""
}

// detached runs the part of this process given by detachEnv, if any, and
// reports whether it did, with the exit code.
func detached() (code int, done bool) {
	switch os.Getenv(detachEnv) {
	case "helper":
		return detachHelper(), true
	case "detached":
		// What this process starts is not the detached copy.
		os.Unsetenv(detachEnv)
		isCopy = true
		// Nothing the tests start holds them.
		syscall.CloseOnExec(codeFD)
		syscall.CloseOnExec(lifeFD)
		life := os.NewFile(lifeFD, "life")
		go func() {
			_, _ = io.Copy(io.Discard, life)
			// The waiting process is gone: so are the tests.
			_ = syscall.Kill(0, syscall.SIGKILL)
		}()
		return 0, false
	}
	if os.Geteuid() != 0 || os.Getenv("RGTEST_NO_DETACH") == "1" {
		return 0, false
	}
	why := controlledBy()
	if why == "" {
		return 0, false
	}
	return runDetached(why), true
}

// isCopy is set in the detached copy.
var isCopy bool

// reportCode writes the detached copy's exit code for the waiting process.
func reportCode(code int) {
	if !isCopy {
		return
	}
	f := os.NewFile(codeFD, "code")
	fmt.Fprintf(f, "%d\n", code)
	f.Close()
}

// runDetached starts the helper, relays the detached copy's output and
// returns its exit code.
func runDetached(why string) int {
	outR, outW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	codeR, codeW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	lifeR, lifeW, err := os.Pipe()
	if err != nil {
		return fail(err)
	}
	defer lifeW.Close()
	exe, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "SUDO_") {
			env = append(env, e)
		}
	}
	helper := exec.Command(exe, os.Args[1:]...)
	helper.Env = append(env, detachEnv+"=helper")
	helper.Stdout, helper.Stderr = outW, errW
	helper.ExtraFiles = []*os.File{codeW, lifeR}
	helper.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	fmt.Fprintf(os.Stderr, "rgtest: %s can control what this test process starts: running the tests detached from it (parent pid 1, own session, no login uid, no SUDO_*)\n", why)
	if err := helper.Start(); err != nil {
		return fail(err)
	}
	outW.Close()
	errW.Close()
	codeW.Close()
	lifeR.Close()
	if err := helper.Wait(); err != nil {
		return fail(fmt.Errorf("starting the detached tests: %w", err))
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _, _ = io.Copy(os.Stdout, outR) }()
	go func() { defer wg.Done(); _, _ = io.Copy(os.Stderr, errR) }()
	b, _ := io.ReadAll(codeR)
	wg.Wait()
	code, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fail(fmt.Errorf("the detached tests ended without an exit code"))
	}
	return code
}

// detachHelper starts the detached copy, its login uid unset by a shell
// that then becomes it, and returns at once: the copy's parent becomes
// pid 1.
func detachHelper() int {
	exe, err := os.Executable()
	if err != nil {
		return fail(err)
	}
	os.Setenv(detachEnv, "detached")
	c := exec.Command("/bin/sh", append([]string{"-c", `echo 4294967295 > /proc/self/loginuid 2>/dev/null; exec "$@"`, "sh", exe}, os.Args[1:]...)...)
	c.Stdout, c.Stderr = os.Stdout, os.Stderr
	c.ExtraFiles = []*os.File{os.NewFile(codeFD, "code"), os.NewFile(lifeFD, "life")}
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		return fail(err)
	}
	return 0
}

func fail(err error) int {
	fmt.Fprintln(os.Stderr, "rgtest:", err)
	return 1
}
