//go:build !amd64 && !arm64

package pipeline

// tracing: captured scripts run fromDescriptor3 on this architecture,
// whose system call numbers traceScriptOpen does not know.
const tracing = false

const nativeAuditArch = 0

var openCalls = map[uint64]int{}

var forkCalls = map[uint64]bool{}
