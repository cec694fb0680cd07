package approval

import (
	"strings"
	"testing"

	"github.com/rootgate/rootgate/policy"
)

func rulePrompt(argv ...string) *Prompt {
	return &Prompt{Privileged: true, Requester: Requester{UID: 1000, User: "alice"}, Cwd: "/",
		Stages: []Stage{{Argv: argv, Path: "/usr/bin/" + argv[0]}}}
}

func TestSuggestRule(t *testing.T) {
	got, err := SuggestRule(rulePrompt("systemctl", "status", "nginx"))
	if want := "allow privileged,user=alice,cwd=/,stdin=none systemctl status nginx"; err != nil || got != want {
		t.Fatalf("SuggestRule = %q, %v; want %q", got, err, want)
	}
	named := rulePrompt("psql", "-l")
	named.RunAs, named.Named = "postgres", &NamedRun{UID: 108, GID: 115}
	got, err = SuggestRule(named)
	if want := "allow privileged,runas=postgres,user=alice,cwd=/,stdin=none psql -l"; err != nil || got != want {
		t.Fatalf("SuggestRule for a run as postgres = %q, %v; want %q", got, err, want)
	}
	// An account of uid 0 by another name is root to the policy (the
	// daemon gives it no run_as): a rule naming it would never match.
	alias := rulePrompt("id")
	alias.RunAs, alias.Named = "toor", &NamedRun{UID: 0, GID: 0}
	got, err = SuggestRule(alias)
	if want := "allow privileged,user=alice,cwd=/,stdin=none id"; err != nil || got != want {
		t.Fatalf("SuggestRule for a run as toor (uid 0) = %q, %v; want %q", got, err, want)
	}
	if _, err := CheckRule(alias, "allow privileged,runas=toor id"); err == nil {
		t.Error("CheckRule took runas=toor for a uid-0 account, which the policy never matches")
	}
	pipe := rulePrompt("ls")
	pipe.Stages = append(pipe.Stages, Stage{Argv: []string{"wc"}, Path: "/usr/bin/wc"})
	agent := rulePrompt("ssh-add", "-l")
	agent.ForwardAgent = true
	for p, want := range map[*Prompt]string{pipe: "pipeline", agent: "SSH agent"} {
		if got, err := SuggestRule(p); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("SuggestRule = %q, %v; want an error with %q", got, err, want)
		}
	}
}

func TestCheckRule(t *testing.T) {
	p := rulePrompt("sh", "-c", "id")
	for _, tc := range []struct {
		rule      string
		err       string // "" accepts
		runsAnyth bool
	}{
		{`allow privileged,user=alice,cwd=/,stdin=none sh -c id`, "", true},
		{`allow privileged,cwd=/,stdin=none sh -c "id"  # a comment`, "", true},
		{`allow privileged,cwd=/,stdin=none sh -c ...`, "", true},
		{`allow privileged,cwd=/,stdin=none sh -c {a|id}`, "", true},
		{`allow any,cwd=/,stdin=none sh * id`, "", true},
		{`allow privileged,cwd=/,stdin=none sh -c whoami`, "does not match the request shown", false},
		{`allow privileged,user=bob,cwd=/,stdin=none sh -c id`, "does not match the request shown", false},
		{`allow unprivileged,cwd=/,stdin=none sh -c id`, "does not match the request shown", false},
		{`ask privileged sh -c id`, "it says ask", false},
		{`allow privileged`, "must name its command", false},
		{`allow privileged,cwd=/,stdin=none s* -c id`, "must name its command", false},
		{"allow privileged,cwd=/,stdin=none sh -c id\nallow any", "one line", false},
		{"# nothing", "no rule", false},
		{"allow privileged,cwd=/,stdin=none sh -c \u200bid", "control, invisible", false},
	} {
		r, err := CheckRule(p, tc.rule)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%q: %v", tc.rule, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%q: got %v, want an error with %q", tc.rule, err, tc.err)
		case err == nil && (len(RuleRunsAnything(p, r)) > 0) != tc.runsAnyth:
			t.Errorf("%q: RuleRunsAnything = %v, want %v", tc.rule, RuleRunsAnything(p, r), tc.runsAnyth)
		}
	}
	// A rule from the prompt binds the stdin shown: one for sh reading
	// its script there admits that script alone, and one that drops the
	// binding, or the cwd's, is refused.
	in := rulePrompt("sh")
	in.Stdin = []byte("id\n")
	bound, err := SuggestRule(in)
	if err != nil || !strings.Contains(bound, ",stdin=sha256:"+policy.StdinSHA256(in.Stdin)) {
		t.Fatalf("SuggestRule for sh with stdin = %q, %v; want its stdin bound", bound, err)
	}
	if _, err := CheckRule(in, bound); err != nil {
		t.Errorf("sh with stdin, the rule offered: %v", err)
	}
	for _, wider := range []string{"allow privileged,user=alice,cwd=/ sh", "allow privileged,user=alice sh", strings.Replace(bound, ",cwd=/,", ",cwd=/*,", 1)} {
		if _, err := CheckRule(in, wider); err == nil || !strings.Contains(err.Error(), "broader than the request shown") {
			t.Errorf("sh with stdin, %s: %v, want it refused as broader", wider, err)
		}
	}
	// An open rule for find admits -exec, though the request had none.
	f := rulePrompt("find", "/var/log", "-name", "x")
	if r, err := CheckRule(f, "allow privileged,cwd=/,stdin=none find /var/log ..."); err != nil || len(RuleRunsAnything(f, r)) == 0 {
		t.Errorf("find /var/log ...: %v, RuleRunsAnything = %v, want a reason", err, RuleRunsAnything(f, r))
	}
	if r, err := CheckRule(f, "allow privileged,cwd=/,stdin=none find /var/log -name x"); err != nil || len(RuleRunsAnything(f, r)) != 0 {
		t.Errorf("find /var/log -name x: %v, RuleRunsAnything = %v, want none", err, RuleRunsAnything(f, r))
	}
	// So does one for apt-get -o (a hook), though the request had none.
	a := rulePrompt("apt-get", "install", "nginx")
	if r, err := CheckRule(a, "allow privileged,cwd=/,stdin=none apt-get install ..."); err != nil || len(RuleRunsAnything(a, r)) == 0 {
		t.Errorf("apt-get install ...: %v, RuleRunsAnything = %v, want a reason", err, RuleRunsAnything(a, r))
	}
	if r, err := CheckRule(a, "allow privileged,cwd=/,stdin=none apt-get install nginx"); err != nil || len(RuleRunsAnything(a, r)) != 0 {
		t.Errorf("apt-get install nginx: %v, RuleRunsAnything = %v, want none", err, RuleRunsAnything(a, r))
	}
	// An open rule for a command that runs nothing else needs no second
	// confirmation.
	q := rulePrompt("systemctl", "status", "nginx")
	r, err := CheckRule(q, "allow privileged,cwd=/,stdin=none systemctl status ...")
	if err != nil || len(RuleRunsAnything(q, r)) != 0 {
		t.Fatalf("systemctl status ...: %v, %v", err, RuleRunsAnything(q, r))
	}
}
