package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/wire"
)

// TestNoApproverFloodKeepsAuditSmall: a request the policy leaves to a
// person while no approver may be asked about it reaches no one, like a
// policy denial: its record leaves a large pipeline out and shares the
// per-uid budget of refused requests. Without that, a requester (rt3ag)
// sends 20 such requests a minute (the prompt rate), each written in
// full, a 1 MB argument of "<" as 6 MB of JSON: 120 MB a minute, which
// rotates the whole audit history (704 MiB by default) out of the log in
// minutes. Another user (nobody) is still served and recorded in full.
func TestNoApproverFloodKeepsAuditSmall(t *testing.T) {
	t.Parallel()
	auid, agid := testAccount(t, "rt3ag")
	const flood, rate = 10, 5
	d := startDaemon(t, opts{Policy: "allow any,user=nobody id -u\n", Args: []string{"--audit-reject-rate", "5"}})
	openToAll(t, d)
	before := auditSize(t, d)

	// 1 MB arguments of "<" (which JSON escaped for HTML writes as six
	// bytes, \u003c) that the policy leaves to a person, with no one to ask.
	cmd := floodAs(auid, agid, floodBig, d.Sock, flood, "<", "0")
	began := time.Now()
	out, err := cmd.Output()
	took := time.Since(began)
	if err != nil {
		t.Fatalf("flood: %v\n%s", err, out)
	}
	if want := strings.Repeat("answer denied\n", flood) + "done\n"; string(out) != want {
		t.Fatalf("flood answers:\n%s", out)
	}
	r := sendAs(t, d.Sock, 65534, 65534, []uint32{}, request(map[string]any{"id": "rt3-nobody-1", "privileged": false, "pipeline": [][]string{{"id", "-u"}}}))
	if r.Status != wire.StatusOK {
		t.Fatalf("nobody after the flood: %s", r.raw)
	}
	waitTrail(t, d.Dir, "rt3-nobody-1", "received decided started finished")
	d.Terminate()

	if grown := auditSize(t, d) - before; grown > 64<<10 {
		t.Errorf("%d requests of 1 MB that no approver could be asked about grew the audit log by %d bytes", flood, grown)
	}
	requests, dropped := map[string]bool{}, 0
	for _, rec := range records(t, d.Dir) {
		switch {
		case rec.Kind == audit.KindDropped && rec.Peer != nil && rec.Peer.UID == int(auid):
			dropped += rec.Dropped.Count
		case strings.HasPrefix(rec.ID, "big-"):
			requests[rec.ID] = true
			if rec.Kind == audit.KindReceived && (rec.Request == nil || rec.Request.Pipeline != nil || rec.Line == nil || rec.Line.Bytes < 1000000) {
				t.Errorf("received record of %s not compact: request recorded %t, line %+v", rec.ID, rec.Request != nil && rec.Request.Pipeline != nil, rec.Line)
			}
		case rec.ID == "rt3-nobody-1" && rec.Kind == audit.KindReceived:
			if rec.Request == nil || len(rec.Request.Pipeline) != 1 {
				t.Errorf("nobody's request not recorded in full: %+v", rec.Request)
			}
		}
	}
	checkBudget(t, "rt3ag", len(requests), dropped, flood, rate, took)
}

// TestAuditRecordsArgumentsAtTheirSize: a request's arguments made of
// '<', '>' and '&' take their own size in its received record. JSON
// escaped for HTML (\u003c), as Go writes them by default, they took six
// times that: a requester's records, such as those of requests a person
// is asked about and that it withdraws at once, filled the log six times
// as fast.
func TestAuditRecordsArgumentsAtTheirSize(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	before := auditSize(t, d)
	arg := strings.Repeat("<>&", 30000)
	r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"true", arg}}}))
	waitTrail(t, d.Dir, r.ID, "received decided started finished")
	if grown := auditSize(t, d) - before; grown > int64(len(arg))+16<<10 {
		t.Errorf("a request with a %d-byte argument grew the audit log by %d bytes", len(arg), grown)
	}
	for _, rec := range trail(t, d.Dir, r.ID) {
		if rec.Kind == audit.KindReceived && (rec.Request == nil || len(rec.Request.Pipeline) != 1 || rec.Request.Pipeline[0][1] != arg) {
			t.Errorf("received record does not hold the argument as sent")
		}
	}
}
