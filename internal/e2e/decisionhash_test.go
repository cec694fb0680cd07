package e2e

import (
	"slices"
	"testing"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/wire"
)

// TestDecisionBindsShownRequest: a decision counts only with the hash of
// the request shown under its id. An approver client speaking the raw
// protocol has two prompts waiting, A and B. It approves A with B's hash,
// and with the hash of another request under A's id (what a client shown
// something else as A computes); it denies B with A's hash. Each is
// refused, naming the id, and decides nothing: both prompts wait on, and
// the decisions that carry the right hash then decide them the other way
// (A denied, B approved). A's audit trail holds that one denial, no
// approval, and no run. (Without the hash check the first refused
// decision approved A, which ran.)
func TestDecisionBindsShownRequest(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t, "--prompt-timeout", "30s")
	a := attachRaw(t, d)
	chA := d.ask(map[string]any{"id": "hash-a", "pipeline": [][]string{{"echo", "A ran"}}})
	pA := a.prompt()
	chB := d.ask(map[string]any{"id": "hash-b", "pipeline": [][]string{{"echo", "B ran"}}})
	pB := a.prompt()
	if pA.ID != "hash-a" || pB.ID != "hash-b" || pA.Hash == pB.Hash {
		t.Fatalf("prompts %q (%s) and %q (%s), want hash-a and hash-b, with hashes of their own", pA.ID, pA.Hash, pB.ID, pB.Hash)
	}
	other := *pA.Request
	other.Stages = slices.Clone(other.Stages)
	other.Stages[0].Argv = []string{"echo", "something else"}

	yes, no := true, false
	for _, c := range []struct {
		what     string
		id, hash string
		approve  *bool
	}{
		{"A approved with B's hash", pA.ID, pB.Hash, &yes},
		{"A approved with the hash of another request under its id", pA.ID, remote.RequestHash(&other), &yes},
		{"B denied with A's hash", pB.ID, pA.Hash, &no},
	} {
		a.send(&remote.Message{Type: remote.MsgDecision, ID: c.id, Hash: c.hash, Approve: c.approve})
		m := a.next()
		if m.Type != remote.MsgError || m.ID != c.id || m.Message != remote.ApproverHashMismatch(c.id) {
			t.Fatalf("%s: the daemon answered %s id %q %q %q, want the refusal %q", c.what, m.Type, m.ID, m.Message, m.Outcome, remote.ApproverHashMismatch(c.id))
		}
	}
	// Refused, the decisions left both prompts waiting: neither request
	// has an answer, and each takes the decision with its own hash.
	for _, ch := range []chan response{chA, chB} {
		select {
		case r := <-ch:
			t.Fatalf("decided by a refused decision: %s", r.raw)
		default:
		}
	}
	a.decide(pA, false)
	if r := <-chA; r.Status != wire.StatusDenied || r.Code != wire.CodeDeniedByOperator {
		t.Fatalf("A, denied with its own hash: got %s", r.raw)
	}
	a.decide(pB, true)
	if r := wantOK(t, <-chB); string(r.Stdout) != "B ran\n" {
		t.Fatalf("B, approved with its own hash: got %s", r.raw)
	}

	// A's trail: received, then the one decision, a denial by the
	// approver; no approval, no run.
	rs := waitTrail(t, d.Dir, pA.ID, "received decided")
	if r := rs[1]; r.Decision == nil || r.Decision.Verdict != "deny" || r.Decision.ApproverUID == nil {
		t.Errorf("A's decided record is %+v, want the approver's denial", r.Decision)
	}
	rs = waitTrail(t, d.Dir, pB.ID, "received decided started finished")
	if r := rs[1]; r.Decision == nil || r.Decision.Verdict != "allow" {
		t.Errorf("B's decided record is %+v, want the approval with its hash", r.Decision)
	}
}
