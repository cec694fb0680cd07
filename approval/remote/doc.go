// Package remote is both ends of the approver protocol (docs/protocol.md,
// "Approver protocol"): one JSON object per line between rootgated and an
// attached approver client. The daemon pings the client and tells it in
// the welcome how often, so each end notices a silent other
// ([DefaultPingEvery] and the rest).
//
// The daemon's end is [Host]: it attaches each admitted client to an
// [github.com/rootgate/rootgate/approval.Broker] as a member whose Approve
// sends a prompt and waits for the decision; [Host.ServeTerminal] serves
// the client rootgated --tty runs on its own terminal, over a socket pair
// it made, as that terminal's approver. The client's end is [Client]
// (rootgate approve): it puts each prompt to the operator through an
// Approver it is given (a terminal or desktop prompt) and sends the answer.
// Neither end draws anything itself.
package remote
