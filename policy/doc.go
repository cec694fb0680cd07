// Package policy is the operator's standing decisions: the policy file's
// language (docs/policy.md), read by [Load] or [Parse] into a [Policy]
// whose [Policy.Evaluate] says allow, deny or ask for a request's stages.
// It knows nothing of prompts or people: an ask is handed on by the daemon
// to an [github.com/rootgate/rootgate/internal/approval.Approver].
package policy
