// Package remote is both ends of the approver protocol (docs/protocol.md,
// "Approver protocol"): one JSON object per line between rootgated and an
// attached approver client, with one set of timings ([PingEvery] and the
// rest) for both.
//
// The daemon's end is [Host]: it attaches each admitted client to an
// [github.com/rootgate/rootgate/approval.Broker] as a member whose Approve
// sends a prompt and waits for the decision. The client's end is [Client]
// (rootgate approve): it puts each prompt to the operator through an
// Approver it is given (a terminal or desktop prompt) and sends the answer.
// Neither end draws anything itself.
package remote
