package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// An operator's day (issue 15), end to end through the real binaries: a
// rootgated whose policy asks about everything, `rootgate approve` as
// root in a tmux window of its own (read with capture-pane, typed into
// with send-keys), and the agent, as nobody, asking with `rootgate run`
// and through a real MCP session over `rootgate mcp`. What the operator
// decides once at the prompt (a grant for a time, a saved rule) must
// admit exactly what was confirmed, for as long as it was confirmed.

// dayPolicy asks about everything but one denial: no catch-all at its end,
// which would decide first and shadow the rules saved under policy.d.
const dayPolicy = "# asks about everything not below\ndeny any rm -rf /\n"

// nobodyUID is the agent's account.
const nobodyUID = 65534

// runResult is how a `rootgate run` ended.
type runResult struct {
	code           int
	stdout, stderr string
}

// agentRun starts `rootgate run --reason reason -- argv...` as the agent
// (nobody) on d's socket; its result comes on the channel.
func agentRun(t *testing.T, d *rgtest.Daemon, reason string, argv ...string) <-chan runResult {
	t.Helper()
	return startAgent(t, d, nil, append([]string{"--reason", reason, "--"}, argv...))
}

// agentReady is agentRun with --stdin-file - on a pipe: the agent's
// process starts now, but sends its request (the same as agentRun's, as
// the stdin it reads is empty) only once release closes the pipe, so a
// test can have it arrive at a moment it chooses, without waiting for a
// process to start.
func agentReady(t *testing.T, d *rgtest.Daemon, reason string, argv ...string) (release func(), done <-chan runResult) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	done = startAgent(t, d, r, append([]string{"--stdin-file", "-", "--reason", reason, "--"}, argv...))
	r.Close()
	return func() { w.Close() }, done
}

// startAgent starts `rootgate run` with args as nobody on d's socket, with
// stdin (nil: none); its result comes on the channel.
func startAgent(t *testing.T, d *rgtest.Daemon, stdin *os.File, args []string) <-chan runResult {
	t.Helper()
	cmd := rootgateCmd(t, []string{"PATH=/usr/bin:/bin", "HOME=/"}, append([]string{"run", "--socket", d.Sock}, args...)...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: nobodyUID, Gid: nobodyUID, Groups: []uint32{}}}
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan runResult, 1)
	go func() {
		err := cmd.Wait()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			code = -1
		}
		done <- runResult{code, stdout.String(), stderr.String()}
	}()
	return done
}

// wantRun waits for a run and asserts its exit code and stdout.
func wantRun(t *testing.T, ch <-chan runResult, what string, code int, stdout string) runResult {
	t.Helper()
	select {
	case r := <-ch:
		if r.code != code || r.stdout != stdout {
			t.Fatalf("%s: rootgate run exited %d with stdout %q, stderr %q; want %d and %q", what, r.code, r.stdout, r.stderr, code, stdout)
		}
		return r
	case <-time.After(60 * time.Second):
		t.Fatalf("%s: rootgate run did not end", what)
	}
	return runResult{}
}

// notEnded fails if the run on ch has ended.
func notEnded(t *testing.T, ch <-chan runResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s: the request was answered: exit %d, %q %q", what, r.code, r.stdout, r.stderr)
	default:
	}
}

// auditRecord is what the test reads of an audit record (docs/audit.md).
type auditRecord struct {
	Kind    string    `json:"kind"`
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Request *struct {
		Reason string `json:"reason"`
	} `json:"request"`
	Decision *struct {
		Verdict    string `json:"verdict"`
		By         string `json:"by"`
		Grant      string `json:"grant"`
		PolicyFile string `json:"policy_file"`
		PolicyLine int    `json:"policy_line"`
		PolicyRule string `json:"policy_rule"`
	} `json:"decision"`
	Grant *struct {
		ID   string    `json:"id"`
		Ends time.Time `json:"ends"`
		Why  string    `json:"why"`
	} `json:"grant"`
}

// auditLog reads the records d's audit log holds so far (whole lines:
// the daemon may be writing the next one).
func auditLog(t *testing.T, d *rgtest.Daemon) []auditRecord {
	t.Helper()
	data, err := os.ReadFile(rgtest.AuditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var recs []auditRecord
	for line := range strings.Lines(string(data)) {
		var r auditRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit record %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// received is the received record of the one request sent with reason.
func received(t *testing.T, d *rgtest.Daemon, reason string) auditRecord {
	t.Helper()
	var found []auditRecord
	for _, r := range auditLog(t, d) {
		if r.Kind == "received" && r.Request != nil && r.Request.Reason == reason {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d requests received with reason %q, want 1", len(found), reason)
	}
	return found[0]
}

// decided is the decided record of the one request sent with reason,
// once its requester has its answer (the record is on disk before).
func decided(t *testing.T, d *rgtest.Daemon, reason string) auditRecord {
	t.Helper()
	id := received(t, d, reason).ID
	for _, r := range auditLog(t, d) {
		if r.Kind == "decided" && r.ID == id && r.Decision != nil {
			return r
		}
	}
	t.Fatalf("no decided record for the request %q (%s)", reason, id)
	return auditRecord{}
}

// wantDecidedBy asserts who decided the request sent with reason: by is
// the decision's by up to its first blank ("approver" for a person at
// the prompt, "grant" for a standing grant, "policy" for a rule).
func wantDecidedBy(t *testing.T, d *rgtest.Daemon, reason, verdict, by string) auditRecord {
	t.Helper()
	r := decided(t, d, reason)
	got, _, _ := strings.Cut(r.Decision.By, " ")
	if r.Decision.Verdict != verdict || got != by {
		t.Fatalf("request %q: decided %q by %q, want %q by %s", reason, r.Decision.Verdict, r.Decision.By, verdict, by)
	}
	return r
}

// prompted waits until the approver's window shows the prompt of the
// request sent with reason and accepts keys: its "y approve ·" line
// comes only once the prompt's dwell has passed.
func prompted(ta *rgtest.Tmux, reason string) {
	ta.T.Helper()
	ta.WaitRows("the prompt for "+reason+" to accept keys", func(rows []string) bool {
		at := slices.IndexFunc(rows, func(r string) bool { return strings.Contains(r, "reason:") && strings.Contains(r, reason) })
		return at >= 0 && slices.ContainsFunc(rows[at:], func(r string) bool { return strings.Contains(r, "y approve ·") })
	})
}

// typeRule replaces the last n characters of the rule in the editor by
// with, once the editor accepts keys, and has the rule, now reading rule,
// checked (Enter).
func typeRule(ta *rgtest.Tmux, n int, with, rule string) {
	ta.T.Helper()
	ta.Wait("RULE: edit it")
	ta.Key(strings.Repeat("\x7f", n) + with)
	ta.Wait(rule)
	ta.Key("\r")
	ta.Wait("RULE: y approve and save this rule")
}

// denyWithNote denies the prompt on screen with m and types note.
func denyWithNote(ta *rgtest.Tmux, note string) {
	ta.T.Helper()
	ta.Key("m")
	ta.Wait("A note for the requester")
	ta.Key(note + "\r")
}

// dropInLines is the drop-in's content, as lines; none when it is absent.
func dropInLines(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// wantSaved asserts that lines from is the comment and rule saved from
// the prompt for the request sent with reason, which ran argv.
func wantSaved(t *testing.T, d *rgtest.Daemon, lines []string, reason, argv, rule string) {
	t.Helper()
	head := regexp.MustCompile(`^# saved from the prompt by root \(uid 0\) on pts/\d+ at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)
	req := fmt.Sprintf("# request %s from uid %d (nobody): %s", received(t, d, reason).ID, nobodyUID, argv)
	if len(lines) != 3 || !head.MatchString(lines[0]) || lines[1] != req || lines[2] != rule {
		t.Fatalf("the drop-in holds:\n%s\nwant the comment (%s) and the rule %s", strings.Join(lines, "\n"), req, rule)
	}
}

func TestOperatorsDayInTmux(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Fatal("rootgated needs root: run the tests as root")
	}
	start := time.Now()
	dir := testutil.ShortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil { // the agent (nobody) reaches the socket in it
		t.Fatal(err)
	}
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: dir, Policy: dayPolicy, Args: []string{"--prompt-timeout", "60s"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rootgated said:\n%s", d.Stderr)
		}
	})
	if err := os.Chmod(d.Sock, 0o666); err != nil {
		t.Fatal(err)
	}
	dropIn := filepath.Join(dir, "policy.d", "approved.policy")
	ta := rgtest.StartTmuxApprover(t, d.ApproverSock(), 160, 50, "--grant-for", "2s,15m")
	ta.Wait("attached to rootgated")

	// Approve once: y runs it, and leaves nothing standing.
	status := []string{"echo", "status", "nginx"}
	ch := agentRun(t, d, "day: approve once", status...)
	prompted(ta, "day: approve once")
	ta.Key("y")
	wantRun(t, ch, "approved once", 0, "status nginx\n")
	wantDecidedBy(t, d, "day: approve once", "allow", "approver")

	// The same request asks again; this time the operator grants it for
	// 2 s, with g at the prompt and y on the grant shown.
	ch = agentRun(t, d, "day: status, granted", status...)
	prompted(ta, "day: status, granted")
	ta.Key("g")
	ta.Wait("STANDING GRANT for 2 s")
	ta.Wait("GRANT: y approve and grant for 2 s")
	notEnded(t, ch, "the grant shown, not confirmed")
	// The agent's next two requests are ready to go as soon as the grant
	// holds: a grant of 2 s must not be spent waiting for processes to
	// start (or, built with -race, to exit).
	sendSame, same := agentReady(t, d, "day: status, same", status...)
	sendOther, other := agentReady(t, d, "day: status, other unit", "echo", "status", "php-fpm")
	ta.Key("y")
	var g1 auditRecord
	testutil.WaitFor(t, "the grant to be made", 30*time.Second, func() bool {
		for _, r := range auditLog(t, d) {
			if r.Kind == "grant_created" {
				g1 = r
			}
		}
		return g1.Grant != nil
	})
	sendSame()
	sendOther()
	if g1.Grant.ID != "g1" {
		t.Fatalf("the first grant is %+v, want g1", g1.Grant)
	}
	wantRun(t, ch, "the request granted", 0, "status nginx\n")
	wantDecidedBy(t, d, "day: status, granted", "allow", "approver")

	// While it holds: the identical request runs without a prompt, one
	// with another argument is asked (and denied with a note, which
	// reaches the agent).
	wantRun(t, same, "the identical request", 0, "status nginx\n")
	if r := wantDecidedBy(t, d, "day: status, same", "allow", "grant"); r.Decision.Grant != "g1" {
		t.Fatalf("the identical request was decided by %+v, want grant g1", r.Decision)
	}
	prompted(ta, "day: status, other unit")
	// It was received, and put to the person, while g1 held.
	if got := received(t, d, "day: status, other unit").Time; !got.Before(g1.Grant.Ends) {
		t.Fatalf("the request with another argument came at %s, after g1 ended (%s): the grant took too long to use", got, g1.Grant.Ends)
	} else {
		t.Logf("the request with another argument came %s before g1 ended", g1.Grant.Ends.Sub(got).Round(time.Millisecond))
	}
	const note = "php-fpm is not mine to restart: ask Alice"
	denyWithNote(ta, note)
	r := wantRun(t, other, "the request with another argument", 77, "")
	if !regexp.MustCompile(`(?m)^rootgate: note: root \(uid 0\) on pts/\d+ wrote: "` + regexp.QuoteMeta(note) + `"$`).MatchString(r.stderr) {
		t.Fatalf("the note did not reach rootgate run's stderr:\n%s", r.stderr)
	}
	wantDecidedBy(t, d, "day: status, other unit", "deny", "approver")

	// After the 2 s the identical request asks again, and the prompt
	// says which grant would have covered it.
	testutil.WaitFor(t, "g1's end", 30*time.Second, func() bool { return time.Now().After(g1.Grant.Ends) })
	ch = agentRun(t, d, "day: status, grant over", status...)
	prompted(ta, "day: status, grant over")
	ta.Wait("grant g1 (ENDED at ")
	ta.Key("y")
	wantRun(t, ch, "the identical request after the grant", 0, "status nginx\n")
	wantDecidedBy(t, d, "day: status, grant over", "allow", "approver")

	// A grant for 15 min (d picks the other length), then revoked: it asks
	// again.
	ch = agentRun(t, d, "day: status, granted longer", status...)
	prompted(ta, "day: status, granted longer")
	ta.Key("g")
	ta.Wait("GRANT: y approve and grant for 2 s")
	ta.Key("d")
	ta.Wait("GRANT: y approve and grant for 15 min")
	ta.Key("y")
	wantRun(t, ch, "the request granted for longer", 0, "status nginx\n")
	list := rootgateOut(t, "grants", "--socket", d.ApproverSock())
	if !strings.Contains(list, "g2  requester nobody (uid 65534)") || !strings.Contains(list, "run:   echo status nginx") || strings.Contains(list, "g1") {
		t.Fatalf("rootgate grants:\n%s", list)
	}
	wantRun(t, agentRun(t, d, "day: status, g2", status...), "the request under g2", 0, "status nginx\n")
	if r := wantDecidedBy(t, d, "day: status, g2", "allow", "grant"); r.Decision.Grant != "g2" {
		t.Fatalf("decided by %+v, want grant g2", r.Decision)
	}
	if out := rootgateOut(t, "grants", "revoke", "--socket", d.ApproverSock(), "g2"); out != "revoked g2\n" {
		t.Fatalf("rootgate grants revoke g2: %q", out)
	}

	// Asked again, the operator saves a rule instead, widened to the
	// two units they look after: the drop-in holds exactly it, under its
	// comment, and the daemon applies it at once.
	ch = agentRun(t, d, "day: status, revoked", status...)
	prompted(ta, "day: status, revoked")
	ta.Key("r")
	ta.Wait("SAVE A POLICY RULE: edit the rule below")
	ta.Wait("allow privileged,user=nobody,cwd=/,stdin=none echo status nginx")
	const rule = "allow privileged,user=nobody,cwd=/,stdin=none echo status {nginx|php-fpm}"
	typeRule(ta, len("nginx"), "{nginx|php-fpm}", rule)
	notEnded(t, ch, "the rule shown, not confirmed")
	ta.Key("y")
	wantRun(t, ch, "the request the rule was saved on", 0, "status nginx\n")
	wantDecidedBy(t, d, "day: status, revoked", "allow", "approver")
	wantSaved(t, d, dropInLines(t, dropIn), "day: status, revoked", "echo status nginx", rule)
	wantRun(t, agentRun(t, d, "day: status, by the rule", "echo", "status", "php-fpm"), "the request the rule admits", 0, "status php-fpm\n")
	if r := wantDecidedBy(t, d, "day: status, by the rule", "allow", "policy"); r.Decision.PolicyFile != dropIn || r.Decision.PolicyLine != 3 || r.Decision.PolicyRule != rule {
		t.Fatalf("decided by %+v, want %s:3", r.Decision, dropIn)
	}

	// What the rule does not say still asks: the agent, through its MCP
	// session, is denied with a note it reads in the tool's result.
	mcpc := (&mcpEnv{dir: dir, sock: d.Sock, asock: d.ApproverSock(), bin: rgtest.Rootgate(t), daemon: d}).startMCP(t, nobodyUID)
	done := mcpc.executeAsync(t, map[string]any{"argv": []string{"echo", "status", "apache2"}, "reason": "day: status, over MCP"})
	prompted(ta, "day: status, over MCP")
	const mcpNote = "apache2 is gone since Monday"
	denyWithNote(ta, mcpNote)
	got := <-done
	if by := got.r.DecidedBy; got.r.Status != "denied" || by == nil || by.By != "person" || by.Note != mcpNote ||
		!regexp.MustCompile(`^root \(uid 0\) on pts/\d+$`).MatchString(by.Approver) {
		t.Fatalf("the MCP result of the denial: %+v, decided by %s", got.r, got.text)
	}
	if !regexp.MustCompile(`note from root \(uid 0\) on pts/\d+: "` + regexp.QuoteMeta(mcpNote) + `"\n`).MatchString(got.text) {
		t.Fatalf("the MCP result's text lacks the note:\n%s", got.text)
	}

	// An interpreter: one confirmation of a grant for sh -c, or of an
	// open rule for it, gives neither; the rule's second confirmation
	// saves it.
	shRun := []string{"sh", "-c", "echo from-sh"}
	const shRule = "allow privileged,user=nobody,cwd=/,stdin=none sh -c ..."
	for i, second := range []bool{false, true} {
		reason := fmt.Sprintf("day: sh, %d", i+1)
		ch = agentRun(t, d, reason, shRun...)
		prompted(ta, reason)
		if !second {
			ta.Key("g")
			ta.Wait("GRANT: y approve and grant for 2 s")
			ta.Key("y")
			ta.Wait("SECOND CONFIRMATION: this grant allows more than one command")
			ta.Wait("SECOND CONFIRMATION: y approve and grant it anyway")
			notEnded(t, ch, "one confirmation of a grant for sh")
			ta.Key("n") // back to the request
			prompted(ta, reason)
			if list := rootgateOut(t, "grants", "--socket", d.ApproverSock()); list != "no standing grants\n" {
				t.Fatalf("after one confirmation of a grant for sh, rootgate grants:\n%s", list)
			}
		}
		ta.Key("r")
		ta.Wait(`allow privileged,user=nobody,cwd=/,stdin=none sh -c "echo from-sh"`)
		typeRule(ta, len(`"echo from-sh"`), "...", shRule)
		ta.Key("y")
		ta.Wait("SECOND CONFIRMATION: this rule allows more than the one command shown")
		ta.Wait("SECOND CONFIRMATION: y approve and save the rule anyway")
		notEnded(t, ch, "one confirmation of an open rule for sh")
		if !second {
			ta.Key("n") // back to the editor, to the request, and deny it
			ta.Wait("RULE: edit it")
			ta.Key("\x1b")
			prompted(ta, reason)
			ta.Key("n")
			wantRun(t, ch, "the open rule confirmed once", 77, "")
			if lines := dropInLines(t, dropIn); len(lines) != 3 {
				t.Fatalf("one confirmation changed the drop-in:\n%s", strings.Join(lines, "\n"))
			}
			continue
		}
		ta.Key("y")
		wantRun(t, ch, "the open rule confirmed twice", 0, "from-sh\n")
	}
	lines := dropInLines(t, dropIn)
	if len(lines) != 7 || lines[3] != "" {
		t.Fatalf("the drop-in holds:\n%s\nwant the two rules with their comments, a blank line between", strings.Join(lines, "\n"))
	}
	wantSaved(t, d, lines[:3], "day: status, revoked", "echo status nginx", rule)
	wantSaved(t, d, lines[4:], "day: sh, 2", `sh -c 'echo from-sh'`, shRule)
	wantRun(t, agentRun(t, d, "day: sh, by the rule", "sh", "-c", "echo other"), "another script under the rule", 0, "other\n")
	if r := wantDecidedBy(t, d, "day: sh, by the rule", "allow", "policy"); r.Decision.PolicyFile != dropIn || r.Decision.PolicyLine != 7 || r.Decision.PolicyRule != shRule {
		t.Fatalf("decided by %+v, want %s:7", r.Decision, dropIn)
	}

	// The day's trail: g1 ended by itself, g2 was revoked.
	why := map[string]string{}
	for _, r := range auditLog(t, d) {
		if r.Kind == "grant_revoked" && r.Grant != nil {
			why[r.Grant.ID] = r.Grant.Why
		}
	}
	if why["g1"] != "ended" || why["g2"] != "revoked" {
		t.Errorf("grant_revoked records: %v, want g1 ended and g2 revoked", why)
	}
	t.Logf("the day took %s", time.Since(start).Round(100*time.Millisecond))
}

// rootgateOut runs the real rootgate as root with args and returns its
// output, failing unless it exits 0.
func rootgateOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(rgtest.Rootgate(t), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rootgate %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
