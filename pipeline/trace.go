package pipeline

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A captured script runs fromMount: its interpreter is given the script's
// own name, which in the stage's mount namespace leads to the captured
// content, mounted read-only over the file. A mount is no seal against
// the requester, though: renaming the file, or a directory above it, in
// its own namespace detaches every mount on it in every other namespace
// (the kernel lazily unmounts them), and the name then leads to whatever
// the requester put there. So the interpreter is traced, one system call
// at a time, from its exec to its first open of the script's name, and
// the file that open returned must be the mounted content; otherwise the
// stage is killed before it read a byte of it. Interpreters open the
// script once, and read it through that descriptor.

// ptraceGetSyscallInfo is PTRACE_GET_SYSCALL_INFO (Linux 5.3).
const ptraceGetSyscallInfo = 0x420e

// syscallInfo is struct ptrace_syscall_info.
type syscallInfo struct {
	op   uint8
	_    [3]uint8
	arch uint32
	_    uint64 // instruction pointer
	_    uint64 // stack pointer
	data [8]uint64
}

const (
	syscallInfoEntry = 1
	syscallInfoExit  = 2
)

// maxTracedSyscalls bounds the system calls an interpreter may make
// before it opens its script; past it, the stage is killed.
const maxTracedSyscalls = 200000

// errNoOpen is why a stage was killed whose interpreter had not opened
// its script within maxTracedSyscalls, or started another process first.
var errNoOpen = errors.New("its interpreter did not open it as expected")

// traceScriptOpen follows the stopped tracee pid (stopped by the SIGTRAP
// that follows its exec, having asked to be traced) until it opens the
// script named name (the name it was given, as it spells it) and checks
// that the descriptor it got is the file dev/ino, the mounted content.
// It then lets it go on, untraced. It returns an error, having killed
// the tracee, when the open found another file, when the tracee started
// another process before the open, or made too many calls; nil, the
// tracee left to exit, when it exited first. It must run on the thread
// that started the tracee.
func traceScriptOpen(pid int, name string, dev, ino uint64) error {
	kill := func(err error) error {
		_ = unix.Kill(pid, unix.SIGKILL)
		return err
	}
	// An interpreter that blocks before it opens the script (one the #!
	// line chose to wait for its input) would hold the stage here, where
	// no time limit of the run applies yet: it is killed. Its pid stays
	// its own until reaped, which only this stage does.
	// Whichever comes first, the watchdog or the tracer letting the
	// tracee go, decides: 1 let go, 2 killed.
	var state atomic.Int32
	watchdog := time.AfterFunc(maxTraceTime, func() {
		if state.CompareAndSwap(0, 2) {
			_ = unix.Kill(pid, unix.SIGKILL)
		}
	})
	defer watchdog.Stop()
	letGo := func() bool { return state.CompareAndSwap(0, 1) }
	_, err := traceScript(pid, name, dev, ino, kill, letGo)
	if state.Load() == 2 {
		return kill(fmt.Errorf("%w within %v", errNoOpen, maxTraceTime))
	}
	return err
}

// maxTraceTime bounds the time from an interpreter's exec to its open of
// the script (a variable for the test that waits for it).
var maxTraceTime = 10 * time.Second

// traceScript is traceScriptOpen's loop; exited says the tracee exited
// (or was killed) while traced.
func traceScript(pid int, name string, dev, ino uint64, kill func(error) error, letGo func() bool) (exited bool, _ error) {
	exited, _, err := traceStop(pid)
	if err != nil || exited {
		return exited, err
	}
	if err := unix.PtraceSetOptions(pid, unix.PTRACE_O_TRACESYSGOOD|unix.PTRACE_O_EXITKILL); err != nil {
		return false, kill(fmt.Errorf("trace: %w", err))
	}
	t := &scriptTracer{pid: pid, name: name, dev: dev, ino: ino, kill: kill, letGo: letGo}
	sig := 0
	for range maxTracedSyscalls {
		if err := unix.PtraceSyscall(pid, sig); err != nil {
			return false, kill(fmt.Errorf("trace: %w", err))
		}
		sig = 0
		exited, status, err := traceStop(pid)
		if err != nil || exited {
			return exited, err
		}
		switch status {
		case int(unix.SIGTRAP) | 0x80: // a system call's entry or exit
		case int(unix.SIGTRAP): // the SIGTRAP that follows a later exec
			continue
		default: // a signal on its way: deliver it
			sig = status
			continue
		}
		if done, err := t.syscallStop(); done {
			return false, err
		}
	}
	return false, kill(fmt.Errorf("%w: more than %d system calls before it did", errNoOpen, maxTracedSyscalls))
}

// scriptTracer is traceScript's state between a system call's entry and
// its exit.
type scriptTracer struct {
	pid      int
	name     string
	dev, ino uint64
	kill     func(error) error
	letGo    func() bool
	nr       uint64 // the system call the tracee is in
	pathArg  uint64 // the address of its path, when it is an open
}

// syscallStop reads the system call the tracee stopped at the entry or
// exit of, and judges it. done says the trace is over; err is then nil
// when the tracee was let go, or killed meanwhile by the watchdog, else
// why it was killed here.
func (t *scriptTracer) syscallStop() (done bool, err error) {
	var info syscallInfo
	if _, _, e := unix.Syscall6(unix.SYS_PTRACE, ptraceGetSyscallInfo, uintptr(t.pid), unsafe.Sizeof(info), uintptr(unsafe.Pointer(&info)), 0, 0); e != 0 {
		return true, t.kill(fmt.Errorf("trace: %w", e))
	}
	switch info.op {
	case syscallInfoEntry:
		return t.entry(&info)
	case syscallInfoExit:
		return t.exit(&info)
	}
	return false, nil
}

// entry is a system call's entry: one of another architecture, or one
// that starts another process before the script is opened, kills the
// tracee; an open's path is kept for its exit.
func (t *scriptTracer) entry(info *syscallInfo) (done bool, err error) {
	if info.arch != nativeAuditArch {
		return true, t.kill(fmt.Errorf("%w: a system call of another architecture", errNoOpen))
	}
	t.nr = info.data[0]
	args := info.data[1:7]
	if at, ok := openCalls[t.nr]; ok {
		t.pathArg = args[at]
	} else if startsProcess(t.pid, t.nr, args) {
		return true, t.kill(fmt.Errorf("%w: it started another process first", errNoOpen))
	}
	return false, nil
}

// exit is a system call's exit: an open that succeeded and got the
// mounted content lets the tracee go on, untraced; one that got another
// file by the script's name kills it.
func (t *scriptTracer) exit(info *syscallInfo) (done bool, err error) {
	if _, ok := openCalls[t.nr]; !ok || int64(info.data[0]) < 0 {
		return false, nil
	}
	fd := int64(info.data[0])
	var st unix.Stat_t
	if err := unix.Stat("/proc/"+strconv.Itoa(t.pid)+"/fd/"+strconv.FormatInt(fd, 10), &st); err != nil {
		return true, t.kill(fmt.Errorf("trace: %w", err))
	}
	if st.Dev == t.dev && st.Ino == t.ino {
		// The content: let it read on, untraced.
		if !t.letGo() {
			return true, nil // killed meanwhile
		}
		if err := unix.PtraceDetach(t.pid); err != nil {
			return true, t.kill(fmt.Errorf("trace: %w", err))
		}
		return true, nil
	}
	if path, err := tracedString(t.pid, t.pathArg); err != nil {
		return true, t.kill(fmt.Errorf("trace: %w", err))
	} else if path == t.name {
		return true, t.kill(fmt.Errorf("%s %w: its name led to another file when its interpreter opened it", strconv.Quote(t.name), ErrChanged))
	}
	return false, nil
}

// traceStop waits for the tracee's next stop and consumes it, returning
// its signal number (with 0x80 for a system call stop); or reports that
// it exited, leaving it unreaped for the caller's wait.
func traceStop(pid int) (exited bool, status int, err error) {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WSTOPPED|unix.WNOWAIT|unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return false, 0, fmt.Errorf("trace: %w", err)
		}
		if code := siginfoCode(&info); code == cldExited || code == cldKilled || code == cldDumped {
			return true, 0, nil
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
			if err == unix.EINTR {
				continue
			}
			return false, 0, fmt.Errorf("trace: %w", err)
		}
		if ws.Exited() || ws.Signaled() {
			// Not to happen (the peek said stopped); reaped, so say so.
			return false, 0, errors.New("trace: the stage was reaped while traced")
		}
		return false, int(ws>>8) & 0xff, nil
	}
}

// si_code values of SIGCHLD (CLD_EXITED, CLD_KILLED, CLD_DUMPED).
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// siginfoCode is si_code of a waitid result.
func siginfoCode(info *unix.Siginfo) int32 {
	return *(*int32)(unsafe.Pointer(uintptr(unsafe.Pointer(info)) + 8))
}

// tracedString reads the NUL-terminated string at addr in pid's memory,
// at most PATH_MAX bytes.
func tracedString(pid int, addr uint64) (string, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, unix.PathMax)
	n, err := f.ReadAt(buf, int64(addr))
	if n == 0 && err != nil {
		return "", err
	}
	return cString(buf[:n]), nil
}

// startsProcess reports whether the system call nr with args, about to be
// made by pid, makes a process (not a thread): fork, vfork, clone without
// CLONE_THREAD, clone3 whose flags lack it.
func startsProcess(pid int, nr uint64, args []uint64) bool {
	switch {
	case forkCalls[nr]:
		return true
	case nr == unix.SYS_CLONE:
		return args[0]&unix.CLONE_THREAD == 0
	case nr == unix.SYS_CLONE3:
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/mem")
		if err != nil {
			return true
		}
		defer f.Close()
		var b [8]byte
		if _, err := f.ReadAt(b[:], int64(args[0])); err != nil {
			return true
		}
		return *(*uint64)(unsafe.Pointer(&b[0]))&unix.CLONE_THREAD == 0
	}
	return false
}
