package e2e

import (
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/wire"
)

// TestPromptedFloodKeepsAuditSmall (issue 27): requests put to a person
// were recorded in full, so an agent (rgpfl) sending 1 MB requests that
// wait for a person, denied or unanswered, rotated older audit files away
// within hours. Their received records now keep a long argument as an
// excerpt with its size and SHA-256: the log grows by a few KiB a
// request, whatever its size, and the request line's SHA-256 is kept.
func TestPromptedFloodKeepsAuditSmall(t *testing.T) {
	t.Parallel()
	uid, gid := testAccount(t, "rgpfl")
	d := startDaemon(t, opts{Policy: "deny any rm -rf /\n", Args: []string{"--prompt-timeout", "60s"}})
	openToAll(t, d)
	a := attachRaw(t, d)
	before := auditSize(t, d)

	const flood = 6
	cmd := floodAs(uid, gid, floodBig, d.Sock, flood, "A", "0")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for range flood {
		a.decide(a.prompt(), false)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("flood: %v", err)
	}
	d.Terminate()

	if grown := auditSize(t, d) - before; grown > flood*4<<10 {
		t.Errorf("%d prompted requests of 1 MB grew the audit log by %d bytes, want at most 4 KiB each", flood, grown)
	}
	n := 0
	for _, rec := range records(t, d.Dir) {
		if !strings.HasPrefix(rec.ID, "big-") || rec.Kind != audit.KindReceived {
			continue
		}
		n++
		q := rec.Request
		if q == nil || len(q.Pipeline) != 1 || len(q.Pipeline[0]) != 2 || q.LineSHA256 == "" {
			t.Fatalf("received record of %s: %+v", rec.ID, q)
		}
		if w := q.Pipeline[0][1]; len(w) > 512 || !strings.HasPrefix(w, "AAAA") || !strings.Contains(w, "…[1000000 bytes, sha256:"+audit.SHA256([]byte(strings.Repeat("A", 1000000)))+"]") {
			t.Errorf("received record of %s keeps the 1 MB argument as %d bytes: %.200s", rec.ID, len(w), w)
		}
	}
	if n != flood {
		t.Errorf("%d received records of the flood, want %d", n, flood)
	}
}

// TestAuditRotationRemovalLogged (issue 27): before a rotation removes
// an audit file (--audit-keep), the operator is told at error priority
// which file the next rotation removes, and again when it is removed.
func TestAuditRotationRemovalLogged(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Args: []string{"--audit-max-size", "2K", "--audit-keep", "1"}})
	for i := 0; !strings.Contains(d.Stderr.String(), "audit file removed by rotation"); i++ {
		if i == 200 {
			t.Fatalf("no removal logged after %d requests:\n%s", i, d.Stderr.String())
		}
		if r := d.send(map[string]any{"pipeline": [][]string{{"true"}}, "reason": strings.Repeat("r", 300)}); r.Status != wire.StatusOK {
			t.Fatalf("request %d: %s", i, r.raw)
		}
	}
	log := d.Stderr.String()
	warned := strings.Index(log, `level=ERROR msg="the next audit rotation removes the oldest audit file (--audit-keep); copy it elsewhere to keep its records" file=`)
	removed := strings.Index(log, `level=ERROR msg="audit file removed by rotation (--audit-keep); its records are gone from this host" file=`)
	if warned < 0 || removed < 0 || warned > removed {
		t.Errorf("the daemon's log does not warn at error level before the removal (warned at %d, removed at %d):\n%s", warned, removed, log)
	}
}
