package main

import (
	"os"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// exitSignal, when not 0, is the signal that killed the command of
// rootgate sudo: main then ends this process by the same signal, as sudo
// does, so that the caller's shell sees (and says) what it would under
// sudo, such as "Terminated".
var exitSignal atomic.Int32

// noteSignalDeath records, for main, the signal named sig ("SIGTERM")
// that killed the command, when it is one whose default action ends a
// process.
func noteSignalDeath(sig string) {
	s := unix.SignalNum(sig)
	switch s {
	case 0, unix.SIGSTOP, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGCONT, unix.SIGCHLD, unix.SIGURG, unix.SIGWINCH:
		return
	}
	exitSignal.Store(int32(s))
}

// dieBy ends this process by sig, its action set back to the default and
// without a core dump; it returns only if sig did not end it.
func dieBy(sig unix.Signal) {
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	// struct sigaction all zero: SIG_DFL, no flags, an empty mask (the
	// same in every architecture's layout).
	var act [4]uint64
	_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act)), 0, 8, 0, 0)
	var set unix.Sigset_t
	set.Val[(int(sig)-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Kill(os.Getpid(), sig)
}
