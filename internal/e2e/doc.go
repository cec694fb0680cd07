// Package e2e has no code of its own: its tests drive the real rootgated
// binary (built once per test process by internal/testutil/rgtest) on
// private sockets, with real approvers on ptys and in tmux, real accounts,
// sudo, sshd and systemd-socket-activate, and a few in-process servers
// through the daemon package's API. The daemon package's own tests are
// the in-package ones beside its code.
package e2e
