// Package approver is rootgate approve's end of the approver protocol
// (approval/remote): [Client] attaches to one or more rootgated approver
// sockets (or, for rootgated --tty, to the one connection the daemon hands
// it), puts each prompt to the operator through an
// [github.com/rootgate/rootgate/internal/approval.Approver] it is given (a terminal
// or desktop prompt) and sends the answer back.
//
// Between prompts it writes status lines and, on a terminal, keeps the
// idle screen below them: the requests waiting for a person, the standing
// grants and the last decisions of each daemon. It draws as the terminal
// prompt (approval/terminal) does: a Bubble Tea program with no renderer
// and no input, whose model draws itself in place with the cursor
// motions of charmbracelet/x/ansi, its headings styled with lipgloss.
//
// Only cmd/rootgate links it; rootgated runs it as a child (rootgate
// approve --internal-daemon-tty) and links none of it (cmd/rootgated's
// TestNoUI).
package approver
