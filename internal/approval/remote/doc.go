// Package remote is the approver protocol (docs/protocol.md, "Approver
// protocol") and the daemon's end of it; it draws nothing.
//
// The protocol: [Message], one JSON object per line between rootgated and
// an attached approver client, read strictly ([ReadMessage]) and written
// whole ([WriteMessage], [PromptLine]); the request hash a decision must
// carry ([RequestHash]); the capabilities a hello offers; one set of
// timings for both ends (the daemon pings the client and tells it in the
// welcome how often, so each end notices a silent other:
// [DefaultPingEvery] and the rest); every message the daemon sends an
// approver ([ApproverNotAdmitted] and the rest), and the refusal a client
// reads ([RefusedError]); and the one-exchange connections a client opens
// to list or revoke standing grants ([ListGrants], [RevokeGrant]) and to
// change the enrolled passkeys ([StartEnrol], [RemovePasskey],
// [ImportPasskeys]).
//
// The daemon's end is [Host]: it attaches each admitted client to an
// [github.com/rootgate/rootgate/internal/approval.Broker] as a member whose Approve
// sends a prompt and waits for the decision; [Host.ServeTerminal] serves
// the client rootgated --tty runs on its own terminal, over a socket pair
// it made, as that terminal's approver. The clients are elsewhere:
// rootgate approve's is cmd/internal/approver, rootgate web's passkey
// relay is approval/web.
package remote
