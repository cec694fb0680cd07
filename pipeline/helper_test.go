package pipeline

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"golang.org/x/sys/unix"
)

// The test binary impersonates the stages of the runs under test, as
// os/exec's tests do: run with argv[0] == helperArgv0, TestMain runs the
// helper named by argv[1] with the arguments that follow instead of the
// tests. The selection travels in argv because a run's environment is built
// from nothing.
const helperArgv0 = "rootgate-pipeline-helper"

// helpers maps a helper's name to its code. A helper returns its exit code.
var helpers = map[string]func(args []string) int{
	"echo":        helperEcho,
	"catexit":     helperCatExit,
	"exit":        helperExit,
	"write":       helperWrite,
	"allbytes":    helperAllBytes,
	"pass-stderr": helperPassStderr,
	"head":        helperHead,
	"raise":       helperRaise,
	"sleep":       helperSleep,
	"ignore-term": helperIgnoreTerm,
	"spawn":       helperSpawn,
	"close-out":   helperCloseOut,
	"fds":         helperFDs,
	"id":          helperID,
}

// helpersUsed records which helpers the tests asked for, so TestMain can
// fail on one nobody uses (os/exec's tests do the same).
var helpersUsed sync.Map

// testExe is the absolute path of the test binary, set by TestMain.
var testExe string

func TestMain(m *testing.M) {
	if os.Args[0] == helperArgv0 {
		// Not os.Exit: with -race, that sleeps a second at exit
		// (GORACE atexit_sleep_ms), which a run's environment cannot
		// turn off.
		syscall.Exit(runHelper(os.Args[1:]))
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeline test:", err)
		os.Exit(2)
	}
	testExe = exe
	// As rootgated does: escaped processes come back to be swept.
	if err := Subreaper(); err != nil {
		fmt.Fprintln(os.Stderr, "pipeline test:", err)
		os.Exit(2)
	}
	code := m.Run()
	if code == 0 && flag.Lookup("test.run").Value.String() == "" && flag.Lookup("test.skip").Value.String() == "" && !testing.Short() {
		for name := range helpers {
			if _, ok := helpersUsed.Load(name); !ok {
				fmt.Fprintf(os.Stderr, "helper %q is not used by any test\n", name)
				code = 1
			}
		}
	}
	os.Exit(code)
}

func runHelper(args []string) int {
	if len(args) == 0 || helpers[args[0]] == nil {
		fmt.Fprintf(os.Stderr, "helper: unknown helper %q\n", args)
		return 2
	}
	return helpers[args[0]](args[1:])
}

// helperArgv returns the argv of a stage played by helper name.
func helperArgv(name string, args ...string) []string {
	if helpers[name] == nil {
		panic("no helper " + name)
	}
	helpersUsed.Store(name, true)
	return append([]string{helperArgv0, name}, args...)
}

// helperCmd returns a Cmd whose stages are helpers, each given as name
// followed by arguments.
func helperCmd(stages ...[]string) *Cmd {
	c := &Cmd{}
	for _, s := range stages {
		c.Argv = append(c.Argv, helperArgv(s[0], s[1:]...))
		c.Paths = append(c.Paths, testExe)
	}
	return c
}

// pattern returns the n bytes helpers write with "write" and "pass-stderr":
// a sequence that does not repeat with a power of two, so misplaced
// chunks show.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// writePattern writes n pattern bytes to w in chunks.
func writePattern(w io.Writer, n int) error {
	chunk := pattern(251 * 256)
	for n > 0 {
		k := min(n, len(chunk))
		if _, err := w.Write(chunk[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// ready creates the file path (unless it is "-") to tell the test that the
// helper is set up.
func ready(path string) {
	if path == "-" {
		return
	}
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		panic(err)
	}
}

// sleepForever sleeps until killed.
func sleepForever() int {
	for {
		time.Sleep(time.Hour)
	}
}

// echo ARGS...: print ARGS to stdout.
func helperEcho(args []string) int {
	fmt.Println(strings.Join(args, " "))
	return 0
}

// catexit CODE MSG: MSG to stderr, copy stdin to stdout, exit with CODE.
func helperCatExit(args []string) int {
	fmt.Fprint(os.Stderr, args[1])
	if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
		return 99
	}
	return atoi(args[0])
}

// exit CODE MSG: MSG to stderr and exit with CODE, reading nothing.
func helperExit(args []string) int {
	fmt.Fprint(os.Stderr, args[1])
	return atoi(args[0])
}

// write FD N [STEP]: write N pattern bytes to fd 1 or 2, in writes of
// STEP bytes when given.
func helperWrite(args []string) int {
	f := os.Stdout
	if args[0] == "2" {
		f = os.Stderr
	}
	if len(args) > 2 {
		p, step := pattern(atoi(args[1])), atoi(args[2])
		for i := 0; i < len(p); i += step {
			if _, err := f.Write(p[i:min(i+step, len(p))]); err != nil {
				return 99
			}
		}
		return 0
	}
	if err := writePattern(f, atoi(args[1])); err != nil {
		return 99
	}
	return 0
}

// allbytes: write the 256 byte values to stdout.
func helperAllBytes([]string) int {
	var b [256]byte
	for i := range b {
		b[i] = byte(i)
	}
	os.Stdout.Write(b[:])
	return 0
}

// pass-stderr N: write N pattern bytes to stderr, then copy stdin to stdout.
func helperPassStderr(args []string) int {
	if err := writePattern(os.Stderr, atoi(args[0])); err != nil {
		return 98
	}
	if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
		return 99
	}
	return 0
}

// head N: copy the first N bytes of stdin to stdout and exit without
// reading more.
func helperHead(args []string) int {
	if _, err := io.CopyN(os.Stdout, os.Stdin, int64(atoi(args[0]))); err != nil {
		return 99
	}
	return 0
}

// raise SIGNAME: die by that signal.
func helperRaise(args []string) int {
	sig := unix.SignalNum(args[0])
	signal.Reset(sig)
	syscall.Kill(os.Getpid(), sig)
	time.Sleep(time.Hour) // never reached: the signal is deadly
	return 99
}

// sleep MARKER READY: sleep until killed (SIGTERM kills it).
func helperSleep(args []string) int {
	ready(args[1])
	return sleepForever()
}

// ignore-term MARKER READY: ignore SIGTERM and sleep until killed.
func helperIgnoreTerm(args []string) int {
	signal.Ignore(syscall.SIGTERM)
	ready(args[1])
	return sleepForever()
}

// spawn MODE MARKER READY: start a grandchild "ignore-term MARKER" that
// shares stdout and stderr, then by MODE: "exit" prints hi and exits;
// "wait" ignores SIGTERM and sleeps; "escape" does as "exit" but the
// grandchild leaves the session first.
func helperSpawn(args []string) int {
	mode, marker := args[0], args[1]
	exe, err := os.Executable()
	if err != nil {
		return 98
	}
	gc := &exec.Cmd{
		Path:        exe,
		Args:        []string{helperArgv0, "ignore-term", marker, "-"},
		Stdout:      os.Stdout,
		Stderr:      os.Stderr,
		SysProcAttr: &syscall.SysProcAttr{Setsid: mode == "escape"},
	}
	if err := gc.Start(); err != nil {
		return 97
	}
	switch mode {
	case "exit", "escape":
		fmt.Println("hi")
		return 0
	default:
		signal.Ignore(syscall.SIGTERM)
		ready(args[2])
		return sleepForever()
	}
}

// close-out MARKER READY: close stdout and stderr, then sleep until killed.
func helperCloseOut(args []string) int {
	os.Stdout.Close()
	os.Stderr.Close()
	ready(args[1])
	return sleepForever()
}

// fds: print to stderr, on one line, the descriptors of /proc/self/fd that
// came through exec: those without the close-on-exec flag. The Go runtime
// opens descriptors of its own (cgroup files for GOMAXPROCS, the poller),
// always close-on-exec, and exec closes every descriptor so marked, so one
// without the flag was inherited. Raw system calls keep the os package
// from opening more.
func helperFDs([]string) int {
	dir, err := unix.Open("/proc/self/fd", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 98
	}
	var fds []int
	buf := make([]byte, 4096)
	for {
		n, err := unix.ReadDirent(dir, buf)
		if err != nil {
			return 99
		}
		if n == 0 {
			break
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
		for _, name := range names {
			fd := atoi(name)
			flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
			if err != nil {
				return 97
			}
			if flags&unix.FD_CLOEXEC == 0 {
				fds = append(fds, fd)
			}
		}
	}
	sort.Ints(fds)
	fmt.Fprintln(os.Stderr, strings.Trim(fmt.Sprint(fds), "[]"))
	return 0
}

// id: print uid, gid, groups, working directory and environment, one
// item a line.
func helperID([]string) int {
	groups, err := unix.Getgroups()
	if err != nil {
		return 99
	}
	slices.Sort(groups)
	wd, err := os.Getwd()
	if err != nil {
		return 98
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "uid=%d gid=%d groups=%v\n", os.Getuid(), os.Getgid(), groups)
	fmt.Fprintf(&b, "cwd=%s\n", wd)
	for _, e := range os.Environ() {
		fmt.Fprintf(&b, "env %s\n", e)
	}
	os.Stdout.Write(b.Bytes())
	return 0
}

// marker returns an argument unique to the test t, for finding its
// processes in /proc.
func marker(t *testing.T) string {
	return fmt.Sprintf("rootgate-marker-%d-%s", os.Getpid(), strings.ReplaceAll(t.Name(), "/", "-"))
}

// markedProcesses lists the live processes (zombies excluded) with an
// argument equal to m.
func markedProcesses(m string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !slices.Contains(strings.Split(string(cmdline), "\x00"), m) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// The state follows the command name, which is in parentheses.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// killMarked kills every process marked with m when the test ends, so a
// failing test leaves nothing behind.
func killMarked(t *testing.T, m string) {
	t.Cleanup(func() {
		for _, pid := range markedProcesses(m) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// waitFor polls cond until it holds or the deadline passes.
var waitFor = testutil.Poll

// checkNoSurvivors fails t if a process marked with m is still alive a
// few seconds from now. Killed processes take a moment to go.
func checkNoSurvivors(t *testing.T, m string) {
	t.Helper()
	if !waitFor(10*time.Second, func() bool { return len(markedProcesses(m)) == 0 }) {
		t.Errorf("processes marked %s survived: %v", m, markedProcesses(m))
	}
}

// waitFile returns a channel closed once path exists.
func waitFile(path string) <-chan struct{} {
	c := make(chan struct{})
	go func() {
		defer close(c)
		waitFor(time.Minute, func() bool {
			_, err := os.Stat(path)
			return err == nil
		})
	}()
	return c
}
