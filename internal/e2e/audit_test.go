package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// records reads the audit log of the daemon in dir (all its files).
func records(t *testing.T, dir string) []*audit.Record {
	t.Helper()
	files, err := audit.Files(auditPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	var out []*audit.Record
	err = audit.ReadAll(files, func(r audit.Read) error {
		if r.Err != nil {
			return fmt.Errorf("%s:%d: %w", r.File, r.Line, r.Err)
		}
		out = append(out, r.Record)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// trail is the records of request id, in order.
func trail(t *testing.T, dir, id string) []*audit.Record {
	t.Helper()
	var out []*audit.Record
	for _, r := range records(t, dir) {
		if r.ID == id {
			out = append(out, r)
		}
	}
	return out
}

// kinds lists the kinds of rs.
func kinds(rs []*audit.Record) string {
	var k []string
	for _, r := range rs {
		k = append(k, string(r.Kind))
	}
	return strings.Join(k, " ")
}

// waitTrail waits until request id's records are of the kinds want.
func waitTrail(t *testing.T, dir, id, want string) []*audit.Record {
	t.Helper()
	var rs []*audit.Record
	waitFor(t, id+" records "+want, 20*time.Second, func() bool {
		rs = trail(t, dir, id)
		return kinds(rs) == want
	})
	return rs
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestAuditApproved: a run approved by a person, and an approval nobody
// gave in time, as the audit log tells them.
func TestAuditApproved(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	// The output is made from pieces so that it appears nowhere in the
	// request: finding it in the log would mean output was recorded.
	line := request(map[string]any{
		"id":       "au-approved",
		"pipeline": [][]string{{"sh", "-c", "printf '%s%s\\n' SECRET OUTPUT; printf '%s%s' ERR OUT >&2"}, {"cat"}},
		"reason":   "audit test",
		"stdin":    "aW5wdXQ=", // "input"
		"env":      map[string]string{"LANG": "C.UTF-8"},
	})
	ch := make(chan response, 1)
	go func() { ch <- d.sendRaw(line) }()
	a.See("au-approved")
	a.See("n or Esc deny")
	a.Key("y")
	r := wantOK(t, <-ch)
	if string(r.Stdout) != "SECRETOUTPUT\n" {
		t.Fatalf("%s", r.raw)
	}

	rs := waitTrail(t, d.Dir, "au-approved", "received decided started finished")
	rec, dec, st, fin := rs[0], rs[1], rs[2], rs[3]
	if p := rec.Peer; p == nil || p.UID != 0 || p.PID <= 0 || p.Exe == "" {
		t.Errorf("peer %+v", rec.Peer)
	}
	q := rec.Request
	if q.LineSHA256 != hexSum([]byte(strings.TrimSuffix(line, "\n"))) {
		t.Errorf("line sha256 %s, want that of %q", q.LineSHA256, line)
	}
	if q.StdinBytes != 5 || q.StdinSHA256 != hexSum([]byte("input")) || q.Reason != "audit test" || q.Env["LANG"] != "C.UTF-8" || len(q.Pipeline) != 2 || !q.Privileged {
		t.Errorf("request %+v", q)
	}
	if v := dec.Decision; v.Verdict != "allow" || v.ApproverUID == nil || *v.ApproverUID != 0 || !strings.HasPrefix(v.Approver, "root on ") || v.PolicyLine != 0 {
		t.Errorf("decision %+v", v)
	}
	if ru := st.Run; ru.RunAsUID != 0 || ru.RunAsUser != "root" || len(ru.Stages) != 2 || !strings.HasSuffix(ru.Stages[0].Path, "/sh") || !strings.HasSuffix(ru.Stages[1].Path, "/cat") {
		t.Errorf("run %+v", ru)
	}
	res := fin.Result
	if len(res.Stages) != 2 || res.Stages[0].ExitCode != 0 || res.StdoutBytes != 13 || res.StdoutSHA256 != hexSum([]byte("SECRETOUTPUT\n")) ||
		res.Stages[0].StderrBytes != 6 || res.Stages[0].StderrSHA256 != hexSum([]byte("ERROUT")) || res.Duration == "" {
		t.Errorf("result %+v", res)
	}
	raw, err := os.ReadFile(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{"SECRETOUTPUT", "ERROUT", "aW5wdXQ="} {
		if bytes.Contains(raw, []byte(out)) {
			t.Errorf("the audit log holds %q", out)
		}
	}

	// Nobody answers: decided with verdict timeout, nothing started.
	ch = d.ask(map[string]any{"id": "au-expired"})
	a.See("au-expired")
	if r := <-ch; r.Status != wire.StatusTimeout {
		t.Fatalf("%s", r.raw)
	}
	rs = waitTrail(t, d.Dir, "au-expired", "received decided")
	if v := rs[1].Decision; v.Verdict != "timeout" || v.By != "timeout" {
		t.Errorf("decision %+v", v)
	}
}

// TestAuditPolicyAndRejected: a request denied by a rule, requests
// rejected before and after decoding, and a secret env value that never
// reaches the log.
func TestAuditPolicyAndRejected(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "deny any rm ...\nallow any\n"})

	r := d.send(map[string]any{"id": "au-denied", "pipeline": [][]string{{"rm", "-rf", "/nonexistent"}}})
	if r.Status != wire.StatusDenied || r.Code != wire.CodeDeniedByPolicy {
		t.Fatalf("%s", r.raw)
	}
	rs := waitTrail(t, d.Dir, "au-denied", "received decided")
	if v := rs[1].Decision; v.Verdict != "deny" || v.PolicyLine != 1 || v.PolicyRule != "deny any rm ..." || v.By != "policy "+filepath.Join(d.Dir, "policy")+":1" || v.ApproverUID != nil {
		t.Errorf("decision %+v", v)
	}

	r = d.send(map[string]any{"id": "au-secret", "env": map[string]string{"GITHUB_TOKEN": "hunter2-value", "db_Password": "pw-value", "LANG": "C"}})
	wantError(t, r, `env key "GITHUB_TOKEN" is not allowed`)
	// Refused before it was received: one compact record, the line's
	// size and hash in place of the request.
	rs = waitTrail(t, d.Dir, "au-secret", "rejected")
	if rs[0].Error != `env key "GITHUB_TOKEN" is not allowed` || rs[0].Peer == nil || rs[0].Request != nil || rs[0].Line == nil || rs[0].Line.Bytes == 0 || len(rs[0].Line.SHA256) != 64 {
		t.Errorf("rejected record %+v", rs[0])
	}

	// Not even JSON: one rejected record with the peer and the error.
	n := len(records(t, d.Dir))
	r = d.sendRaw("{nope\n")
	if r.Status != wire.StatusError {
		t.Fatalf("%s", r.raw)
	}
	var last *audit.Record
	waitFor(t, "a rejected record", 10*time.Second, func() bool {
		all := records(t, d.Dir)
		last = all[len(all)-1]
		return len(all) == n+1
	})
	if last.Kind != audit.KindRejected || last.Error != r.Message || last.Peer == nil || last.Peer.PID <= 0 {
		t.Errorf("record %+v", last)
	}

	raw, err := os.ReadFile(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"hunter2-value", "pw-value"} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("the audit log holds the secret %q", s)
		}
	}
	fi, err := os.Stat(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("audit log mode %v", fi.Mode().Perm())
	}
}

// TestAuditRunEnds: a run that times out, one whose requester goes away,
// and one the daemon kills as it stops each end in their own record.
func TestAuditRunEnds(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Args: []string{"--kill-grace", "1s"}})

	r := d.send(map[string]any{"id": "au-timeout", "timeout": 1, "pipeline": [][]string{{"sleep", "30"}}})
	if r.Status != wire.StatusTimeout {
		t.Fatalf("%s", r.raw)
	}
	rs := waitTrail(t, d.Dir, "au-timeout", "received decided started timed_out")
	if st := rs[3].Result.Stages[0]; st.Signal != "SIGTERM" || st.ExitCode != 128+15 {
		t.Errorf("stage %+v", st)
	}

	marker := fmt.Sprintf("%d.125", 7000+time.Now().Nanosecond()%1000)
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(request(map[string]any{"id": "au-cancel", "pipeline": [][]string{{"sleep", marker}}}))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the run to start", 20*time.Second, func() bool { return len(procsWith(marker)) > 0 })
	c.Close()
	waitTrail(t, d.Dir, "au-cancel", "received decided started cancelled")

	marker = fmt.Sprintf("%d.375", 7000+time.Now().Nanosecond()%1000)
	ch := d.ask(map[string]any{"id": "au-killed", "pipeline": [][]string{{"sleep", marker}}})
	waitFor(t, "the run to start", 20*time.Second, func() bool { return len(procsWith(marker)) > 0 })
	d.Stop()
	wantError(t, <-ch, wire.ErrKilledStopping.Error()) // it ran: not "daemon stopping"
	waitTrail(t, d.Dir, "au-killed", "received decided started killed")
}

// TestAuditStopWhileAsking: a request waiting for a person when the daemon
// stops is recorded as ended by the daemon ("daemon stopping", what its
// requester is told), not as withdrawn by the requester; one whose
// requester leaves is still the requester's.
func TestAuditStopWhileAsking(t *testing.T) {
	t.Parallel()
	d := approverDaemon(t, "--prompt-timeout", "120s")
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(request(map[string]any{"id": "au-left", "pipeline": [][]string{{"true"}}}))); err != nil {
		t.Fatal(err)
	}
	a.See("au-left")
	c.Close()
	rs := waitTrail(t, d.Dir, "au-left", "received decided")
	if dd := rs[1].Decision; dd.Verdict != "withdrawn" || dd.By != "requester" {
		t.Errorf("requester left: decision %+v", dd)
	}

	ch := d.ask(map[string]any{"id": "au-stopped", "pipeline": [][]string{{"true"}}})
	a.See("au-stopped")
	d.Stop()
	wantError(t, <-ch, wire.ErrStopping.Error())
	rs = waitTrail(t, d.Dir, "au-stopped", "received decided")
	if dd := rs[1].Decision; dd.Verdict != "withdrawn" || dd.By != "daemon stopping" || dd.Message != "daemon stopping" {
		t.Errorf("daemon stopped: decision %+v, want withdrawn by \"daemon stopping\"", dd)
	}
}

// TestAuditStopWhileQueued: an approved request waiting for a run slot
// (--max-runs busy) when the daemon stops is recorded as not started
// because the daemon stopped, not because of a bare cancellation.
func TestAuditStopWhileQueued(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Args: []string{"--max-runs", "1", "--kill-grace", "1s"}})
	marker := fmt.Sprintf("%d.625", 7000+time.Now().Nanosecond()%1000)
	busy := d.ask(map[string]any{"id": "au-busy", "pipeline": [][]string{{"sleep", marker}}})
	waitFor(t, "the first run to start", 20*time.Second, func() bool { return len(procsWith(marker)) > 0 })
	queued := d.ask(map[string]any{"id": "au-queued", "pipeline": [][]string{{"true"}}})
	waitTrail(t, d.Dir, "au-queued", "received decided")
	d.Stop()
	wantError(t, <-busy, wire.ErrKilledStopping.Error())
	wantError(t, <-queued, wire.ErrStopping.Error())
	rs := waitTrail(t, d.Dir, "au-queued", "received decided failed")
	if rs[2].Error != "not started: daemon stopping" {
		t.Errorf("failed record's error %q, want %q", rs[2].Error, "not started: daemon stopping")
	}
}

// TestAuditRotation: a small --audit-max-size spreads the log over files
// that verify as one chain (the harness checks at stop).
func TestAuditRotation(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Args: []string{"--audit-max-size", "2K", "--audit-keep", "0"}})
	for i := range 12 {
		wantOK(t, d.send(map[string]any{"id": fmt.Sprintf("au-rot-%d", i)}))
	}
	d.Stop()
	files, err := audit.Files(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("files %v: want rotation", files)
	}
	sum, err := audit.Verify(files)
	if err != nil || sum.Genesis == "" || sum.Files != len(files) {
		t.Fatalf("%+v %v", sum, err)
	}
	if got := len(trail(t, d.Dir, "au-rot-11")); got != 4 {
		t.Errorf("%d records of the last request", got)
	}
}

// TestAuditDiskFull: with the audit log's file system full, requests are
// answered with an error and nothing runs; once there is room again,
// requests run and the chain is intact.
func TestAuditDiskFull(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	full := testutil.Tmpfs(t, filepath.Join(dir, "full"), "64k")
	// The free-space guard off: this is the last line of defence behind it.
	d := startDaemon(t, opts{Args: []string{"--audit", auditPath(full), "--audit-min-free", "0"}})

	// Fill what is left of the file system.
	filler := filepath.Join(full, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 512)
	for {
		if _, err := f.Write(chunk); err != nil {
			break
		}
	}
	for {
		if _, err := f.Write(chunk[:1]); err != nil {
			break
		}
	}
	f.Close()
	// The audit file's last page may still have room for a record or
	// two: ping until a record no longer fits.
	failed := false
	for range 20 {
		r := d.send(map[string]any{"action": "ping", "pipeline": nil})
		if r.Status == wire.StatusError {
			wantError(t, r, "cannot write the audit record; not running")
			failed = true
			break
		}
	}
	if !failed {
		t.Fatal("pings kept being recorded on a full file system")
	}
	before, err := os.ReadFile(auditPath(full))
	if err != nil {
		t.Fatal(err)
	}

	// A longer request than that ping cannot be recorded either, and
	// does not run.
	marker := filepath.Join(dir, "ran")
	r := d.send(map[string]any{"pipeline": [][]string{{"touch", marker}}, "reason": strings.Repeat("r", 1000)})
	wantError(t, r, "cannot write the audit record; not running")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although its audit record could not be written")
	}
	after, err := os.ReadFile(auditPath(full))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("the failed writes left %d bytes behind", len(after)-len(before))
	}
	// The log line may reach the test's copy of stderr after the answer.
	d.waitLog("cannot write audit record")

	// Room again: the next request runs, and the log verifies (at stop).
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"touch", marker}}}))
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command did not run once there was room")
	}
	d.Stop()
	out, err := exec.Command(rootgateBin, "audit", "verify", "--file", auditPath(full)).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// TestStartedSyncFailedRunsNothing: the started record is synced while
// the run gets ready, and no process of the run is created before that
// sync returns: when it fails (a real fsync(2) error, from a disk that
// cannot write the record back), the command never runs and the request
// is answered with code audit.
func TestStartedSyncFailedRunsNothing(t *testing.T) {
	t.Parallel()
	mnt, fill, free := testutil.FailingDisk(t)
	logDir := filepath.Join(mnt, "log")
	if err := os.Mkdir(logDir, 0o700); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{Args: []string{"--audit", auditPath(logDir), "--audit-min-free", "0"}})
	wantOK(t, d.send(nil))

	fill()
	marker := filepath.Join(shortDir(t), "ran")
	// 256 KiB of arguments (each under the kernel's 128 KiB for one):
	// the records need blocks of the file system's image that the full
	// tmpfs under it cannot take, so the writes succeed (page cache) and
	// their sync fails.
	argv := []string{"sh", "-c", `touch "$0"`, marker}
	for range 4 {
		argv = append(argv, strings.Repeat("x", 64<<10))
	}
	r := d.send(map[string]any{"pipeline": [][]string{argv}})
	wantError(t, r, "cannot write the audit record; not running")
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran although its started record was not on disk")
	}
	d.waitLog("cannot sync audit record")

	// Room again: the next request runs.
	free()
	wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"touch", marker}}}))
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("the command did not run once the disk took its records")
	}
}

// fakeJournal binds, in dir, a journal socket as journald's
// (sd/journal/socket) and returns the directory to mount on /run/systemd
// and the entries that come to it, parsed.
func fakeJournal(t *testing.T, dir string) (jdir string, entries chan map[string]string) {
	t.Helper()
	jdir = filepath.Join(dir, "sd")
	if err := os.MkdirAll(filepath.Join(jdir, "journal"), 0o755); err != nil {
		t.Fatal(err)
	}
	js, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(jdir, "journal", "socket"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { js.Close() })
	entries = make(chan map[string]string, 1000)
	go func() {
		buf := make([]byte, 1<<20)
		for {
			n, _, err := js.ReadFromUnix(buf)
			if err != nil {
				return
			}
			if m, err := testutil.ParseJournal(buf[:n]); err == nil {
				entries <- m
			} else {
				t.Errorf("journal entry: %v", err)
			}
		}
	}()
	return jdir, entries
}

// startWithJournal starts rootgated in dir with policyFile, in a mount
// namespace of its own where jdir (fakeJournal's) is on /run/systemd, so
// that go-systemd's journal.Send finds the test's socket.
func startWithJournal(t *testing.T, dir, jdir, policyFile string) *daemonProc {
	t.Helper()
	d := newDaemon(t, dir)
	d.Cmd = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$0" /run/systemd && exec "$@"`, jdir,
		rootgated, "--socket", d.Sock, "--approver-socket", "", "--runtime-dir", filepath.Join(dir, "run"),
		"--policy", policyFile, "--audit", auditPath(dir))
	d.Start()
	d.WaitReady()
	return d
}

// TestAuditJournal: with a journal, every lifecycle event of a request is
// an entry carrying REQUEST_ID, the requester, the decision and the
// outcome as fields. The daemon runs in its own mount namespace where the
// test's directory is bind-mounted on /run/systemd, so the socket the test
// binds there is what go-systemd's journal.Send finds at
// /run/systemd/journal/socket.
func TestAuditJournal(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	jdir, entries := fakeJournal(t, dir)
	if err := os.WriteFile(filepath.Join(dir, "policy"), []byte("allow any\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startWithJournal(t, dir, jdir, filepath.Join(dir, "policy"))

	wantOK(t, d.send(map[string]any{"id": "au-journal", "pipeline": [][]string{{"true"}}}))
	want := map[string]map[string]string{
		"received": {"REQUESTER_UID": "0"},
		"decided":  {"DECISION": "allow", "DECIDED_BY": "policy " + filepath.Join(dir, "policy") + ":1"},
		"started":  {"DECISION": "allow", "RUN_AS_UID": "0", "EXECUTABLES": "/usr/bin/true"},
		"finished": {"DECISION": "allow", "OUTCOME": "finished", "EXIT_CODES": "0"},
	}
	trail := waitTrail(t, dir, "au-journal", "received decided started finished")
	deadline := time.After(20 * time.Second)
	for len(want) > 0 {
		var e map[string]string
		select {
		case e = <-entries:
		case <-deadline:
			t.Fatalf("no journal entries for %v\n%s", want, d.Stderr)
		}
		if e["REQUEST_ID"] != "au-journal" {
			continue
		}
		fields, ok := want[e["EVENT"]]
		if !ok {
			t.Errorf("unexpected entry %v", e)
			continue
		}
		delete(want, e["EVENT"])
		fields["MESSAGE"] = "audit: " + e["EVENT"]
		fields["PRIORITY"] = "6"
		fields["SYSLOG_IDENTIFIER"] = "rootgated"
		for k, v := range fields {
			if e[k] != v {
				t.Errorf("%s entry: %s=%q, want %q", e["EVENT"], k, e[k], v)
			}
		}
		if e["REQUESTER_PID"] == "" || e["REQUESTER_PID"] == "0" {
			t.Errorf("%s entry without requester pid: %v", e["EVENT"], e)
		}
		// The entry names its audit record: seq and hash.
		var rec *audit.Record
		for _, r := range trail {
			if string(r.Kind) == e["EVENT"] {
				rec = r
			}
		}
		if rec == nil || e["AUDIT_SEQ"] != fmt.Sprint(rec.Seq) || e["AUDIT_HASH"] != rec.Hash {
			t.Errorf("%s entry: AUDIT_SEQ=%s AUDIT_HASH=%s, record %+v", e["EVENT"], e["AUDIT_SEQ"], e["AUDIT_HASH"], rec)
		}
	}
}

// TestAuditTamper: a real daemon's log, tampered with in each way, fails
// "rootgate audit verify" with exit 1 naming the exact record.
func TestAuditTamper(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	for i := range 3 {
		wantOK(t, d.send(map[string]any{"id": fmt.Sprintf("au-tamper-%d", i)}))
	}
	d.Stop()
	orig, err := os.ReadFile(auditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(orig), "\n")
	lines = lines[:len(lines)-1] // genesis, opened, then 4 records per request
	if len(lines) != 14 {
		t.Fatalf("%d records", len(lines))
	}
	for _, c := range []struct {
		name string
		edit func(l []string) []string
		want string
	}{
		{"edit", func(l []string) []string {
			l[5] = strings.Replace(l[5], `"exit_code":0`, `"exit_code":1`, 1)
			return l
		}, `:6: hash does not match the record's content: the record was changed$`},
		{"delete", func(l []string) []string { return append(l[:4:4], l[5:]...) }, `:5: seq 6: seq 6 follows 4: 1 record\(s\) missing before this one$`},
		{"reorder", func(l []string) []string { l[8], l[9] = l[9], l[8]; return l }, `:9: seq 10: seq 10 follows 8: 1 record\(s\) missing before this one$`},
		{"truncate", func(l []string) []string { l[13] = l[13][:40]; return l }, `:14: record is cut short \(no newline at its end\)$`},
		{"truncate middle", func(l []string) []string { l[3] = l[3][:40] + "\n"; return l }, `:4: not a valid JSON record$`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(shortDir(t), "audit.jsonl")
			if err := os.WriteFile(path, []byte(strings.Join(c.edit(append([]string(nil), lines...)), "")), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(rootgateBin, "audit", "verify", "--file", path)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
				t.Fatalf("exit %v, want 1\n%s", err, stderr.String())
			}
			re := `^rootgate: broken: ` + regexp.QuoteMeta(path) + c.want
			if !regexp.MustCompile(re).MatchString(strings.TrimSuffix(stderr.String(), "\n")) {
				t.Fatalf("stderr %q, want %s", stderr.String(), re)
			}
		})
	}
}
