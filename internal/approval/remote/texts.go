package remote

import "fmt"

// The daemon's error messages on the approver socket (docs/protocol.md,
// "Approver protocol"): what an approver client can be told.
const (
	// ApproverPeerCredentials: the daemon cannot tell who connected.
	ApproverPeerCredentials = "cannot read peer credentials"
	// ApproverHelloName: the hello's name is too long or not displayable.
	ApproverHelloName = "hello: name must be at most 64 displayable characters"
	// ApproverHelloAgent: the hello's agent_socket is not an absolute path.
	ApproverHelloAgent = "hello: agent_socket must be an absolute socket path"
	// ApproverNoVerdict: a decision with no approve field.
	ApproverNoVerdict = "decision refused: it says neither approve nor deny"
)

// ApproverNotAdmitted refuses an approver whose uid --approver does not
// name.
func ApproverNotAdmitted(uid int, user string) string {
	return fmt.Sprintf("uid %d (%s) may not approve: rootgated admits root and the users and groups named by --approver", uid, user)
}

// MaxApproverConns is how many approver-socket connections one uid (root
// excepted) may have open at once.
const MaxApproverConns = 8

// ApproverTooMany refuses an approver connection past MaxApproverConns.
func ApproverTooMany(uid int) string {
	return fmt.Sprintf("uid %d has %d approver connections open already: close one", uid, MaxApproverConns)
}

// ApproverControllers refuses an approver whose controllers cannot be
// read, for the reason err gives.
func ApproverControllers(err error) string {
	return "cannot tell who controls this approver's terminal and session (" + err.Error() + "), so it cannot be shown any request"
}

// ApproverInRun refuses an approver that is part of a rootgate run: a
// process of a run, or descended from one (its cgroup, its ancestry or
// its environment says so), whose approval would be the run's own.
func ApproverInRun(why string) string {
	return "an approver cannot attach from inside a rootgate run (" + why + "): a run could approve requests for root"
}

// ApproverNoHello: the first line could not be read as a message.
func ApproverNoHello(err error) string { return "expected a hello message: " + err.Error() }

// ApproverNotHello: the first message is of another type.
func ApproverNotHello(typ string) string { return fmt.Sprintf("expected a hello message, got %q", typ) }

// ApproverVersion: the hello's protocol version is not the daemon's.
func ApproverVersion(got, want int) string {
	return fmt.Sprintf("approver protocol version %d is not supported (this daemon speaks %d)", got, want)
}

// ApproverTooManyRefused drops an approver past max refused decisions a
// minute.
func ApproverTooManyRefused(max int) string {
	return fmt.Sprintf("too many refused decisions (more than %d a minute); disconnected", max)
}

// ApproverUnknownType: a message of a type the daemon does not read.
func ApproverUnknownType(typ string) string { return fmt.Sprintf("unknown message type %q", typ) }

// ApproverNoPrompt refuses a decision about no waiting prompt.
func ApproverNoPrompt(id string) string {
	return fmt.Sprintf("decision refused: no prompt %q is waiting for this approver", id)
}

// ApproverHashMismatch refuses a decision about another request than the
// one shown.
func ApproverHashMismatch(id string) string {
	return fmt.Sprintf("decision refused: request %q is not the one shown (hash mismatch)", id)
}

// Refusals of a decision's grant (docs/protocol.md, "Standing grants").
const (
	// ApproverGrantOnDeny: a grant on a denial.
	ApproverGrantOnDeny = "decision refused: a grant is given only with an approval"
	// ApproverGrantAgent: a grant for a request that forwards an SSH agent.
	ApproverGrantAgent = "decision refused: a request that forwards an SSH agent cannot be granted"
	// ApproverGrantRunsAnything: a grant for a request with an interpreter
	// or command runner, without grant_runs_anything.
	ApproverGrantRunsAnything = "decision refused: the request runs an interpreter or a command runner: a grant for it must say grant_runs_anything (a second confirmation)"
	// ApproverRuleOnDeny: a policy rule on a denial.
	ApproverRuleOnDeny = "decision refused: a rule is saved only with an approval"
	// ApproverNoRules: a rule for a daemon that has no policy file.
	ApproverNoRules = "decision refused: this daemon has no policy file to save a rule in"
	// ApproverRuleAndGrant: a decision with both a rule and a grant.
	ApproverRuleAndGrant = "decision refused: a decision carries a grant or a rule, not both"
	// ApproverRuleRunsAnything: a rule for a request with an interpreter
	// or command runner (or an open rule for find), without the second
	// confirmation.
	ApproverRuleRunsAnything = "decision refused: the request runs an interpreter or a command runner and the rule admits other arguments, or what the files it reads say by then: it must say rule_runs_anything (a second confirmation)"
	// ApproverNoGrants: a grants request to a daemon that keeps none.
	ApproverNoGrants = "this daemon keeps no standing grants"
)

// ApproverRuleRefused refuses a rule that cannot be saved, saying why.
func ApproverRuleRefused(why string) string {
	return "decision refused: rule not saved: " + why
}

// ApproverGrantDuration refuses a grant outside 1 second to max.
func ApproverGrantDuration(got, max int64) string {
	return fmt.Sprintf("decision refused: grant of %d seconds is not between 1 and %d", got, max)
}

// ApproverGrantRefused refuses a grant for a request no grant may be
// made for, saying why (approval.Grantable).
func ApproverGrantRefused(why string) string {
	return "decision refused: no standing grant for this request: " + why
}

// ApproverNoGrant refuses to revoke a grant that is not held.
func ApproverNoGrant(id string) string {
	return fmt.Sprintf("revoke refused: no standing grant %q", id)
}

// Refusals of a passkey relay and of a decision it sends (docs/protocol.md,
// "Passkeys").
const (
	// ApproverNoPasskeys: a hello offering "passkey" to a daemon with no
	// passkey enrolled.
	ApproverNoPasskeys = "no passkey is enrolled here: enrol one with rootgate passkeys add NAME (as root)"
	// ApproverPasskeyAgent: a passkey relay offering an SSH agent.
	ApproverPasskeyAgent = "a passkey relay cannot offer an SSH agent"
	// ApproverNoAssertion: an approval from a passkey relay without an
	// assertion.
	ApproverNoAssertion = "decision refused: an approval through a passkey relay must carry a passkey assertion"
	// ApproverPasskeyRule: a rule to save on a passkey approval.
	ApproverPasskeyRule = "decision refused: a passkey approval cannot save a policy rule"
	// ApproverAssertionUnasked: an assertion on a decision of an
	// approver that is no passkey relay.
	ApproverAssertionUnasked = "decision refused: an assertion is taken only from a passkey relay"
	// ApproverPasskeyRootOnly: a passkey change asked by another uid than
	// root.
	ApproverPasskeyRootOnly = "passkeys are enrolled, removed and imported by root only"
)

// ApproverAssertionRefused refuses an approval whose assertion does not
// verify; why says what failed. The prompt waits on, with a new nonce.
func ApproverAssertionRefused(id, why string) string {
	return fmt.Sprintf("decision refused: the passkey assertion for request %q does not verify: %s", id, why)
}

// PasskeyEnrolRefused refuses an enrolment or import, why saying what it
// lacks.
func PasskeyEnrolRefused(why string) string {
	return "passkey change refused: " + why
}
