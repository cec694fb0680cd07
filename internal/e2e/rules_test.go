package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/approval/terminal"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/policy"
	"github.com/rootgate/rootgate/wire"
)

// Saving a policy rule from the prompt: a person at a real `rootgate
// approve` presses r, edits the rule, confirms it; the real rootgated
// checks it again, writes it under policy.d and reloads. The requester
// (the adversary) tries to get more saved than the person confirmed: keys
// typed into the approver's terminal during a dwell, a rule that does not
// cover the request, an open rule for an interpreter confirmed once.

// ruleDaemon asks a person about everything, with a main policy file that
// has no catch-all (which would decide first and shadow a saved rule).
func ruleDaemon(t *testing.T) *daemonProc {
	return startDaemon(t, opts{Policy: "# asks about everything\ndeny any rm -rf /\n", Args: []string{"--prompt-timeout", "60s"}})
}

// dropIn is where d saves rules.
func dropIn(d *daemonProc) string { return filepath.Join(d.Dir, "policy.d", "approved.policy") }

// Keys on the approver's terminal.
const (
	keyEnter     = "\r"
	keyBackspace = "\x7f"
)

// startRule presses r once the prompt for the request on ch accepts keys
// and waits for the editor, showing rule.
func (a *approverProc) startRule(ch chan response, rule string) {
	a.T.Helper()
	a.notAnsweredKey(ch, "r")
	a.See("SAVE A POLICY RULE: edit the rule below")
	a.See(rule)
	a.See("RULE: edit it")
}

// secondConfirmation confirms the rule in the editor (Enter, y) and
// waits for the second screen, which must say why, with the request
// still waiting for its second y.
func (a *approverProc) secondConfirmation(ch chan response, why, what string) {
	a.T.Helper()
	a.Key(keyEnter)
	a.See("RULE: y approve and save this rule")
	a.Key("y")
	a.See("SECOND CONFIRMATION: this rule allows more than the one command shown")
	a.See(why)
	a.See("SECOND CONFIRMATION: y approve and save the rule anyway")
	pending(a.T, ch, what)
}

// editRule replaces the last n characters of the rule in the editor by
// with, once the editor accepts keys.
func (a *approverProc) editRule(n int, with string) {
	a.T.Helper()
	a.Key(strings.Repeat(keyBackspace, n) + with)
	a.See(with)
}

// enterRuleTappingY presses Enter in the rule editor and, once the rule
// to confirm (saved to file) shows, taps y as an operator's finger still
// on the key would, failing if the request on ch is answered. The
// confirmation's dwell begins once the approver has read the Enter, so
// only a y sent less than terminal.Dwell after the Enter surely lands
// inside it, however late the test saw the screen: tapY's "300 ms from
// seeing it" ran past the dwell when the screen took over 700 ms to be
// seen (a -race run beside the tmux tests), and its y saved the rule. On
// a machine too loaded to see the screen in time, it goes back to the
// editor (Esc) and tries again.
func (a *approverProc) enterRuleTappingY(ch chan response, file string) {
	a.T.Helper()
	const margin = 200 * time.Millisecond // a write's own delay
	for try := 1; ; try++ {
		sent := time.Now()
		a.Key(keyEnter)
		a.See("SAVE A POLICY RULE")
		a.See(file)
		taps := 0
		// not a wait: keys typed through the whole dwell
		for ; time.Since(sent) < terminal.Dwell-margin; taps++ {
			a.Key("y")
			select {
			case r := <-ch:
				a.T.Fatalf("a y typed as the rule appeared answered the request: %s", r.raw)
			case <-time.After(50 * time.Millisecond):
			}
		}
		if taps > 0 {
			return
		}
		if try == 10 {
			a.T.Fatalf("the rule to confirm showed %d times, each over %v after its Enter", try, terminal.Dwell-margin)
		}
		a.See("RULE: y approve and save this rule") // Esc counts once the dwell is over
		a.Key("\x1b")
		a.See("RULE: edit it")
	}
}

// wantRuleFile asserts the drop-in holds exactly the comment above rule
// for request id, and rule, and is root's 0644 in a root 0755 directory.
func wantRuleFile(t *testing.T, d *daemonProc, id, rule string) {
	t.Helper()
	b, err := os.ReadFile(dropIn(d))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "# saved from the prompt by root (uid 0) on pts/") ||
		!strings.HasPrefix(lines[1], fmt.Sprintf("# request %s from uid 0 (root): ", id)) || lines[2] != rule {
		t.Fatalf("%s holds:\n%s\nwant the comment and %s", dropIn(d), b, rule)
	}
	for path, mode := range map[string]os.FileMode{dropIn(d): 0o644, filepath.Dir(dropIn(d)): 0o755 | os.ModeDir} {
		fi, err := os.Lstat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("%s: mode %v uid %d, want %v root", path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, mode)
		}
	}
}

// wantRule asserts r ran, decided by the saved rule at line.
func wantRule(t *testing.T, d *daemonProc, r response, line int) {
	t.Helper()
	wantOK(t, r)
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPolicy || r.DecidedBy.Source != fmt.Sprintf("%s:%d", dropIn(d), line) {
		t.Fatalf("got %s, want decided_by the policy at %s:%d", r.raw, dropIn(d), line)
	}
}

// auditShow is `rootgate audit show` of d's log, once d has stopped.
func auditShow(t *testing.T, d *daemonProc) string {
	t.Helper()
	d.Stop()
	d.VerifyAudit()
	out, err := exec.Command(rootgateBin, "audit", "show", "--file", auditPath(d.Dir)).CombinedOutput()
	if err != nil {
		t.Fatalf("audit show: %v\n%s", err, out)
	}
	return string(out)
}

func TestRuleFromPrompt(t *testing.T) {
	t.Parallel()
	d := ruleDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	run := [][]string{{"echo", "saved-rule"}}
	const rule = "allow privileged,user=root,cwd=/,stdin=none echo saved-rule"

	ch := d.ask(map[string]any{"id": "rule-1", "pipeline": run, "privileged": true})
	a.See("rule-1")
	a.startRule(ch, rule)
	// The confirmation has a dwell of its own: a y typed as it appears
	// does not save the rule.
	a.enterRuleTappingY(ch, dropIn(d))
	a.See("RULE: y approve and save this rule")
	pending(t, ch, "the rule shown, not confirmed")
	a.Key("y")
	r := wantOK(t, <-ch)
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson || r.DecidedBy.Rule != rule || r.DecidedBy.Source != dropIn(d)+":3" {
		t.Fatalf("the request the rule was saved on: %s", r.raw)
	}
	a.See("approved; rule saved to " + dropIn(d) + " line 3")
	wantRuleFile(t, d, "rule-1", rule)

	// The daemon applies it at once: the same command runs without a
	// prompt, decided by that rule; anything else still asks.
	wantRule(t, d, d.send(map[string]any{"id": "rule-2", "pipeline": run, "privileged": true}), 3)
	a.wantAsked(d.ask(map[string]any{"id": "rule-other-arg", "pipeline": [][]string{{"echo", "saved-rule", "x"}}, "privileged": true}), "rule-other-arg")
	a.wantAsked(d.ask(map[string]any{"id": "rule-unpriv", "pipeline": run, "privileged": false}), "rule-unpriv")
	a.wantAsked(d.ask(map[string]any{"id": "rule-env", "pipeline": run, "privileged": true, "env": map[string]string{"LANG": "C"}}), "rule-env")

	out := auditShow(t, d)
	for _, want := range []string{"rule_saved", "saved by root on pts/", fmt.Sprintf("to %s line 3, for uid 0", dropIn(d)), rule, "policy_reload"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit show lacks %q:\n%s", want, out)
		}
	}
}

// TestRuleEditedGeneralised: the person widens the rule before saving it
// (the last argument becomes a placeholder); it then admits the other
// argument without a prompt, and nothing beyond what it says.
func TestRuleEditedGeneralised(t *testing.T) {
	t.Parallel()
	d := ruleDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	const rule = "allow privileged,user=root,cwd=/,stdin=none echo gen {alpha|beta}"

	ch := d.ask(map[string]any{"id": "gen-1", "pipeline": [][]string{{"echo", "gen", "alpha"}}, "privileged": true})
	a.See("gen-1")
	a.startRule(ch, "allow privileged,user=root,cwd=/,stdin=none echo gen alpha")
	a.editRule(len("alpha"), "{alpha|beta}")
	a.Key(keyEnter)
	a.See(rule)
	a.See("RULE: y approve and save this rule")
	a.Key("y")
	wantOK(t, <-ch)
	wantRuleFile(t, d, "gen-1", rule)

	r := wantOK(t, d.send(map[string]any{"id": "gen-2", "pipeline": [][]string{{"echo", "gen", "beta"}}, "privileged": true}))
	wantRule(t, d, r, 3)
	if string(r.Stdout) != "gen beta\n" {
		t.Fatalf("got %s", r.raw)
	}
	a.wantAsked(d.ask(map[string]any{"id": "gen-3", "pipeline": [][]string{{"echo", "gen", "gamma"}}, "privileged": true}), "gen-3")
}

// TestRuleNotCoveringRequestRefused: an edited rule that does not match
// the request on screen is refused with the reason, on the screen and by
// the daemon (for an approver client that skips the screen's check).
func TestRuleNotCoveringRequestRefused(t *testing.T) {
	t.Parallel()
	d := ruleDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	ch := d.ask(map[string]any{"id": "cover-1", "pipeline": [][]string{{"echo", "cover", "one"}}, "privileged": true})
	a.See("cover-1")
	a.startRule(ch, "allow privileged,user=root,cwd=/,stdin=none echo cover one")
	a.editRule(len("one"), "two")
	a.Key(keyEnter)
	a.See(`RULE REFUSED: the rule does not match the request shown (argument 2 "one" does not match "two")`)
	a.See("RULE: edit it")
	pending(t, ch, "a rule that does not cover the request")
	a.Key("\x1b") // back to the request
	a.See("y approve ·")
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want denied", r.raw)
	}
	if _, err := os.Stat(dropIn(d)); !os.IsNotExist(err) {
		t.Fatalf("a drop-in was written: %v", err)
	}

	// The daemon never takes the approver's word for it.
	c := dialApprover(t, d)
	c.send(&remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: "raw"})
	if m := c.next(); m.Type != remote.MsgWelcome || m.RuleFile != dropIn(d) {
		t.Fatalf("got %+v, want a welcome naming the rule file %s", m, dropIn(d))
	}
	a.Kill() // the raw client is the only approver
	ch = d.ask(map[string]any{"id": "cover-2", "pipeline": [][]string{{"echo", "cover", "one"}}, "privileged": true})
	p := c.prompt()
	yes := true
	for _, tc := range []struct{ rule, want string }{
		{"allow privileged,cwd=/,stdin=none echo cover two", `decision refused: rule not saved: the rule does not match the request shown (argument 2 "one" does not match "two"): a rule saved from here must cover it`},
		{"allow privileged,cwd=/,stdin=none echo cover one\nallow any", "decision refused: rule not saved: the rule does not parse: a rule is one line"},
		{"deny privileged echo cover one", "decision refused: rule not saved: the rule is not an allow rule (it says deny): only allow rules are saved from the prompt"},
		{"allow privileged,cwd=/,stdin=none", "decision refused: rule not saved: the rule must name its command in plain text (no glob): write other rules in the policy file"},
		{"allow privileged,cwd=/,stdin=none echo cover \u202eone", "decision refused: rule not saved: the rule does not parse: a control, invisible or invalid UTF-8 character; a policy is plain text"},
	} {
		c.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Rule: tc.rule})
		if m := c.next(); m.Type != remote.MsgError || m.Message != tc.want {
			t.Errorf("rule %q: got %+v, want error %q", tc.rule, m, tc.want)
		}
	}
	pending(t, ch, "refused rules")
	no := false
	c.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &no})
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want denied", r.raw)
	}
	if _, err := os.Stat(dropIn(d)); !os.IsNotExist(err) {
		t.Fatalf("a drop-in was written: %v", err)
	}
}

// TestRuleInterpreterNeedsSecondConfirmation: a rule for sh -c that ends
// in ... lets the requester run any script: one y does not save it, the
// second screen says why, and the daemon refuses such a rule from a
// client that does not say it was confirmed twice.
func TestRuleInterpreterNeedsSecondConfirmation(t *testing.T) {
	t.Parallel()
	d := ruleDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	run := [][]string{{"sh", "-c", "echo from-sh"}}
	const rule = "allow privileged,user=root,cwd=/,stdin=none sh -c ..."

	ch := d.ask(map[string]any{"id": "sh-rule-1", "pipeline": run})
	a.See("sh-rule-1")
	a.startRule(ch, `allow privileged,user=root,cwd=/,stdin=none sh -c "echo from-sh"`)
	a.editRule(len(`"echo from-sh"`), "...")
	a.secondConfirmation(ch, "runs sh, which runs whatever its arguments or input say", "one confirmation of an open rule for sh")
	a.Key("n") // back to the editor, then to the request, then deny
	a.See("RULE: edit it")
	a.Key("\x1b")
	a.See("y approve ·")
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want denied", r.raw)
	}
	if _, err := os.Stat(dropIn(d)); !os.IsNotExist(err) {
		t.Fatalf("one confirmation wrote a drop-in: %v", err)
	}

	ch = d.ask(map[string]any{"id": "sh-rule-2", "pipeline": run})
	a.See("sh-rule-2")
	a.startRule(ch, `allow privileged,user=root,cwd=/,stdin=none sh -c "echo from-sh"`)
	a.editRule(len(`"echo from-sh"`), "...")
	a.Key(keyEnter)
	a.See("RULE: y approve and save this rule")
	a.Key("y")
	a.See("SECOND CONFIRMATION: y approve and save the rule anyway")
	a.Key("y")
	wantOK(t, <-ch)
	wantRuleFile(t, d, "sh-rule-2", rule)
	wantRule(t, d, d.send(map[string]any{"id": "sh-rule-3", "pipeline": [][]string{{"sh", "-c", "echo other"}}}), 3)

	// A client that skips the second confirmation is refused.
	a.Kill()
	c := attachRaw(t, d)
	ch = d.ask(map[string]any{"id": "sh-rule-4", "pipeline": [][]string{{"bash", "-c", "id"}}})
	c.wantRunsAnythingRefused(ch, "allow privileged,cwd=/,stdin=none bash -c ...", "an open rule for bash without rule_runs_anything")
}

// TestRuleStdinScriptNeedsSecondConfirmation: the requester sends its
// script to sh on stdin. A rule from the prompt binds the stdin shown
// (stdin=sha256:…), so it runs that script alone, never another sent the
// same way (issue 27: a rule that bound no stdin ran every script as
// root); a rule that drops the binding is refused as broader than the
// request shown; and the rule, being for a shell, still needs the second
// confirmation, which the daemon requires of a client that skips it.
func TestRuleStdinScriptNeedsSecondConfirmation(t *testing.T) {
	t.Parallel()
	d := ruleDaemon(t)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	run := [][]string{{"sh"}}
	body := []byte("echo from-stdin\n")
	rule := "allow privileged,user=root,cwd=/,stdin=sha256:" + policy.StdinSHA256(body) + " sh"
	script := base64.StdEncoding.EncodeToString(body)

	ch := d.ask(map[string]any{"id": "stdin-rule-1", "pipeline": run, "stdin": script})
	a.See("stdin-rule-1")
	a.startRule(ch, "stdin=sha256:"+policy.StdinSHA256(body)[:16])
	a.secondConfirmation(ch, "the rule binds the input and the directory shown, but not the files the program reads", "one confirmation of a rule for sh reading a script on stdin")
	a.Key("y")
	if r := wantOK(t, <-ch); string(r.Stdout) != "from-stdin\n" {
		t.Fatalf("got %s, want the script's output", r.raw)
	}
	wantRuleFile(t, d, "stdin-rule-1", rule)
	wantRule(t, d, d.send(map[string]any{"id": "stdin-rule-2", "pipeline": run, "stdin": script}), 3)
	other := base64.StdEncoding.EncodeToString([]byte("echo any-other-script\n"))
	if r := wantOK(t, d.send(map[string]any{"id": "stdin-rule-3", "check": true, "pipeline": run, "stdin": other})); r.Check != wire.CheckAsk {
		t.Fatalf("another script on stdin: %s, want asked about", r.raw)
	}

	a.Kill()
	c := attachRaw(t, d)
	// A rule that binds no stdin is broader than the request shown.
	ch = d.ask(map[string]any{"id": "stdin-rule-4", "pipeline": [][]string{{"bash"}}, "stdin": script})
	p := c.prompt()
	yes := true
	c.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Rule: "allow privileged,user=root,cwd=/ bash"})
	if m := c.next(); m.Type != remote.MsgError || !strings.Contains(m.Message, "broader than the request shown") {
		t.Fatalf("a rule binding no stdin: got %+v, want it refused as broader", m)
	}
	pending(t, ch, "a rule for bash that binds no stdin")
	c.decide(p, false)
	<-ch
	// A client that skips the second confirmation is refused.
	ch = d.ask(map[string]any{"id": "stdin-rule-5", "pipeline": [][]string{{"bash"}}, "stdin": script})
	c.wantRunsAnythingRefused(ch, "allow privileged,user=root,cwd=/,stdin=sha256:"+policy.StdinSHA256(body)+" bash", "a rule for bash reading stdin without rule_runs_anything")
}

// TestRuleRunnerCwdNeedsSecondConfirmation: make with no argument runs
// the Makefile of its directory. The rule offered binds that directory
// (cwd=), but the Makefile there may say anything by the time the rule is
// used. One y does not save it: the second screen says why; and the
// daemon refuses it from a client that skips that screen.
func TestRuleRunnerCwdNeedsSecondConfirmation(t *testing.T) {
	t.Parallel()
	d := ruleDaemon(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Makefile"), []byte("all:\n\t@echo from-make\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	rule := "allow privileged,user=root,cwd=" + dir + ",stdin=none make"
	ch := d.ask(map[string]any{"id": "make-rule-1", "pipeline": [][]string{{"make"}}, "cwd": dir})
	a.See("make-rule-1")
	a.startRule(ch, rule)
	a.secondConfirmation(ch, "the rule binds the input and the directory shown, but not the files the program reads", "one confirmation of a rule for make")
	a.Key("n")
	a.See("RULE: edit it")
	a.Key("\x1b")
	a.See("y approve ·")
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want denied", r.raw)
	}

	a.Kill()
	c := attachRaw(t, d)
	ch = d.ask(map[string]any{"id": "make-rule-2", "pipeline": [][]string{{"make"}}, "cwd": dir})
	c.wantRunsAnythingRefused(ch, rule, "a rule for make without rule_runs_anything")
	if _, err := os.Stat(dropIn(d)); !os.IsNotExist(err) {
		t.Fatalf("a drop-in was written: %v", err)
	}
}

// TestRuleOpenRunnerNeedsSecondConfirmation: the request shown is a
// find, or a tar, that runs nothing, but a rule for it ending in ...
// admits find's -exec, or tar's --to-command, which run any command as
// root: the daemon refuses such a rule from a client that does not say it
// was confirmed twice, and takes the exact rule.
func TestRuleOpenRunnerNeedsSecondConfirmation(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, open, exact string }{
		{"find", "find /etc ...", "find /etc -maxdepth 0"},
		{"tar", "tar -tf ...", "tar -tf /dev/null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d := ruleDaemon(t)
			cl := attachRaw(t, d)
			argv := strings.Fields(c.exact)
			ch := d.ask(map[string]any{"id": c.name + "-rule-1", "pipeline": [][]string{argv}})
			p := cl.prompt()
			decide := func(rule string) *remote.Message {
				yes := true
				cl.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Rule: rule})
				return cl.next()
			}
			if m := decide("allow privileged,user=root,cwd=/,stdin=none " + c.open); m.Type != remote.MsgError || m.Message != remote.ApproverRuleRunsAnything {
				t.Fatalf("got %+v, want %q", m, remote.ApproverRuleRunsAnything)
			}
			pending(t, ch, "an open rule for "+c.name+" without rule_runs_anything")
			if m := decide("allow privileged,user=root,cwd=/,stdin=none " + c.exact); m.Type != remote.MsgResult {
				t.Fatalf("the exact rule: got %+v, want a result", m)
			}
			wantOK(t, <-ch)
			wantRule(t, d, d.send(map[string]any{"id": c.name + "-rule-2", "pipeline": [][]string{argv}}), 3)
		})
	}
}

// TestRuleShadowedIsTakenOut: a stricter rule (an ask in the main file)
// decides the request whatever the saved rule says: the daemon finds it
// after reloading, puts the drop-in back as it was, reloads again and
// tells the approver why; the request stays approved once.
func TestRuleShadowedIsTakenOut(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "ask privileged echo ...\n", Args: []string{"--prompt-timeout", "60s"}})
	if err := os.Mkdir(filepath.Dir(dropIn(d)), 0o755); err != nil {
		t.Fatal(err)
	}
	const before = "# an earlier rule\nallow unprivileged id\n"
	if err := os.WriteFile(dropIn(d), []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	run := [][]string{{"echo", "shadowed"}}

	ch := d.ask(map[string]any{"id": "shadow-1", "pipeline": run, "privileged": true})
	a.See("shadow-1")
	a.startRule(ch, "allow privileged,user=root,cwd=/,stdin=none echo shadowed")
	a.Key(keyEnter)
	a.See("RULE: y approve and save this rule")
	a.Key("y")
	r := wantOK(t, <-ch)
	if r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson || r.DecidedBy.Rule != "" {
		t.Fatalf("got %s, want approved by the person, no rule", r.raw)
	}
	a.See("approved once; rule NOT saved: a stricter rule decides this request (" + filepath.Join(d.Dir, "policy") + ":1: ask privileged echo ...)")
	if b, err := os.ReadFile(dropIn(d)); err != nil || string(b) != before {
		t.Fatalf("the drop-in holds %q, %v; want it as it was", b, err)
	}
	// The policy in force is the one before: asked again.
	a.wantAsked(d.ask(map[string]any{"id": "shadow-2", "pipeline": run, "privileged": true}), "shadow-2")

	out := auditShow(t, d)
	for _, want := range []string{"rule_saved", "NOT saved (confirmed by root on pts/", "a stricter rule decides this request"} {
		if !strings.Contains(out, want) {
			t.Errorf("audit show lacks %q:\n%s", want, out)
		}
	}
}

// TestRuleKeysDuringDwellDoNotCount: every step of saving has a dwell.
// The requester types r, Enter and y into the approver's tmux as the
// prompt appears (it may write to a terminal its uid owns); none of them
// counts, no rule is saved, and the request waits for the person.
func TestRuleKeysDuringDwellDoNotCount(t *testing.T) {
	t.Parallel()
	d := ruleDaemon(t)
	// A dwell long enough that every key tapped for tapFor after the
	// prompt is seen lands in it, however loaded the machine (each key is
	// a tmux exec).
	ta := rgtest.StartTmuxApprover(t, d.asock(), 120, 40, "--dwell", "3s")
	ta.Wait("attached to rootgated")
	ch := d.ask(map[string]any{"id": "dwell-rule", "pipeline": [][]string{{"echo", "dwell"}}, "privileged": true})
	ta.Wait("keys are not accepted yet")
	// The clock is read before every key: each is a tmux exec, and all
	// must land inside the dwell.
	// not a wait: keys typed through the whole dwell
	for start := time.Now(); time.Since(start) < tapFor; time.Sleep(20 * time.Millisecond) {
		for _, k := range []string{"r", keyEnter, "y"} {
			if time.Since(start) < tapFor {
				ta.Key(k)
			}
		}
	}
	// Keys count from now on: the request is on screen with its keys,
	// and no rule editor or confirmation opened.
	var rows []string
	waitFor(t, "the prompt to accept keys", 30*time.Second, func() bool {
		rows = ta.Rows()
		return slices.ContainsFunc(rows, func(r string) bool { return strings.Contains(r, "y approve ·") || strings.Contains(r, "RULE") })
	})
	if slices.ContainsFunc(rows, func(r string) bool { return strings.Contains(r, "RULE") }) {
		t.Fatalf("keys typed during the dwell opened the rule editor:\n%s", strings.Join(rows, "\n"))
	}
	pending(t, ch, "keys typed during the dwell")
	if _, err := os.Stat(dropIn(d)); !os.IsNotExist(err) {
		t.Fatalf("a drop-in was written: %v", err)
	}
	ta.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want denied", r.raw)
	}
}

// TestRuleNotOfferedWithoutPolicyFile: a daemon started with --policy ""
// has nowhere to save a rule: its welcome names no rule file, the prompt
// does not offer r (and says why when it is pressed), and a decision that
// carries a rule is refused.
func TestRuleNotOfferedWithoutPolicyFile(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{NoFile: true, Args: []string{"--policy", "", "--prompt-timeout", "60s"}})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	ch := d.ask(map[string]any{"id": "nofile-1", "pipeline": [][]string{{"echo", "nofile"}}})
	a.See("nofile-1")
	a.notAnsweredKey(ch, "r")
	a.See("no rule: this rootgated saves no rules (it has no policy file)")
	a.Key("n")
	if r := <-ch; r.Status != wire.StatusDenied {
		t.Fatalf("got %s, want denied", r.raw)
	}
	if strings.Contains(a.Screen.Text(), "r save a rule") {
		t.Errorf("the prompt offered r:\n%s", a.Screen.Text())
	}
	a.Kill()

	c := dialApprover(t, d)
	c.send(&remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: "raw"})
	if m := c.next(); m.Type != remote.MsgWelcome || m.RuleFile != "" {
		t.Fatalf("got %+v, want a welcome without a rule file", m)
	}
	ch = d.ask(map[string]any{"id": "nofile-2", "pipeline": [][]string{{"echo", "nofile"}}})
	if m := c.approveWithRule("allow privileged,cwd=/,stdin=none echo nofile"); m.Type != remote.MsgError || m.Message != remote.ApproverNoRules {
		t.Fatalf("got %+v, want %q", m, remote.ApproverNoRules)
	}
	pending(t, ch, "a rule for a daemon without a policy file")
}

// TestRuleDropInDirRefused: the drop-in directory must be root's own
// directory, writable by no one else, and not a symlink (whoever may
// write it or point it elsewhere could put rules in place of the one
// confirmed). Then nothing is written, the approver is told, and the
// request it approved runs once.
func TestRuleDropInDirRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		want  string
	}{
		{"symlink", func(t *testing.T, dir string) {
			other := t.TempDir()
			if err := os.Chmod(other, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, dir); err != nil {
				t.Fatal(err)
			}
		}, "not a directory or a symlink"},
		{"not root's", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, 65534, 65534); err != nil {
				t.Fatal(err)
			}
		}, "is owned by uid 65534, not root"},
		{"group-writable", func(t *testing.T, dir string) {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o775); err != nil {
				t.Fatal(err)
			}
		}, "is writable by group or others (mode 0775)"},
		{"parent writable by others", func(t *testing.T, dir string) {
			parent := filepath.Dir(dir)
			fi, err := os.Stat(parent)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(parent, 0o777); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Chmod(parent, fi.Mode().Perm()) })
		}, "is writable by group or others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := ruleDaemon(t)
			// Set up once the daemon has read its policy: the loader
			// refuses such a directory too.
			dir := filepath.Dir(dropIn(d))
			tc.setup(t, dir)
			c := attachRaw(t, d)
			ch := d.ask(map[string]any{"id": "dir-1", "pipeline": [][]string{{"echo", "dir"}}})
			if m := c.approveWithRule("allow privileged,cwd=/,stdin=none echo dir"); m.Type != remote.MsgResult || !strings.HasPrefix(m.Outcome, "approved once; rule NOT saved: policy drop-in directory "+dir) || !strings.Contains(m.Outcome, tc.want) {
				t.Fatalf("got %+v, want the outcome saying %q", m, tc.want)
			}
			if r := wantOK(t, <-ch); r.DecidedBy == nil || r.DecidedBy.Rule != "" {
				t.Fatalf("got %s, want approved once, no rule", r.raw)
			}
			if _, err := os.Lstat(filepath.Join(dir, "approved.policy")); !os.IsNotExist(err) {
				t.Fatalf("a drop-in was written: %v", err)
			}
		})
	}
}

// TestRuleFromTTY: rootgated --tty offers r too, and the operator at its
// terminal is told the outcome. Its test policy is "ask any" in the main
// file, stricter than any allow in a drop-in: the rule is
// taken out again, the request runs once, and the terminal says why.
func TestRuleFromTTY(t *testing.T) {
	t.Parallel()
	td := startTTYDaemon(t, "60s")
	ch := td.ask(map[string]any{"id": "tty-rule", "pipeline": [][]string{{"echo", "tty-rule"}}})
	pos := td.waitScreen(t, 0, "tty-rule")
	pos = td.waitScreen(t, pos, "r save a rule")
	td.key(t, "r")
	pos = td.waitScreen(t, pos, "allow privileged,user=root,cwd=/,stdin=none echo tty-rule")
	pos = td.waitScreen(t, pos, "RULE: edit it")
	td.key(t, keyEnter)
	pos = td.waitScreen(t, pos, filepath.Join(td.Dir, "policy.d", "approved.policy"))
	pos = td.waitScreen(t, pos, "RULE: y approve and save this rule")
	td.key(t, "y")
	if r := wantOK(t, <-ch); r.DecidedBy == nil || r.DecidedBy.By != wire.DecidedByPerson || r.DecidedBy.Rule != "" {
		t.Fatalf("got %s, want approved once by the person", r.raw)
	}
	td.waitScreen(t, pos, "rule not saved")
	td.waitScreen(t, pos, "a stricter rule decides this request")
	if b, err := os.ReadFile(filepath.Join(td.Dir, "policy.d", "approved.policy")); !os.IsNotExist(err) {
		t.Fatalf("the drop-in holds %q, %v; want it gone", b, err)
	}
}

// approveWithRule approves the next prompt on a with rule to save, as a
// client of its own making would (no screen checks it first), and returns
// the daemon's reply.
func (a *rawApprover) approveWithRule(rule string) *remote.Message {
	p := a.prompt()
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Rule: rule})
	return a.next()
}

// wantRunsAnythingRefused approves the next prompt on a with rule, as a
// client that skips the second confirmation would (no rule_runs_anything):
// the daemon must refuse it, and the request stays waiting.
func (a *rawApprover) wantRunsAnythingRefused(ch chan response, rule, what string) {
	a.t.Helper()
	if m := a.approveWithRule(rule); m.Type != remote.MsgError || m.Message != remote.ApproverRuleRunsAnything {
		a.t.Fatalf("got %+v, want %q", m, remote.ApproverRuleRunsAnything)
	}
	pending(a.t, ch, what)
}

// TestRuleNotSavedWhereNoRuleDecides: the approver saves a rule from a
// request no allow rule may decide, a privileged run of the requester's
// own file (TestPolicyAllowNeedsRootsFile). The rule would match and
// never decide: the daemon does not write it and tells the approver why,
// rather than "saved", and the request stays approved once.
func TestRuleNotSavedWhereNoRuleDecides(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rgruleag")
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	tool := filepath.Join(dir, "tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\nid -u\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(tool, int(ag.uid), int(ag.gid)); err != nil {
		t.Fatal(err)
	}
	d := ruleDaemon(t)
	openToAll(t, d)
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	ch := make(chan response, 1)
	go func() {
		r, err := trySendAs(d.Sock, ag.uid, ag.gid, []uint32{ag.gid}, request(map[string]any{"id": "own-file-rule", "pipeline": [][]string{{tool}}}))
		if err != nil {
			r.raw = err.Error()
		}
		ch <- r
	}()
	a.See("own-file-rule")
	a.notAnsweredKey(ch, "r")
	a.See("SAVE A POLICY RULE: edit the rule below")
	a.See("RULE: edit it")
	// A script of sh's: sh runs it with the request's arguments.
	a.secondConfirmation(ch, "is a script run by /bin/sh", "one confirmation of a rule for a script of sh's")
	a.Key("y")
	if r := wantOK(t, <-ch); string(r.Stdout) != "0\n" {
		t.Fatalf("the approved run printed %q, want 0", r.Stdout)
	}
	a.See("approved once; rule NOT saved: no allow rule decides this request: " + tool + " is owned by uid ")
	if b, err := os.ReadFile(dropIn(d)); err == nil && strings.Contains(string(b), tool) {
		t.Fatalf("the drop-in keeps the rule:\n%s", b)
	}
}

// TestRuleFromGroupedPromptSavedOnce: one answer with a rule decides a
// group of identical requests; the rule is written once. Each request of
// the group saved it again (three copies, three comments): the person,
// told of one line, took that out and the others still let the command
// through.
func TestRuleFromGroupedPromptSavedOnce(t *testing.T) {
	t.Parallel()
	d := startDaemon(t, opts{Policy: "# asks about everything\ndeny any rm -rf /\n",
		Args: []string{"--prompt-timeout", "60s", "--max-pending", "8", "--group-within", "3s"}})
	a := dialApprover(t, d)
	a.send(&remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: "raw", Capabilities: []string{remote.CapGroup}})
	if m := a.next(); m.Type != remote.MsgWelcome {
		t.Fatalf("got %+v, want welcome", m)
	}
	same := [][]string{{"echo", "grouped-rule"}}
	var chs []chan response
	for _, id := range []string{"gr-1", "gr-2", "gr-3"} {
		chs = append(chs, d.ask(map[string]any{"id": id, "pipeline": same}))
	}
	for _, id := range []string{"gr-1", "gr-2", "gr-3"} {
		d.waitLog("asking for approval", id)
	}
	p := a.prompt()
	if p.Request == nil || p.Request.Group != 3 {
		t.Fatalf("prompt %+v, want one for the group of 3", p.Request)
	}
	yes := true
	rule := "allow privileged,user=root,cwd=/,stdin=none echo grouped-rule"
	a.send(&remote.Message{Type: remote.MsgDecision, ID: p.ID, Hash: p.Hash, Approve: &yes, Rule: rule})
	for _, ch := range chs {
		wantOK(t, <-ch)
	}
	b, err := os.ReadFile(dropIn(d))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"+rule+"\n"); n != 1 {
		t.Fatalf("%s holds the rule %d times:\n%s", dropIn(d), n, b)
	}
}
