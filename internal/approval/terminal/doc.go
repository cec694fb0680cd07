// Package terminal asks a person at a terminal: [Terminal] is an
// [github.com/rootgate/rootgate/internal/approval.Approver] that shows a request in a
// pager with a huh confirm form (or in plain lines for screen readers),
// bound to a given tty. rootgated --tty and rootgate approve use it; the
// daemon package never links it.
package terminal
