package daemon_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/wire"
)

// uidLines returns the lines of the audit log of the daemon in dir that
// uid's requests added, by kind: the records with uid as their peer, and
// those of the requests such a record names.
func uidLines(t *testing.T, dir string, uid uint32) map[audit.Kind][][]byte {
	t.Helper()
	raw, err := os.ReadFile(auditPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	rs := records(t, dir)
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	if len(lines) != len(rs) {
		t.Fatalf("%d lines, %d records: the log rotated", len(lines), len(rs))
	}
	ids := map[string]bool{}
	out := map[audit.Kind][][]byte{}
	for i, rec := range rs {
		if rec.Peer != nil && rec.Peer.UID == int(uid) {
			ids[rec.ID] = true
		} else if !ids[rec.ID] || rec.ID == "" {
			continue
		}
		out[rec.Kind] = append(out[rec.Kind], lines[i])
	}
	return out
}

// loopAllowed is a requester that sends up to $ARGV[1] requests to the
// socket $ARGV[0], one at a time, with ids $ARGV[2]-N, each running true
// with the argument $ARGV[3], and prints each answer line; it stops after
// the first answer that is not ok.
const loopAllowed = `
use IO::Socket::UNIX;
use POSIX qw(strftime);
$| = 1;
my ($path, $n, $prefix, $arg) = @ARGV;
for my $i (0..$n-1) {
	my $s = IO::Socket::UNIX->new(Peer => $path) or die "connect: $!";
	my $now = strftime("%Y-%m-%dT%H:%M:%SZ", gmtime());
	print $s "{\"id\":\"$prefix-$i\",\"time\":\"$now\",\"pipeline\":[[\"true\",\"$arg\"]]}\n";
	shutdown($s, 1);
	my $answer = <$s>;
	print $answer;
	close $s;
	last unless $answer =~ /"status":"ok"/;
}
`

// TestAllowedLoopKeptToAuditBudget (issue 27): an agent (rgaca) that a
// policy rule allows to run a command looped it, and each run's four
// records (about 2 KiB) went to the log unbounded, rotating older files,
// other users' records with them, away. What one uid's requests add is
// now bounded by the hour (--audit-uid-budget): once its records took
// the budget, its further requests are refused before anything of them
// is recorded but a compact rejected record, with a busy answer that
// says until when, and the daemon warns once. Another uid (rgacb) and
// root are still served.
func TestAllowedLoopKeptToAuditBudget(t *testing.T) {
	t.Parallel()
	auid, agid := testAccount(t, "rgaca")
	buid, bgid := testAccount(t, "rgacb")
	const budget = 64 << 10
	d := startDaemon(t, opts{Policy: "allow any true ...\n", Args: []string{"--audit-uid-budget", "64K"}})
	openToAll(t, d)
	arg := strings.Repeat("x", 200)
	out, err := floodAs(auid, agid, loopAllowed, d.Sock, 300, "rgaca", arg).Output()
	if err != nil {
		t.Fatalf("loop: %v\n%s", err, out)
	}
	answers := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	runs := len(answers) - 1
	var refused response
	refused.raw = answers[runs]
	if err := json.Unmarshal([]byte(refused.raw), &refused.Response); err != nil {
		t.Fatalf("answer %q: %v", refused.raw, err)
	}
	if refused.Status == wire.StatusOK {
		t.Fatalf("%d allowed runs of rgaca, none refused: its records grew the audit log by %d bytes, over the budget of %d", runs+1, auditSize(t, d), budget)
	}
	for _, a := range answers[:runs] {
		if !strings.Contains(a, `"status":"ok"`) {
			t.Fatalf("a run before the refusal answered %s", a)
		}
	}
	t.Logf("refused after %d runs", runs)
	began := time.Now().UTC()
	msg := regexp.MustCompile(`^server busy: the requests of uid ` + strconv.Itoa(int(auid)) + ` added their hourly budget of 65536 bytes to the audit log; more are refused until (\S+)$`)
	m := msg.FindStringSubmatch(refused.Message)
	if refused.Status != wire.StatusError || refused.Code != wire.CodeBusy || m == nil {
		t.Fatalf("run %d answered %s, want busy: %s", runs, refused.raw, msg)
	}
	if until, err := time.Parse(time.RFC3339, m[1]); err != nil || until.Before(began) || until.After(began.Add(time.Hour+time.Second)) {
		t.Errorf("refused until %s (%v), want within the hour from %s", m[1], err, began)
	}
	// Nothing of the refused request ran, or was recorded but its
	// rejected record; more are refused the same way.
	waitTrail(t, d.Dir, fmt.Sprintf("rgaca-%d", runs), "rejected")
	for i := range 3 {
		id := fmt.Sprintf("rgaca-more-%d", i)
		r := sendAs(t, d.Sock, auid, agid, []uint32{}, request(map[string]any{"id": id, "pipeline": [][]string{{"true"}}}))
		if r.Code != wire.CodeBusy || !msg.MatchString(r.Message) {
			t.Fatalf("%s answered %s, want busy", id, r.raw)
		}
		waitTrail(t, d.Dir, id, "rejected")
	}
	// Pings are still answered (and recorded compactly, past the budget).
	if r := sendAs(t, d.Sock, auid, agid, []uint32{}, request(map[string]any{"id": "rgaca-ping", "action": "ping", "pipeline": nil})); r.Status != wire.StatusOK {
		t.Fatalf("rgaca's ping past the budget: %s", r.raw)
	}
	// Another uid and root are served.
	wantOK(t, sendAs(t, d.Sock, buid, bgid, []uint32{}, request(map[string]any{"id": "rgacb-1", "pipeline": [][]string{{"true", arg}}})))
	wantOK(t, d.send(map[string]any{"id": "root-1", "pipeline": [][]string{{"true", arg}}}))
	waitTrail(t, d.Dir, "rgacb-1", "received decided started finished")
	waitTrail(t, d.Dir, "root-1", "received decided started finished")
	// The operator is told once.
	warning := `msg="a uid's requests took their hourly budget of the audit log (--audit-uid-budget); its requests that may run or reach a person are refused until the hour ends" requester_uid=` + strconv.Itoa(int(auid))
	d.waitLog("level=WARN", warning)
	d.Terminate()
	if n := strings.Count(d.Stderr.String(), warning); n != 1 {
		t.Errorf("warned %d times, want once:\n%s", n, d.Stderr.String())
	}

	// What rgaca added: its runs' records, within the budget but for the
	// last run's (the one under way as the budget was reached); then
	// compact records of what was refused and of its ping.
	lines := uidLines(t, d.Dir, auid)
	received := lines[audit.KindReceived]
	if len(received) != runs+1 {
		t.Fatalf("%d received records of rgaca's %d runs and its ping", len(received), runs)
	}
	ping := received[runs]
	lines[audit.KindReceived] = received[:runs]
	total, perRun := 0, 0
	for _, k := range []audit.Kind{audit.KindReceived, audit.KindDecided, audit.KindStarted, audit.KindFinished} {
		if len(lines[k]) != runs {
			t.Errorf("%d %s records of rgaca's %d runs", len(lines[k]), k, runs)
		}
		for i, l := range lines[k] {
			total += len(l) + 1
			if i == runs-1 {
				perRun += len(l) + 1
			}
		}
	}
	t.Logf("%d runs, %d bytes of records, the last run %d bytes; ping %d, rejected %d", runs, total, perRun, len(ping), len(lines[audit.KindRejected][0]))
	if total < budget || total > budget+perRun {
		t.Errorf("rgaca's %d runs added %d bytes of records, want the budget (%d) and at most the last run's (%d) more", runs, total, budget, perRun)
	}
	if !bytes.Contains(ping, []byte(`"id":"rgaca-ping"`)) || !bytes.Contains(ping, []byte(`"line":{"bytes":`)) || len(ping) > 1024 {
		t.Errorf("rgaca's ping past the budget recorded as %s", ping)
	}
	if len(lines[audit.KindRejected]) != 4 {
		t.Errorf("%d rejected records of rgaca, want 4", len(lines[audit.KindRejected]))
	}
	for _, l := range lines[audit.KindRejected] {
		if len(l) > 1024 {
			t.Errorf("rejected record of %d bytes: %s", len(l), l)
		}
	}
	for k := range lines {
		switch k {
		case audit.KindReceived, audit.KindDecided, audit.KindStarted, audit.KindFinished, audit.KindRejected:
		default:
			t.Errorf("rgaca left %d %s records", len(lines[k]), k)
		}
	}
}

// TestReceivedRecordsCompactPastShare: a uid other than root (rgacc)
// whose full received records took a quarter of its hourly budget gets
// compact ones (the line's size and SHA-256, the short fields) for the
// rest of the hour, while its runs go on; root's stay full.
func TestReceivedRecordsCompactPastShare(t *testing.T) {
	t.Parallel()
	uid, gid := testAccount(t, "rgacc")
	const share = 64 << 10 / 4
	d := startDaemon(t, opts{Policy: "allow any true ...\n", Args: []string{"--audit-uid-budget", "64K"}})
	openToAll(t, d)
	pipeline := [][]string{{"true"}}
	for i := range 8 {
		pipeline[0] = append(pipeline[0], strings.Repeat(strconv.Itoa(i), 250))
	}
	const runs = 10
	for i := range runs {
		wantOK(t, sendAs(t, d.Sock, uid, gid, []uint32{}, request(map[string]any{"id": fmt.Sprintf("rgacc-%d", i), "pipeline": pipeline})))
	}
	wantOK(t, d.send(map[string]any{"id": "root-1", "pipeline": pipeline}))
	waitTrail(t, d.Dir, "root-1", "received decided started finished")
	d.Terminate()

	full, compact := 0, 0
	for i, l := range uidLines(t, d.Dir, uid)[audit.KindReceived] {
		isFull := !bytes.Contains(l, []byte(`"line":{"bytes":`)) && bytes.Contains(l, []byte(pipeline[0][8]))
		if want := full < share; isFull != want {
			t.Errorf("received record %d is full: %v, want %v, after %d bytes of full ones (share %d): %.300s", i, isFull, want, full, share, l)
		}
		if isFull {
			full += len(l) + 1
		} else {
			compact++
		}
	}
	if compact == 0 {
		t.Errorf("no compact received record of rgacc's %d runs", runs)
	}
	for _, rec := range trail(t, d.Dir, "root-1") {
		if rec.Kind == audit.KindReceived && (rec.Line != nil || len(rec.Request.Pipeline[0]) != 9) {
			t.Errorf("root's received record is not full: %+v", rec.Request)
		}
	}
}

// TestManyEnvKeysRecordedBounded: a request allowed to run, from a uid
// other than root (nobody), whose line is made long with many LC_* env
// keys and empty arguments (which an excerpt of each long word does not
// shorten) has a received record of at most about 12 KiB: the first env
// keys and words, then how many more, whose request line's SHA-256 the
// record keeps.
func TestManyEnvKeysRecordedBounded(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	openToAll(t, d)
	env := map[string]string{}
	for i := range 20000 {
		env[fmt.Sprintf("LC_%05d", i)] = "C"
	}
	argv := append([]string{"true"}, make([]string, 100000)...)
	r := sendAs(t, d.Sock, 65534, 65534, []uint32{}, request(map[string]any{"id": "many-env", "env": env, "pipeline": [][]string{argv}}))
	if r.Status != wire.StatusOK {
		t.Fatalf("%.300s", r.raw)
	}
	waitTrail(t, d.Dir, "many-env", "received decided started finished")
	lines := uidLines(t, d.Dir, 65534)[audit.KindReceived]
	if len(lines) != 1 {
		t.Fatalf("%d received records of nobody", len(lines))
	}
	var rec audit.Record
	if err := json.Unmarshal(lines[0], &rec); err != nil {
		t.Fatal(err)
	}
	q := rec.Request
	if len(lines[0]) > 14<<10 || q == nil || !strings.Contains(q.Env["…"], " more keys, in the request line's sha256]") || len(q.Pipeline) != 1 ||
		!strings.Contains(q.Pipeline[0][len(q.Pipeline[0])-1], " more words, in the request line's sha256]") || q.LineSHA256 == "" {
		t.Errorf("received record of %d bytes: %.500s", len(lines[0]), lines[0])
	}
}
