package policy

import (
	"strings"
	"testing"
)

func TestRuleFor(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    Subject
		want string
	}{
		{"plain", Subject{Privileged: true, User: "alice", Cwd: "/srv", Stages: [][]string{{"systemctl", "status", "nginx"}}, Paths: []string{"/usr/bin/systemctl"}},
			`allow privileged,user=alice,cwd=/srv,stdin=none systemctl status nginx`},
		{"unprivileged path", Subject{User: "bob", Cwd: "/home/bob", StdinSHA256: StdinSHA256([]byte("x")), Stages: [][]string{{"./x", "a b"}}, Paths: []string{"/home/bob/x"}},
			`allow unprivileged,user=bob,cwd=/home/bob,stdin=sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881 /home/bob/x "a b"`},
		{"escapes", Subject{Privileged: true, User: "u", Cwd: "/a b/[x]", Stages: [][]string{{"find", "{}", "*", "...", "#x", "", `q"`}}, Paths: []string{"/usr/bin/find"}},
			`allow "privileged,user=u,cwd=/a b/\\[x],stdin=none" find \{} \* "..." "#x" "" "q\""`},
		{"env", Subject{Privileged: true, User: "u", Cwd: "/", Env: map[string]string{"B": "x y", "A": "*"}, Stages: [][]string{{"id"}}, Paths: []string{"/usr/bin/id"}},
			`allow "privileged,user=u,cwd=/,stdin=none,env=A=\\*,env=B=x y" id`},
		{"run as", Subject{Privileged: true, User: "u", Cwd: "/", RunAs: "postgres", RunGroup: "adm", Stages: [][]string{{"psql", "-l"}}, Paths: []string{"/usr/bin/psql"}},
			`allow privileged,runas=postgres,rungroup=adm,user=u,cwd=/,stdin=none psql -l`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RuleFor(tc.s)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name string
		s    Subject
		want string
	}{
		{"pipeline", Subject{Stages: [][]string{{"a"}, {"b"}}}, "pipeline"},
		{"comma", Subject{Cwd: "/", Env: map[string]string{"A": "x,y"}, Stages: [][]string{{"a"}}}, "comma"},
		{"unclean glob", Subject{Cwd: "/", Stages: [][]string{{"a", "../*"}}}, "argument 1"},
		{"control", Subject{Cwd: "/", Stages: [][]string{{"a", "\x1b[2J"}}}, "control"},
		{"no cwd", Subject{Stages: [][]string{{"a"}}}, "cwd"},
		{"cwd with a comma", Subject{Cwd: "/a,b", Stages: [][]string{{"a"}}}, "comma"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := RuleFor(tc.s)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("RuleFor = %q, %v; want an error with %q", got, err, tc.want)
			}
		})
	}
}

func TestRuleOpen(t *testing.T) {
	for text, want := range map[string]bool{
		`allow privileged sh -c id`:         false,
		`allow privileged sh -c \*`:         false,
		`allow privileged sh -c ...`:        true,
		`allow privileged sh -c "..."`:      false,
		`allow privileged sh -c *`:          true,
		`allow privileged journalctl {int}`: true,
		`allow privileged sh -c i[d]`:       true,
	} {
		r, err := ParseRule(text)
		if err != nil {
			t.Fatal(err)
		}
		if r.Open() != want {
			t.Errorf("%s: Open() = %v, want %v", text, r.Open(), want)
		}
	}
}

// FuzzRuleFor: the rule written for a request parses, matches that
// request, and matches no request that differs in one argument.
func FuzzRuleFor(f *testing.F) {
	f.Add(true, "u", "systemctl", "status", "nginx", "K", "v")
	f.Add(false, "bob", "/bin/x", "{}", `a"b\c`, "PATH", "* x")
	f.Add(true, "r", "sh", "...", "#", "A", "")
	f.Fuzz(func(t *testing.T, priv bool, user, cmd, a1, a2, k, v string) {
		s := Subject{Privileged: priv, User: user, Stages: [][]string{{cmd, a1, a2}}, Paths: []string{"/usr/bin/" + strings.ReplaceAll(cmd, "/", "_")}}
		if k != "" {
			s.Env = map[string]string{k: v}
		}
		text, err := RuleFor(s)
		if err != nil {
			return // no exact rule: nothing is offered
		}
		r, err := ParseRule(text)
		if err != nil {
			t.Fatalf("RuleFor gave %q, which does not parse: %v", text, err)
		}
		if r.Action != ActionAllow || r.Open() || !r.NamesCommand() {
			t.Fatalf("%q: not an exact allow rule", text)
		}
		if why := r.WhyNot(s); why != "" {
			t.Fatalf("%q does not match its request: %s", text, why)
		}
		other := s
		other.Stages = [][]string{{cmd, a1, a2 + "x"}}
		if r.WhyNot(other) == "" {
			t.Fatalf("%q matches a request with another argument", text)
		}
		other = s
		other.Privileged = !priv
		if r.WhyNot(other) == "" {
			t.Fatalf("%q matches the request with privileged=%v", text, !priv)
		}
		other = s
		other.User = user + "x"
		if r.WhyNot(other) == "" {
			t.Fatalf("%q matches another user", text)
		}
		if k != "" {
			other = s
			other.Env = map[string]string{k: v + "x"}
			if r.WhyNot(other) == "" {
				t.Fatalf("%q matches another env value", text)
			}
		}
	})
}

// TestCwdStdinQualifiers: cwd= and stdin= admit only the directory and
// the input they name, and a rule from the prompt must name the ones shown.
func TestCwdStdinQualifiers(t *testing.T) {
	script := StdinSHA256([]byte("echo one\n"))
	p := mustParse(t, "allow privileged,cwd=/srv/app,stdin=none make\nallow privileged,cwd=/srv/*,stdin=sha256:"+script+" sh\n")
	for _, tc := range []struct {
		cwd, stdin string
		argv       string
		want       Action
	}{
		{"/srv/app", "", "make", ActionAllow},
		{"/srv/other", "", "make", ActionAsk},
		{"/srv/app", script, "make", ActionAsk},
		{"/srv/app", script, "sh", ActionAllow},
		{"/srv/b", script, "sh", ActionAllow},
		{"/srv/b/..", script, "sh", ActionAsk},
		{"/srv/app", StdinSHA256([]byte("id\n")), "sh", ActionAsk},
		{"/srv/app", "", "sh", ActionAsk},
		{"/tmp", script, "sh", ActionAsk},
	} {
		if m := p.Evaluate(Subject{Privileged: true, Cwd: tc.cwd, StdinSHA256: tc.stdin, Stages: stages(tc.argv)}); m.Action != tc.want {
			t.Errorf("%s in %s, stdin %.8s: %v, want %v", tc.argv, tc.cwd, tc.stdin, m.Action, tc.want)
		}
	}
	for _, bad := range []string{"allow any,stdin=x ls", "allow any,stdin=sha256:00 ls", "allow any,stdin=none,stdin=none ls", "allow any,cwd=,ls", "allow any,cwd=[ ls"} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	shown := Subject{Privileged: true, User: "u", Cwd: "/srv/app", StdinSHA256: script, Stages: stages("sh")}
	for rule, want := range map[string]string{
		"allow privileged,user=u,cwd=/srv/app,stdin=sha256:" + script + " sh": "",
		"allow privileged,user=u,stdin=sha256:" + script + " sh":              "no cwd=",
		"allow privileged,user=u,cwd=/srv/*,stdin=sha256:" + script + " sh":   "another directory",
		"allow privileged,user=u,cwd=/srv/app sh":                             "no stdin=",
		"allow privileged,user=u,cwd=/srv/app,stdin=none sh":                  "other input",
	} {
		r, err := ParseRule(rule)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.BroaderThanShown(shown); want == "" && got != "" || want != "" && !strings.Contains(got, want) {
			t.Errorf("%s: BroaderThanShown = %q, want %q", rule, got, want)
		}
	}
}
