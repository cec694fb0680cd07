package pipeline

import "golang.org/x/sys/unix"

// tracing: captured scripts can run fromMount on this architecture.
const tracing = true

// nativeAuditArch is AUDIT_ARCH_X86_64: a system call made in 32-bit mode
// has other numbers.
const nativeAuditArch = 0xc000003e

// openCalls maps the system calls that open a file by name to the index
// of their path argument.
var openCalls = map[uint64]int{unix.SYS_OPEN: 0, unix.SYS_OPENAT: 1, unix.SYS_OPENAT2: 1}

// forkCalls are the system calls that always make a process.
var forkCalls = map[uint64]bool{unix.SYS_FORK: true, unix.SYS_VFORK: true}
