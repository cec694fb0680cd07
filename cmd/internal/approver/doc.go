// Package approver is rootgate approve's end of the approver protocol
// (approval/remote): [Client] attaches to one or more rootgated approver
// sockets (or, for rootgated --tty, to the one connection the daemon hands
// it), puts each prompt to the operator through an
// [github.com/rootgate/rootgate/approval.Approver] it is given (a terminal
// or desktop prompt) and sends the answer back. On a terminal, between
// prompts, it keeps the idle screen below its status lines: the requests
// waiting for a person, the standing grants and the last decisions of each
// daemon. Only cmd/rootgate links it; rootgated runs it as a child
// (rootgate approve --internal-daemon-tty) and links none of it.
package approver
