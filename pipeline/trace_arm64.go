package pipeline

import "golang.org/x/sys/unix"

// tracing: captured scripts can run fromMount on this architecture.
const tracing = true

// nativeAuditArch is AUDIT_ARCH_AARCH64.
const nativeAuditArch = 0xc00000b7

// openCalls maps the system calls that open a file by name to the index
// of their path argument.
var openCalls = map[uint64]int{unix.SYS_OPENAT: 1, unix.SYS_OPENAT2: 1}

// forkCalls are the system calls that always make a process.
var forkCalls = map[uint64]bool{}
