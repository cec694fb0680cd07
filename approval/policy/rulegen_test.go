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
		{"plain", Subject{Privileged: true, User: "alice", Stages: [][]string{{"systemctl", "status", "nginx"}}, Paths: []string{"/usr/bin/systemctl"}},
			`allow privileged,user=alice systemctl status nginx`},
		{"unprivileged path", Subject{User: "bob", Stages: [][]string{{"./x", "a b"}}, Paths: []string{"/home/bob/x"}},
			`allow unprivileged,user=bob /home/bob/x "a b"`},
		{"escapes", Subject{Privileged: true, User: "u", Stages: [][]string{{"find", "{}", "*", "...", "#x", "", `q"`}}, Paths: []string{"/usr/bin/find"}},
			`allow privileged,user=u find \{} \* "..." "#x" "" "q\""`},
		{"env", Subject{Privileged: true, User: "u", Env: map[string]string{"B": "x y", "A": "*"}, Stages: [][]string{{"id"}}, Paths: []string{"/usr/bin/id"}},
			`allow "privileged,user=u,env=A=\\*,env=B=x y" id`},
		{"run as", Subject{Privileged: true, User: "u", RunAs: "postgres", RunGroup: "adm", Stages: [][]string{{"psql", "-l"}}, Paths: []string{"/usr/bin/psql"}},
			`allow privileged,runas=postgres,rungroup=adm,user=u psql -l`},
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
		{"comma", Subject{Env: map[string]string{"A": "x,y"}, Stages: [][]string{{"a"}}}, "comma"},
		{"unclean glob", Subject{Stages: [][]string{{"a", "../*"}}}, "argument 1"},
		{"control", Subject{Stages: [][]string{{"a", "\x1b[2J"}}}, "control"},
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
