package e2e

import (
	"encoding/base64"
	"net"
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
	"github.com/rootgate/rootgate/wire"
)

// TestProtocolErrors sends each kind of bad request over a real socket and
// checks the exact answer, then that the daemon still serves.
func TestProtocolErrors(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	for _, tc := range []struct {
		name string
		raw  string
		id   string // expected id in the answer ("" = empty)
		want string
		code string // expected code
	}{
		{"not json", "{oops\n", "", "invalid JSON: invalid character 'o'", "invalid_json"},
		{"not utf8", "{\"time\":\"\xff\"}\n", "", "invalid JSON: request is not valid UTF-8", "invalid_json"},
		{"unknown field", request(map[string]any{"id": "u1", "user": "root"}), "", `unknown field "user"`, "unknown_field"},
		{"type", request(map[string]any{"id": "t1", "privileged": "yes"}), "", `field "privileged" must be a boolean`, "invalid_request"},
		{"no pipeline", request(map[string]any{"id": "p1", "pipeline": nil}), "p1", `missing field "pipeline"`, "invalid_request"},
		{"17 stages", request(map[string]any{"id": "p2", "pipeline": make17()}), "p2", "pipeline must have 1 to 16 stages", "invalid_request"},
		{"control", request(map[string]any{"id": "c1", "pipeline": [][]string{{"echo", "a", "\x1b[2J"}}}), "c1", "pipeline[0][2] contains a control or bidi character", "invalid_request"},
		{"bidi reason", request(map[string]any{"id": "c2", "reason": "ok\u202etxt.exe"}), "c2", "reason contains a control or bidi character", "invalid_request"},
		{"agent privileged", request(map[string]any{"id": "a1", "forward_agent": true}), "a1", `forward_agent requires "privileged": false`, "invalid_request"},
		{"no time", request(map[string]any{"id": "f1", "time": nil}), "f1", `missing field "time"`, "invalid_request"},
		{"no zone", request(map[string]any{"id": "f2", "time": "2026-02-13T14:30:00"}), "f2", `field "time" must be an RFC 3339 date-time with a zone, got "2026-02-13T14:30:00"`, "invalid_request"},
		{"env", request(map[string]any{"id": "e1", "env": map[string]string{"FOO": "1"}}), "e1", `env key "FOO" is not allowed`, "env_not_allowed"},
		{"env ld", request(map[string]any{"id": "e2", "env": map[string]string{"LD_PRELOAD": "/x.so"}}), "e2", `env key "LD_PRELOAD" is not allowed`, "env_not_allowed"},
		{"ssh agent env", request(map[string]any{"id": "e3", "env": map[string]string{"SSH_AUTH_SOCK": "/x"}}), "e3", "SSH_AUTH_SOCK cannot be set; use forward_agent", "env_not_allowed"},
		{"not found", request(map[string]any{"id": "n1", "pipeline": [][]string{{"true"}, {"no-such-command-rg"}}}), "n1", `stage 2: executable not found: "no-such-command-rg"`, "not_found"},
		{"relative path not found", request(map[string]any{"id": "n2", "pipeline": [][]string{{"./nope"}}}), "n2", `stage 1: executable not found: "./nope"`, "not_found"},
		{"cwd", request(map[string]any{"id": "w1", "cwd": "/no/such/dir"}), "w1", `cwd "/no/such/dir" is not an existing directory`, "cwd"},
		{"agent no approver", request(map[string]any{"id": "a2", "forward_agent": true, "privileged": false}), "a2", "no SSH agent to forward: start the approver with --forward-agent", "no_agent"},
		{"no newline", `{"time":"x"}`, "", "request missing trailing newline", "invalid_request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := d.sendRaw(tc.raw)
			wantError(t, r, tc.want)
			wantCode(t, r, tc.code)
			if r.ID != tc.id {
				t.Errorf("id = %q, want %q", r.ID, tc.id)
			}
			if r.Stages != nil || r.Stdout != nil {
				t.Errorf("error answer carries run fields: %s", r.raw)
			}
			d.alive()
		})
	}
}

// wantCode checks that r carries code, a code of the protocol that comes
// with r's status.
func wantCode(t testing.TB, r response, code string) {
	t.Helper()
	if status, ok := wire.CodeStatus(code); !ok || r.Code != code || r.Status != status {
		t.Fatalf("got %s, want code %q", strings.TrimSpace(r.raw), code)
	}
}

func make17() [][]string {
	p := make([][]string, 17)
	for i := range p {
		p[i] = []string{"true"}
	}
	return p
}

func TestOversizeLine(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	// Write until the daemon stops reading: it must answer after 1 MiB
	// without waiting for the rest (there is no newline, ever).
	go func() {
		chunk := []byte(strings.Repeat("a", 64<<10))
		for {
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	r := readResponse(t, c)
	wantError(t, r, "request exceeds maximum size (1048576 bytes)")
	wantCode(t, r, wire.CodeTooLarge)
	d.alive()

	// Exactly 1 MiB including the newline is accepted. (One argument may
	// not pass 128 KiB, the kernel's limit, so the bytes are spread.)
	args := []string{"true"}
	for range 15 {
		args = append(args, strings.Repeat("x", 64<<10))
	}
	// A fixed time: RFC3339Nano drops trailing zeros, so lengths vary.
	over := map[string]any{"id": "big", "time": time.Now().UTC().Format("2006-01-02T15:04:05.000000000Z07:00"), "pipeline": [][]string{append(args, "")}}
	pad := wire.MaxLine - len(request(over))
	over["pipeline"] = [][]string{append(args, strings.Repeat("y", pad))}
	line := request(over)
	if len(line) != wire.MaxLine {
		t.Fatalf("test line is %d bytes", len(line))
	}
	wantOK(t, d.sendRaw(line))
}

// TestReadDeadline: a peer that starts its line and never ends it is
// answered and closed once --read-timeout has passed since it connected
// (short here; the default's text, "request not received within 10s", is
// wire.ErrReadTimeout, held to docs/protocol.md by wire's docs test).
func TestReadDeadline(t *testing.T) {
	t.Parallel()
	const within = 700 * time.Millisecond
	d := startDaemon(t, opts{Args: []string{"--read-timeout", within.String()}})
	start := time.Now()
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// An answer only at the default deadline (10 s) is too late.
	_ = c.SetDeadline(start.Add(wire.ReadTimeout - time.Second))
	if _, err := c.Write([]byte(`{"time":`)); err != nil {
		t.Fatal(err)
	}
	r := readResponse(t, c)
	wantError(t, r, "request not received within 700ms")
	wantCode(t, r, wire.CodeReadTimeout)
	if took := time.Since(start); took < within {
		t.Errorf("answered after %v, before the %v read deadline", took, within)
	}
	d.alive()
}

func TestSilentPeerGetsNothing(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	c, err := net.Dial("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	c.(*net.UnixConn).CloseWrite()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 10)
	n, err := c.Read(b)
	if n != 0 || err == nil {
		t.Fatalf("a peer that sent nothing got %q, %v", b[:n], err)
	}
	c.Close()
	d.alive()
}

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDefaults(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	r := wantOK(t, d.send(map[string]any{"id": nil, "pipeline": [][]string{{"id", "-u"}}}))
	if !uuidV4.MatchString(r.ID) {
		t.Errorf("missing id answered with %q, want a UUIDv4", r.ID)
	}
	if got := string(r.Stdout); got != "0\n" {
		t.Errorf("privileged by default: id -u = %q, want root", got)
	}
	// The same id-less line again is a replay, named by the id the daemon made.
	line := request(map[string]any{"id": nil})
	first := wantOK(t, d.sendRaw(line))
	again := d.sendRaw(line)
	wantError(t, again, `duplicate request id "`+again.ID+`"`)
	if again.ID == first.ID || !uuidV4.MatchString(again.ID) {
		t.Errorf("the replayed id-less request got id %q (first %q)", again.ID, first.ID)
	}
	// A different id-less line is not.
	wantOK(t, d.send(map[string]any{"id": nil}))
}

func TestPing(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "deny any\n"})
	r := wantOK(t, d.send(map[string]any{"id": "ping-1", "action": "ping", "pipeline": nil}))
	if r.Message != "pong" || r.ID != "ping-1" || r.Code != "" || r.Stages != nil || r.Approver == nil || *r.Approver {
		t.Fatalf("ping answered %s", r.raw)
	}
	// With an approver attached, the answer says so.
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	if r := wantOK(t, d.send(map[string]any{"action": "ping", "pipeline": nil})); r.Approver == nil || !*r.Approver {
		t.Fatalf("ping with an approver attached answered %s", r.raw)
	}
	// The same gates apply: a stale ping is refused, a replayed one too.
	r = d.send(map[string]any{"id": "ping-1", "action": "ping", "pipeline": nil})
	wantError(t, r, `duplicate request id "ping-1"`)
	wantCode(t, r, wire.CodeReplay)
	if r := d.send(map[string]any{"action": "ping", "pipeline": nil, "time": "2020-01-01T00:00:00Z"}); r.Status != wire.StatusError || !strings.HasPrefix(r.Message, "request too old: ") || r.Code != wire.CodeStaleTime {
		t.Fatalf("stale ping answered %s", r.raw)
	}
}

func TestFreshness(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	now := time.Now()
	for _, tc := range []struct {
		name, time string
	}{
		{"fractional", now.UTC().Format("2006-01-02T15:04:05.123456789Z07:00")},
		{"plus offset", now.In(time.FixedZone("", 5*3600+1800)).Format(time.RFC3339)},
		{"minus offset", now.In(time.FixedZone("", -8*3600)).Format(time.RFC3339)},
		{"30s old", now.Add(-30 * time.Second).UTC().Format(time.RFC3339)},
		{"30s ahead", now.Add(30 * time.Second).UTC().Format(time.RFC3339)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantOK(t, d.send(map[string]any{"time": tc.time}))
		})
	}
	// An offset is honoured, not ignored: the local clock time an hour off
	// with the wrong zone is an hour stale.
	wrong := now.UTC().Add(-time.Hour).Format("2006-01-02T15:04:05") + "+00:00"
	r := d.send(map[string]any{"time": wrong})
	if r.Status != wire.StatusError || !regexp.MustCompile(`^request too old: 36\d\ds \(max 60s\)$`).MatchString(r.Message) {
		t.Fatalf("an hour-old time: %s", r.raw)
	}
	old := time.Now().Add(-75 * time.Second).UTC().Format(time.RFC3339Nano)
	r = d.send(map[string]any{"time": old})
	if r.Status != wire.StatusError || !regexp.MustCompile(`^request too old: 7[56]s \(max 60s\)$`).MatchString(r.Message) {
		t.Fatalf("75 s old: %s", r.raw)
	}
	future := time.Now().Add(120 * time.Second).UTC().Format(time.RFC3339Nano)
	r = d.send(map[string]any{"time": future})
	if r.Status != wire.StatusError || !regexp.MustCompile(`^request time is in the future: 1[12]\ds ahead \(max 60s\)$`).MatchString(r.Message) {
		t.Fatalf("120 s ahead: %s", r.raw)
	}
	d.alive()
}

func TestReplaySurvivesRestart(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	d := startDaemon(t, opts{Dir: dir})
	wantOK(t, d.send(map[string]any{"id": "once"}))
	wantError(t, d.send(map[string]any{"id": "once"}), `duplicate request id "once"`)
	line := request(map[string]any{"id": nil})
	wantOK(t, d.sendRaw(line))
	// A refused request (not found) still uses up its id.
	wantError(t, d.send(map[string]any{"id": "nf", "pipeline": [][]string{{"no-such-cmd-rg"}}}), `stage 1: executable not found: "no-such-cmd-rg"`)
	// A request refused before the replay check does not.
	wantError(t, d.send(map[string]any{"id": "early", "env": map[string]string{"X": "1"}}), `env key "X" is not allowed`)
	d.Stop()

	d2 := startDaemon(t, opts{Dir: dir})
	wantError(t, d2.send(map[string]any{"id": "once"}), `duplicate request id "once"`)
	wantError(t, d2.send(map[string]any{"id": "nf"}), `duplicate request id "nf"`)
	if r := d2.sendRaw(line); r.Status != wire.StatusError || !strings.HasPrefix(r.Message, "duplicate request id ") {
		t.Fatalf("id-less replay after restart: %s", r.raw)
	}
	wantOK(t, d2.send(map[string]any{"id": "early"}))
}

func TestSocketFile(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	// A second daemon must not take over a live socket.
	d2 := startDaemonNoWait(t, d.Dir)
	if err := d2.WaitExit(30 * time.Second); err == nil {
		t.Fatal("a second daemon on a live socket exited 0")
	}
	if !strings.Contains(d2.Stderr.String(), "address already in use") {
		t.Errorf("second daemon said %q", d2.Stderr.String())
	}
	d.alive()
	d.Stop()
	// A stale socket file (nobody listening) is replaced.
	ln, err := net.Listen("unix", d.Sock)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Lstat(d.Sock); err != nil {
		t.Fatal("stale socket file missing", err)
	}
	d3 := startDaemon(t, opts{Dir: d.Dir})
	d3.alive()
}

func TestStdinCwdTimeoutExtensions(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{})
	r := wantOK(t, d.send(map[string]any{
		"pipeline": [][]string{{"sh", "-c", "pwd; cat"}},
		"cwd":      "/tmp",
		"stdin":    base64.StdEncoding.EncodeToString([]byte("fed\x00bytes")),
		"version":  "test-client 1",
	}))
	if got := string(r.Stdout); got != "/tmp\nfed\x00bytes" {
		t.Fatalf("stdout %q", got)
	}
	// Without stdin the first stage reads /dev/null.
	r = wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"wc", "-c"}}}))
	if strings.TrimSpace(string(r.Stdout)) != "0" {
		t.Fatalf("stdin without the field: %q", r.Stdout)
	}
	// A relative executable resolves against cwd.
	dir := shortDir(t)
	if err := os.WriteFile(filepath.Join(dir, "hello"), []byte("#!/bin/sh\necho hello from the script\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"./hello"}}, "cwd": dir}))
	if got := string(r.Stdout); got != "hello from the script\n" {
		t.Fatalf("relative executable: %q", got)
	}
}

// TestSocketGroup checks both socket modes: 0600 root without the group
// rootgate, 0660 root:rootgate with it. The group is made for the test
// when the machine has none, and removed after.
func TestSocketGroup(t *testing.T) {
	testutil.LockGroup(t)
	if _, err := lookupGroup("rootgate"); err != nil {
		d := startDaemon(t, opts{})
		checkSocketMode(t, d.Sock, 0o600, 0)
		d.Stop()
		if out, err := exec.Command("groupadd", "--system", "rootgate").CombinedOutput(); err != nil {
			t.Fatalf("groupadd: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("groupdel", "rootgate").Run() })
	}
	g, err := lookupGroup("rootgate")
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	d := startDaemon(t, opts{})
	checkSocketMode(t, d.Sock, 0o660, gid)
}

func checkSocketMode(t *testing.T, path string, mode os.FileMode, gid int) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Perm() != mode || st.Uid != 0 || int(st.Gid) != gid {
		t.Errorf("socket %v uid %d gid %d; want %v uid 0 gid %d", fi.Mode().Perm(), st.Uid, st.Gid, mode, gid)
	}
}
