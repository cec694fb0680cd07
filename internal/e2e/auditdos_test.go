package e2e

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/wire"
)

// floodRejected is a requester that sends $ARGV[1] request lines of about
// 1 MiB each to the socket $ARGV[0], each refused: every other one does not
// decode (a 1 MB field name the error quotes), the others decode but are
// stale and carry a 1 MB argument. It prints each answer's status and
// message, then "done".
const floodRejected = `
use IO::Socket::UNIX;
$| = 1;
my ($path, $n) = @ARGV;
my $big = "A" x 1000000;
for my $i (1..$n) {
	my $s = IO::Socket::UNIX->new(Peer => $path) or die "connect: $!";
	my $line = $i % 2
		? "{\"time\":\"2020-01-01T00:00:00Z\",\"pipeline\":[[\"true\"]],\"$big$i\":1}\n"
		: "{\"id\":\"flood-$i\",\"time\":\"2020-01-01T00:00:00Z\",\"pipeline\":[[\"true\",\"$big\"]]}\n";
	print $s $line;
	shutdown($s, 1);
	my $answer = <$s>;
	print "answer ", ($answer =~ /"status":"error"/ ? "error" : "other: $answer"), "\n";
	close $s;
}
print "done\n";
`

// TestRejectedFloodKeepsAuditSmall: a requester (rgtfa) sending 1 MiB
// requests that are all refused leaves a few hundred bytes per record at
// most, and at most --audit-reject-rate of them a minute, the rest counted
// in one dropped record; another user (rgtfb) is served and audited
// meanwhile.
func TestRejectedFloodKeepsAuditSmall(t *testing.T) {
	t.Parallel()
	auid, agid := testAccount(t, "rgtfe")
	buid, bgid := testAccount(t, "rgtff")
	d := startDaemon(t, opts{Args: []string{"--audit-reject-rate", "20"}})
	openToAll(t, d)
	const flood, rate = 60, 20
	before := auditSize(t, d)

	cmd := floodAs(auid, agid, floodRejected, d.Sock, flood)
	began := time.Now()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// rgtfb asks while the flood is on.
	r := sendAs(t, d.Sock, buid, bgid, []uint32{}, request(map[string]any{"id": "rgtfb-1", "privileged": false, "pipeline": [][]string{{"id", "-u"}}}))
	if r.Status != wire.StatusOK || string(r.Stdout) != strconv.Itoa(int(buid))+"\n" {
		t.Fatalf("rgtfb during the flood: %s", r.raw)
	}
	sc := bufio.NewScanner(stdout)
	answers := 0
	for sc.Scan() {
		if sc.Text() == "done" {
			break
		}
		if sc.Text() != "answer error" {
			t.Fatalf("flood: %s", sc.Text())
		}
		answers++
	}
	cmd.Wait()
	took := time.Since(began)
	if answers != flood {
		t.Fatalf("%d of %d flood requests answered", answers, flood)
	}
	waitTrail(t, d.Dir, "rgtfb-1", "received decided started finished")

	// The dropped record is written when rgtfa's minute ends, or when the
	// daemon stops.
	d.Terminate()
	if grown := auditSize(t, d) - before; grown > 64<<10 {
		t.Errorf("%d flood requests of 1 MiB grew the audit log by %d bytes", flood, grown)
	}
	raw, err := os.ReadFile(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	written, dropped := 0, 0
	rs := records(t, d.Dir)
	for i, line := range bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n")) {
		rec := rs[i]
		if rec.Peer == nil || rec.Peer.UID != int(auid) {
			continue
		}
		switch rec.Kind {
		case audit.KindRejected:
			written++
			if len(line) > 1024 || rec.Line == nil || rec.Line.Bytes < 1000000 || rec.Request != nil {
				t.Errorf("rgtfa's rejected record is %d bytes: %.300s", len(line), line)
			}
		case audit.KindDropped:
			dropped += rec.Dropped.Count
		default:
			t.Errorf("rgtfa's flood left a %s record", rec.Kind)
		}
	}
	checkBudget(t, "rgtfa", written, dropped, flood, rate, took)
	if strings.Contains(string(raw), strings.Repeat("A", 300)) {
		t.Error("the audit log holds the flood's lines")
	}
	// What `rootgate audit show` makes of them.
	out, err := exec.Command(rootgateBin, "audit", "show", "--file", auditPath(d.Dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("audit show: %v\n%s", err, out)
	}
	// One dropped record a minute: a flood slowed down by a busy machine
	// spans two (checkBudget counted them all above).
	for _, want := range []string{`dropped: +\d+ rejected record\(s\) since `, `line: +100\d{4} bytes, sha256 [0-9a-f]{64}\n`} {
		if !regexp.MustCompile(want).Match(out) {
			t.Errorf("audit show lacks %s:\n%.3000s", want, out)
		}
	}
}

// TestAuditRetention: past --audit-keep rotated files, the oldest are
// removed after a rotation, and `rootgate audit verify` still passes,
// saying that the log starts after a pruned file.
func TestAuditRetention(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Args: []string{"--audit-max-size", "2K", "--audit-keep", "2"}})
	for i := range 12 {
		wantOK(t, d.send(map[string]any{"id": "au-keep-" + strconv.Itoa(i)}))
	}
	files, err := audit.Files(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 3 {
		t.Fatalf("files %v: want the log and 2 rotated files", files)
	}
	first := records(t, d.Dir)[0]
	if first.Kind != audit.KindRotated || first.Seq < 10 {
		t.Fatalf("the oldest file kept starts with %+v: nothing was pruned", first)
	}
	out, err := exec.Command(rootgateBin, "audit", "verify", "--file", auditPath(d.Dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("verify after pruning: %v\n%s", err, out)
	}
	want := "starts with a rotated record after " + first.PrevFile + " (pruned or not given): earlier records not checked"
	if !strings.Contains(string(out), want) {
		t.Errorf("verify said:\n%s\nwant %q", out, want)
	}
	if _, err := os.Stat(filepath.Join(d.Dir, first.PrevFile)); err == nil {
		t.Errorf("%s was kept", first.PrevFile)
	}
}

// TestAuditFreeSpaceGuard: while the audit log's file system has less than
// --audit-min-free left, requests are refused before they are received (so
// before anything runs) and the daemon logs it at error level; once there
// is room, they run.
func TestAuditFreeSpaceGuard(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	small := testutil.Tmpfs(t, filepath.Join(dir, "small"), "4m")
	d := startDaemon(t, opts{Args: []string{"--audit", auditPath(small), "--audit-min-free", "2M"}})
	marker := filepath.Join(dir, "ran")
	wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"true"}}}))

	// Leave 1 MiB free: under the guard, with room for records still.
	filler := filepath.Join(small, "filler")
	if err := os.WriteFile(filler, make([]byte, 3<<20-64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	r := d.send(map[string]any{"id": "guarded", "pipeline": [][]string{{"touch", marker}}})
	wantError(t, r, "the audit log's file system is nearly full; not running")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran under the free-space guard")
	}
	waitTrail(t, small, "guarded", "rejected")
	wantError(t, d.send(map[string]any{"id": "guarded-ping", "action": "ping", "pipeline": nil}), "the audit log's file system is nearly full; not running")
	waitTrail(t, small, "guarded-ping", "rejected")
	d.waitLog("level=ERROR", `msg="audit log's file system nearly full; requests refused"`)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wantOK(t, d.send(map[string]any{"id": "room-again", "pipeline": [][]string{{"touch", marker}}}))
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command did not run once there was room")
	}
	d.Stop()
	if out, err := exec.Command(rootgateBin, "audit", "verify", "--file", auditPath(small)).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// floodBig is a requester that sends $ARGV[1] fresh requests, each with
// a 1 MB argument of the character $ARGV[2], every other one a ping when
// $ARGV[3] is 1. It prints each answer's status, then "done".
const floodBig = `
use IO::Socket::UNIX;
use POSIX qw(strftime);
$| = 1;
my ($path, $n, $fill, $pings) = @ARGV;
my $big = $fill x 1000000;
for my $i (1..$n) {
	my $s = IO::Socket::UNIX->new(Peer => $path) or die "connect: $!";
	my $now = strftime("%Y-%m-%dT%H:%M:%SZ", gmtime());
	my $action = $pings && $i % 2 ? "\"action\":\"ping\"," : "";
	print $s "{\"id\":\"big-$$-$i\",$action\"time\":\"$now\",\"pipeline\":[[\"true\",\"$big\"]]}\n";
	shutdown($s, 1);
	my $answer = <$s>;
	$answer =~ /"status":"(\w+)"/;
	print "answer $1\n";
	close $s;
}
print "done\n";
`

// TestUnpromptedFloodKeepsAuditSmall: pings and policy denials run
// nothing and reach no person, so their records leave a large pipeline
// out and share the per-uid budget of refused requests: a requester
// (rgtfa) sending them with 1 MB arguments cannot fill the log, while
// another user (rgtfb) is still served and recorded in full.
func TestUnpromptedFloodKeepsAuditSmall(t *testing.T) {
	t.Parallel()
	auid, agid := testAccount(t, "rgtfc")
	buid, bgid := testAccount(t, "rgtfd")
	d := startDaemon(t, opts{Policy: "deny any true ...\nallow any,env=* id ...\n", Args: []string{"--audit-reject-rate", "20"}})
	openToAll(t, d)
	const flood, rate = 60, 20
	before := auditSize(t, d)

	cmd := floodAs(auid, agid, floodBig, d.Sock, flood, "A", "1")
	began := time.Now()
	out, err := cmd.Output()
	took := time.Since(began)
	if err != nil {
		t.Fatalf("flood: %v\n%s", err, out)
	}
	if want := strings.Repeat("answer ok\nanswer denied\n", flood/2) + "done\n"; string(out) != want {
		t.Fatalf("flood answers:\n%s", out)
	}
	r := sendAs(t, d.Sock, buid, bgid, []uint32{}, request(map[string]any{"id": "rgtfd-1", "privileged": false, "pipeline": [][]string{{"id", "-u"}}}))
	if r.Status != wire.StatusOK {
		t.Fatalf("rgtfd after the flood: %s", r.raw)
	}
	waitTrail(t, d.Dir, "rgtfd-1", "received decided started finished")
	d.Terminate()

	if grown := auditSize(t, d) - before; grown > 64<<10 {
		t.Errorf("%d unprompted requests of 1 MiB grew the audit log by %d bytes", flood, grown)
	}
	requests, dropped := map[string]bool{}, 0
	for _, rec := range records(t, d.Dir) {
		switch {
		case rec.Kind == audit.KindDropped && rec.Peer != nil && rec.Peer.UID == int(auid):
			dropped += rec.Dropped.Count
		case strings.HasPrefix(rec.ID, "big-"):
			requests[rec.ID] = true
			if rec.Kind == audit.KindReceived && (rec.Request == nil || rec.Request.Pipeline != nil || rec.Line == nil || rec.Line.Bytes < 1000000) {
				t.Errorf("received record of %s not compact: %+v", rec.ID, rec.Request)
			}
		}
	}
	checkBudget(t, "rgtfc", len(requests), dropped, flood, rate, took)
}

// auditSize is the size of d's audit log now.
func auditSize(t *testing.T, d *daemonProc) int64 {
	t.Helper()
	fi, err := os.Stat(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// floodAs is the perl flood script run as uid:gid against sock, n times,
// with the script's further arguments more.
func floodAs(uid, gid uint32, script, sock string, n int, more ...string) *exec.Cmd {
	cmd := exec.Command("perl", append([]string{"-e", script, sock, strconv.Itoa(n)}, more...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	return cmd
}

// TestPingWithLongFieldsRecordedCompactly: a ping's line made long with an
// env key and a reason, not with arguments, is recorded compactly too: a
// requester cannot fill the log through the fields the pipeline check
// did not count.
func TestPingWithLongFieldsRecordedCompactly(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	key := "LC_" + strings.Repeat("A", 200000)
	r := d.send(map[string]any{"id": "long-ping", "action": "ping", "pipeline": nil,
		"env": map[string]string{key: "C.UTF-8"}, "reason": strings.Repeat("r", 4000)})
	if r.Status != wire.StatusOK {
		t.Fatalf("ping: %s", r.raw[:min(len(r.raw), 300)])
	}
	waitTrail(t, d.Dir, "long-ping", "received")
	for _, rec := range records(t, d.Dir) {
		if rec.ID == "long-ping" && rec.Kind == audit.KindReceived {
			if rec.Line == nil || rec.Line.Bytes < 200000 || rec.Request == nil || rec.Request.Env != nil || rec.Request.EnvSHA256 != nil || rec.Request.Reason != "" {
				t.Fatalf("received record not compact: line %+v, request %+v", rec.Line, rec.Request)
			}
			return
		}
	}
	t.Fatal("no received record")
}

// checkBudget checks who's flood of n refused requests against the budget
// of rate records a minute (a fixed minute from the first): every one is
// either written or counted as dropped, and as many are written as the
// minutes the flood took (took) allow. Within one minute that is exactly
// rate; a machine too busy to send them all within one gets more
// minutes, and so more records.
func checkBudget(t *testing.T, who string, written, dropped, n, rate int, took time.Duration) {
	t.Helper()
	minutes := int(took/time.Minute) + 1
	if written+dropped != n || written < min(n, rate) || written > min(n, rate*minutes) {
		t.Errorf("%s: %d records written and %d counted as dropped of %d sent in %v; want %d written a minute (%d minutes) and the rest counted",
			who, written, dropped, n, took.Round(time.Millisecond), rate, minutes)
	}
}
