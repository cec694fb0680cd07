package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/rootgate/rootgate/wire"
)

// examplePolicy is the example of the design (policy.md), which
// docs/policy.md repeats.
const examplePolicy = `deny   any            rm -rf /
deny   any            mkfs* ...
allow  unprivileged   ls ...
allow  privileged     systemctl status [a-z0-9]*
allow  privileged     journalctl -u [a-z0-9]* -n [0-9]*
allow  privileged,env=LANG   apt-get update
`

func mustParse(t testing.TB, text string) *Policy {
	t.Helper()
	p, err := Parse("test", strings.NewReader(text))
	if err != nil {
		t.Fatalf("Parse(%q): %v", text, err)
	}
	return p
}

func TestActionString(t *testing.T) {
	for a, want := range map[Action]string{
		ActionAsk:   "ask",
		ActionAllow: "allow",
		ActionDeny:  "deny",
		Action(7):   "Action(7)",
	} {
		if got := a.String(); got != want {
			t.Errorf("Action(%d).String() = %q, want %q", int(a), got, want)
		}
	}
	var zero Action
	if zero != ActionAsk {
		t.Errorf("zero Action is %v, want ask", zero)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	tests := []struct {
		name    string
		text    string
		want    string
		badGlob bool // the error must unwrap to path.ErrBadPattern
	}{
		{name: "unknown action", text: "alow any ls\n", want: `policy test:1: unknown action "alow"`},
		{name: "action is case sensitive", text: "Allow any\n", want: `policy test:1: unknown action "Allow"`},
		{name: "quoted unknown action", text: `"allow it" any`, want: `policy test:1: unknown action "allow it"`},
		{name: "missing scope", text: "allow\n", want: `policy test:1: missing scope`},
		{name: "missing scope before comment", text: "deny   # all of it\n", want: `policy test:1: missing scope`},
		{name: "empty quoted scope", text: `allow ""`, want: `policy test:1: missing scope`},
		{name: "unknown scope", text: "allow everyone ls\n", want: `policy test:1: unknown scope "everyone"`},
		{name: "qualifier without scope word", text: "allow user=alice ls\n", want: `policy test:1: unknown scope "user=alice"`},
		{name: "scope is case sensitive", text: "allow Any\n", want: `policy test:1: unknown scope "Any"`},
		{name: "missing scope before qualifiers", text: "allow ,user=alice\n", want: `policy test:1: missing scope before qualifiers`},
		{name: "trailing comma", text: "allow any,\n", want: `policy test:1: empty qualifier in "any,"`},
		{name: "double comma", text: "allow any,,user=a\n", want: `policy test:1: empty qualifier in "any,,user=a"`},
		{name: "qualifier without equals", text: "allow any,alice\n", want: `policy test:1: malformed qualifier "alice": want user=GLOB, session=GLOB, host=GLOB, runas=GLOB, rungroup=GLOB, cwd=GLOB, stdin=none|sha256:HEX, env=KEY[=VALUE], memory=SIZE or tasks=N`},
		{name: "two scopes", text: "allow any,privileged\n", want: `policy test:1: malformed qualifier "privileged": want user=GLOB, session=GLOB, host=GLOB, runas=GLOB, rungroup=GLOB, cwd=GLOB, stdin=none|sha256:HEX, env=KEY[=VALUE], memory=SIZE or tasks=N`},
		{name: "unknown qualifier", text: "allow any,group=wheel\n", want: `policy test:1: unknown qualifier "group": want user, session, host, runas, rungroup, cwd, stdin, env, memory or tasks`},
		{name: "empty qualifier name", text: "allow any,=x\n", want: `policy test:1: unknown qualifier "": want user, session, host, runas, rungroup, cwd, stdin, env, memory or tasks`},
		{name: "empty env", text: "allow any,env=\n", want: `policy test:1: empty value for qualifier "env"`},
		{name: "empty env key", text: "allow any,env==C\n", want: `policy test:1: empty key in qualifier "env==C"`},
		{name: "bad env key glob", text: "allow any,env=[\n", want: `policy test:1: bad glob "[" for qualifier "env": syntax error in pattern`, badGlob: true},
		{name: "bad env value glob", text: "allow any,env=LANG=[\n", want: `policy test:1: bad glob "[" for qualifier "env": syntax error in pattern`, badGlob: true},
		{name: "env on a deny rule", text: "deny any,env=LANG rm\n", want: `policy test:1: qualifier "env" is only for allow rules: deny rules match whatever the env`},
		{name: "env on an ask rule", text: "ask any,env=LANG\n", want: `policy test:1: qualifier "env" is only for allow rules: ask rules match whatever the env`},
		{name: "bad memory", text: "allow any,memory=lots apt-get\n", want: `policy test:1: bad value "lots" for qualifier "memory": want a positive size in bytes, or with K, M or G`},
		{name: "zero memory", text: "allow any,memory=0 apt-get\n", want: `policy test:1: bad value "0" for qualifier "memory": want a positive size in bytes, or with K, M or G`},
		{name: "bad tasks", text: "allow any,tasks=1K apt-get\n", want: `policy test:1: bad value "1K" for qualifier "tasks": want a positive number`},
		{name: "duplicate tasks", text: "allow any,tasks=1,tasks=2\n", want: `policy test:1: duplicate qualifier "tasks"`},
		{name: "memory on a deny rule", text: "deny any,memory=1M rm\n", want: `policy test:1: qualifiers "memory" and "tasks" are only for allow rules: they limit the run a rule allows`},
		{name: "tasks on an ask rule", text: "ask any,tasks=5\n", want: `policy test:1: qualifiers "memory" and "tasks" are only for allow rules: they limit the run a rule allows`},
		{name: "empty user", text: "allow any,user=\n", want: `policy test:1: empty value for qualifier "user"`},
		{name: "empty quoted session", text: `allow any,session="" ls`, want: `policy test:1: empty value for qualifier "session"`},
		{name: "duplicate qualifier", text: "allow any,user=a,host=h,user=b\n", want: `policy test:1: duplicate qualifier "user"`},
		{name: "bad host glob", text: "allow any,host=[web\n", want: `policy test:1: bad glob "[web" for qualifier "host": syntax error in pattern`, badGlob: true},
		{name: "bad user glob after a good one", text: "allow any,host=web*,user=a\\\n", want: `policy test:1: bad glob "a\\" for qualifier "user": syntax error in pattern`, badGlob: true},
		{name: "bad pattern glob", text: "deny any rm [\n", want: `policy test:1: bad glob "[": syntax error in pattern`, badGlob: true},
		{name: "bad first word glob", text: "deny any [a- ...\n", want: `policy test:1: bad glob "[a-": syntax error in pattern`, badGlob: true},
		{name: "empty class", text: "deny any x[]\n", want: `policy test:1: bad glob "x[]": syntax error in pattern`, badGlob: true},
		{name: "trailing backslash glob", text: `deny any echo a\`, want: `policy test:1: bad glob "a\\": syntax error in pattern`, badGlob: true},
		{name: "bad glob inside quotes", text: `deny any echo "a b["`, want: `policy test:1: bad glob "a b[": syntax error in pattern`, badGlob: true},
		{name: "rest not last", text: "allow any ls ... -l\n", want: `policy test:1: "..." is allowed only as the last pattern`},
		{name: "rest twice", text: "allow any ls ... ...\n", want: `policy test:1: "..." is allowed only as the last pattern`},
		{name: "rest first then more", text: "allow any ... ls\n", want: `policy test:1: "..." is allowed only as the last pattern`},
		{name: "unterminated quote", text: "allow any echo \"a b\n", want: `policy test:1: unterminated quote`},
		{name: "unterminated quote in scope", text: "allow \"any\n", want: `policy test:1: unterminated quote`},
		{name: "unterminated after escaped quote", text: `allow any echo "a\"`, want: `policy test:1: unterminated quote`},
		{name: "backslash at end inside quotes", text: `allow any echo "a\`, want: `policy test:1: unterminated quote`},
		{name: "comment sign does not close a quote", text: `allow any echo "# x`, want: `policy test:1: unterminated quote`},
		{name: "unknown escape", text: `allow any printf "a\n"`, want: `policy test:1: backslash before 'n' inside quotes: only \" and \\ are escapes`},
		{name: "escaped star inside quotes", text: `allow any echo "\*"`, want: `policy test:1: backslash before '*' inside quotes: only \" and \\ are escapes`},
		{name: "escaped tab inside quotes", text: "allow any echo \"\\\t\"", want: `policy test:1: backslash before '\t' inside quotes: only \" and \\ are escapes`},
		{name: "escaped non-ASCII inside quotes", text: `allow any echo "\é"`, want: `policy test:1: backslash before 'é' inside quotes: only \" and \\ are escapes`},
		{name: "line number counts blank and comment lines", text: "# rules\n\nallow any ls\n\t\ndeny any rm [\n", want: `policy test:5: bad glob "[": syntax error in pattern`, badGlob: true},
		{name: "CRLF line endings", text: "allow any ls\r\nalow any\r\n", want: `policy test:2: unknown action "alow"`},
		{name: "first error wins", text: "allow any\nalow any\nallow nobody\n", want: `policy test:2: unknown action "alow"`},
		{name: "last line without newline", text: "allow any\nask", want: `policy test:2: missing scope`},
		{name: "runas on any", text: "allow any,runas=postgres psql\n", want: `policy test:1: qualifier "runas" needs scope privileged: only a privileged request names an account to run as`},
		{name: "rungroup unprivileged", text: "allow unprivileged,rungroup=staff ls\n", want: `policy test:1: qualifier "rungroup" needs scope privileged: only a privileged request names an account to run as`},
		{name: "runas as scope", text: "allow runas=postgres psql ...\n", want: `policy test:1: unknown scope "runas=postgres": write privileged,runas=postgres`},
		{name: "runas twice", text: "allow privileged,runas=a,runas=b ls\n", want: `policy test:1: duplicate qualifier "runas"`},
		{name: "runas empty", text: "allow privileged,runas= ls\n", want: `policy test:1: empty value for qualifier "runas"`},
		{name: "runas bad glob", text: "allow privileged,runas=[ ls\n", want: `policy test:1: bad glob "[" for qualifier "runas": syntax error in pattern`, badGlob: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("test", strings.NewReader(tt.text))
			if err == nil {
				t.Fatalf("Parse(%q) = %d rules, want error %q", tt.text, len(p.Rules), tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Parse(%q) error:\n got %s\nwant %s", tt.text, got, tt.want)
			}
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is %T, want *ParseError", err, err)
			}
			if pe.Name != "test" {
				t.Errorf("ParseError.Name = %q, want %q", pe.Name, "test")
			}
			if got := errors.Is(err, path.ErrBadPattern); got != tt.badGlob {
				t.Errorf("errors.Is(err, path.ErrBadPattern) = %v, want %v", got, tt.badGlob)
			}
		})
	}
}

func TestParsePolicyReadError(t *testing.T) {
	boom := errors.New("boom")
	_, err := Parse("test", iotest.ErrReader(boom))
	if err == nil || err.Error() != "policy test: boom" || !errors.Is(err, boom) {
		t.Errorf("Parse(failing reader) error = %v, want %q wrapping boom", err, "policy test: boom")
	}
}

func TestParsePolicyRules(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []Rule
	}{
		{name: "empty file", text: "", want: nil},
		{name: "blank and comment lines", text: "\n   \n\t\n# allow any\n  # deny any\n\r\n", want: nil},
		{name: "no patterns", text: "allow any", want: []Rule{
			{Line: 1, Text: "allow any", Action: ActionAllow, scope: scopeAny},
		}},
		{name: "each action and scope", text: "allow privileged\ndeny unprivileged\nask any\n", want: []Rule{
			{Line: 1, Text: "allow privileged", Action: ActionAllow, scope: scopePrivileged},
			{Line: 2, Text: "deny unprivileged", Action: ActionDeny, scope: scopeUnprivileged},
			{Line: 3, Text: "ask any", Action: ActionAsk, scope: scopeAny},
		}},
		{name: "text keeps inner spacing, drops comment and edges", text: "\n  deny \t any   rm -rf /   # never\n", want: []Rule{
			{Line: 2, Text: "deny \t any   rm -rf /", Action: ActionDeny, scope: scopeAny, words: []string{"rm", "-rf", "/"}},
		}},
		{name: "comment right after a word needs a blank", text: "allow any ls#x #y", want: []Rule{
			{Line: 1, Text: "allow any ls#x", Action: ActionAllow, scope: scopeAny, words: []string{"ls#x"}},
		}},
		{name: "qualifiers", text: "ask unprivileged,user=alice,session=ci-*,host=web[0-9] make ...", want: []Rule{
			{Line: 1, Text: "ask unprivileged,user=alice,session=ci-*,host=web[0-9] make ...", Action: ActionAsk, scope: scopeUnprivileged,
				user: "alice", session: "ci-*", host: "web[0-9]", words: []string{"make"}, rest: true},
		}},
		{name: "qualifier value holding equals sign", text: "allow any,session=a=b", want: []Rule{
			{Line: 1, Text: "allow any,session=a=b", Action: ActionAllow, scope: scopeAny, session: "a=b"},
		}},
		{name: "quoted qualifier value", text: `allow any,session="my laptop"`, want: []Rule{
			{Line: 1, Text: `allow any,session="my laptop"`, Action: ActionAllow, scope: scopeAny, session: "my laptop"},
		}},
		{name: "quoting", text: `allow any echo "a b" "say \"hi\"" "back\\slash" "#no-comment" ""`, want: []Rule{
			{Line: 1, Text: `allow any echo "a b" "say \"hi\"" "back\\slash" "#no-comment" ""`, Action: ActionAllow, scope: scopeAny,
				words: []string{"echo", "a b", `say "hi"`, `back\slash`, "#no-comment", ""}},
		}},
		{name: "quotes inside a word", text: `allow any printf --format="%s %s"x`, want: []Rule{
			{Line: 1, Text: `allow any printf --format="%s %s"x`, Action: ActionAllow, scope: scopeAny, words: []string{"printf", "--format=%s %sx"}},
		}},
		{name: "backslash outside quotes is kept for the glob", text: `allow any echo \* a\\b`, want: []Rule{
			{Line: 1, Text: `allow any echo \* a\\b`, Action: ActionAllow, scope: scopeAny, words: []string{"echo", `\*`, `a\\b`}},
		}},
		{name: "quoted action and scope", text: `"deny" "any" rm`, want: []Rule{
			{Line: 1, Text: `"deny" "any" rm`, Action: ActionDeny, scope: scopeAny, words: []string{"rm"}},
		}},
		{name: "rest", text: "allow any ls ...", want: []Rule{
			{Line: 1, Text: "allow any ls ...", Action: ActionAllow, scope: scopeAny, words: []string{"ls"}, rest: true},
		}},
		{name: "rest alone", text: "allow any ...", want: []Rule{
			{Line: 1, Text: "allow any ...", Action: ActionAllow, scope: scopeAny, rest: true},
		}},
		{name: "quoted dots are a literal", text: `allow any echo "..." ..."" ....`, want: []Rule{
			{Line: 1, Text: `allow any echo "..." ..."" ....`, Action: ActionAllow, scope: scopeAny, words: []string{"echo", "...", "...", "...."}},
		}},
		{name: "quoted dots may come before rest", text: `allow any echo "..." ...`, want: []Rule{
			{Line: 1, Text: `allow any echo "..." ...`, Action: ActionAllow, scope: scopeAny, words: []string{"echo", "..."}, rest: true},
		}},
		{name: "carriage return is a blank outside quotes", text: "allow any\ra\rb \r \"c\rd\"\r\r", want: []Rule{
			{Line: 1, Text: "allow any\ra\rb \r \"c\rd\"", Action: ActionAllow, scope: scopeAny, words: []string{"a", "b", "c\rd"}},
		}},
		{name: "CRLF", text: "allow any ls\r\ndeny any rm ...\r\n", want: []Rule{
			{Line: 1, Text: "allow any ls", Action: ActionAllow, scope: scopeAny, words: []string{"ls"}},
			{Line: 2, Text: "deny any rm ...", Action: ActionDeny, scope: scopeAny, words: []string{"rm"}, rest: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.text)
			for i := range tt.want {
				tt.want[i].File = "test"
			}
			if !reflect.DeepEqual(p.Rules, tt.want) {
				t.Errorf("Parse(%q) rules:\n got %#v\nwant %#v", tt.text, p.Rules, tt.want)
			}
			if p.Name() != "test" {
				t.Errorf("Name() = %q, want %q", p.Name(), "test")
			}
		})
	}
}

// stages builds Subject.Stages from space-separated commands.
func stages(cmds ...string) [][]string {
	var s [][]string
	for _, c := range cmds {
		s = append(s, strings.Fields(c))
	}
	return s
}

func TestEvaluate(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		s      Subject
		want   Action
		line   int // of Match.Rule; 0 for nil
	}{
		// Globs.
		{name: "question mark", policy: "allow any l?", s: Subject{Stages: stages("ls")}, want: ActionAllow, line: 1},
		{name: "question mark needs one char", policy: "allow any l?", s: Subject{Stages: stages("l")}, want: ActionAsk},
		{name: "class", policy: "allow any [a-c]at", s: Subject{Stages: stages("cat")}, want: ActionAllow, line: 1},
		{name: "negated class", policy: "allow any [^a-c]at", s: Subject{Stages: stages("cat")}, want: ActionAsk},
		{name: "star in an argument", policy: "allow any journalctl -u *.service", s: Subject{Stages: stages("journalctl -u nginx.service")}, want: ActionAllow, line: 1},
		{name: "star does not cross slash", policy: "allow any cat /var/log/*", s: Subject{Stages: stages("cat /var/log/nginx/access.log")}, want: ActionAsk},
		{name: "star matches bare name", policy: "allow any * ...", s: Subject{Stages: stages("ls -l"), Paths: []string{"/usr/bin/ls"}}, want: ActionAllow, line: 1},
		{name: "star misses written path", policy: "allow any * ...", s: Subject{Stages: stages("/usr/bin/ls -l"), Paths: []string{"/usr/bin/ls"}}, want: ActionAsk},
		// Globs and "." or ".." components.
		{name: "star misses dot-dot", policy: "allow any chown svc /srv/pub/*", s: Subject{Stages: stages("chown svc /srv/pub/..")}, want: ActionAsk},
		{name: "star misses dot", policy: "allow any chown svc /srv/pub/*", s: Subject{Stages: stages("chown svc /srv/pub/.")}, want: ActionAsk},
		{name: "star matches a clean path", policy: "allow any chown svc /srv/pub/*", s: Subject{Stages: stages("chown svc /srv/pub/file")}, want: ActionAllow, line: 1},
		{name: "star matches a dotted name", policy: "allow any chown svc /srv/pub/*", s: Subject{Stages: stages("chown svc /srv/pub/.profile")}, want: ActionAllow, line: 1},
		{name: "class misses a double slash", policy: "allow any chown svc /srv/pub/[^x]*", s: Subject{Stages: stages("chown svc /srv/pub//etc")}, want: ActionAsk},
		{name: "middle star misses dot-dot", policy: "allow any cat /srv/*/log", s: Subject{Stages: stages("cat /srv/../log")}, want: ActionAsk},
		{name: "bare star misses dot-dot", policy: "allow any chown svc *", s: Subject{Stages: stages("chown svc ..")}, want: ActionAsk},
		{name: "glob misses relative climb", policy: "allow any cat *", s: Subject{Stages: stages("cat ../x")}, want: ActionAsk},
		{name: "literal dot-dot matches itself", policy: "allow any ls ..", s: Subject{Stages: stages("ls ..")}, want: ActionAllow, line: 1},
		{name: "rest admits dot-dot", policy: "allow any ls ...", s: Subject{Stages: stages("ls ..")}, want: ActionAllow, line: 1},
		// Env.
		{name: "allow without env= admits no env", policy: "allow any apt-get update", s: Subject{Stages: stages("apt-get update"), Env: map[string]string{"LANG": "C"}}, want: ActionAsk},
		{name: "allow without env= and no env", policy: "allow any apt-get update", s: Subject{Stages: stages("apt-get update"), Env: map[string]string{}}, want: ActionAllow, line: 1},
		{name: "env=KEY admits any value", policy: "allow any,env=LANG apt-get update", s: Subject{Stages: stages("apt-get update"), Env: map[string]string{"LANG": "de_DE.UTF-8"}}, want: ActionAllow, line: 1},
		{name: "env=KEY needs every key", policy: "allow any,env=LANG apt-get update", s: Subject{Stages: stages("apt-get update"), Env: map[string]string{"LANG": "C", "TZ": "UTC"}}, want: ActionAsk},
		{name: "env repeated", policy: "allow any,env=LANG,env=TZ apt-get update", s: Subject{Stages: stages("apt-get update"), Env: map[string]string{"LANG": "C", "TZ": "UTC"}}, want: ActionAllow, line: 1},
		{name: "env key glob", policy: "allow any,env=LC_* ls", s: Subject{Stages: stages("ls"), Env: map[string]string{"LC_ALL": "C", "LC_TIME": "C"}}, want: ActionAllow, line: 1},
		{name: "env value", policy: "allow any,env=DEBIAN_FRONTEND=noninteractive apt-get update", s: Subject{Stages: stages("apt-get update"), Env: map[string]string{"DEBIAN_FRONTEND": "noninteractive"}}, want: ActionAllow, line: 1},
		{name: "env other value", policy: "allow any,env=DEBIAN_FRONTEND=noninteractive apt-get update", s: Subject{Stages: stages("apt-get update"), Env: map[string]string{"DEBIAN_FRONTEND": "readline"}}, want: ActionAsk},
		{name: "env falls through to the next rule", policy: "allow any apt-get update\nallow any,env=* apt-get update", s: Subject{Stages: stages("apt-get update"), Env: map[string]string{"TZ": "UTC"}}, want: ActionAllow, line: 2},
		{name: "deny whatever the env", policy: "deny any rm ...", s: Subject{Stages: stages("rm x"), Env: map[string]string{"LANG": "C"}}, want: ActionDeny, line: 1},
		{name: "env checked for every stage", policy: "allow any,env=LANG ls\nallow any cat", s: Subject{Stages: stages("ls", "cat"), Env: map[string]string{"LANG": "C"}}, want: ActionAsk},
		{name: "escaped star is literal", policy: `allow any echo \*`, s: Subject{Stages: stages("echo x")}, want: ActionAsk},
		// Run-as accounts and groups.
		{name: "runas admits its account", policy: "allow privileged,runas=postgres psql ...", s: Subject{Privileged: true, RunAs: "postgres", Stages: stages("psql -l")}, want: ActionAllow, line: 1},
		{name: "runas admits no other account", policy: "allow privileged,runas=postgres psql ...", s: Subject{Privileged: true, RunAs: "www-data", Stages: stages("psql -l")}, want: ActionAsk},
		{name: "runas admits not root", policy: "allow privileged,runas=postgres psql ...", s: Subject{Privileged: true, Stages: stages("psql -l")}, want: ActionAsk},
		{name: "runas=root is root", policy: "allow privileged,runas=root psql ...", s: Subject{Privileged: true, Stages: stages("psql -l")}, want: ActionAllow, line: 1},
		{name: "runas glob", policy: "allow privileged,runas=pg* psql ...", s: Subject{Privileged: true, RunAs: "pgadmin", Stages: stages("psql -l")}, want: ActionAllow, line: 1},
		{name: "allow without runas admits no account", policy: "allow privileged psql ...", s: Subject{Privileged: true, RunAs: "postgres", Stages: stages("psql -l")}, want: ActionAsk},
		{name: "allow any without runas admits no account", policy: "allow any psql ...", s: Subject{Privileged: true, RunAs: "postgres", Stages: stages("psql -l")}, want: ActionAsk},
		{name: "allow without runas admits root", policy: "allow privileged psql ...", s: Subject{Privileged: true, RunAs: "root", Stages: stages("psql -l")}, want: ActionAllow, line: 1},
		{name: "deny without runas denies every account", policy: "deny any dropdb ...", s: Subject{Privileged: true, RunAs: "postgres", Stages: stages("dropdb x")}, want: ActionDeny, line: 1},
		{name: "deny with runas denies only its account", policy: "deny privileged,runas=postgres dropdb ...", s: Subject{Privileged: true, Stages: stages("dropdb x")}, want: ActionAsk},
		{name: "allow without rungroup admits no group", policy: "allow privileged,runas=postgres psql ...", s: Subject{Privileged: true, RunAs: "postgres", RunGroup: "staff", Stages: stages("psql")}, want: ActionAsk},
		{name: "rungroup admits its group", policy: "allow privileged,runas=postgres,rungroup=staff psql ...", s: Subject{Privileged: true, RunAs: "postgres", RunGroup: "staff", Stages: stages("psql")}, want: ActionAllow, line: 1},
		{name: "rungroup needs a group", policy: "allow privileged,runas=postgres,rungroup=staff psql ...", s: Subject{Privileged: true, RunAs: "postgres", Stages: stages("psql")}, want: ActionAsk},
		{name: "rungroup with root", policy: "allow privileged,rungroup=adm tail ...", s: Subject{Privileged: true, RunGroup: "adm", Stages: stages("tail x")}, want: ActionAllow, line: 1},
		{name: "escaped star matches star", policy: `allow any echo \*`, s: Subject{Stages: stages("echo *")}, want: ActionAllow, line: 1},
		{name: "quotes do not stop globbing", policy: `allow any echo "*"`, s: Subject{Stages: stages("echo x")}, want: ActionAllow, line: 1},
		// Arity and "...".
		{name: "rest with zero args", policy: "allow any ls ...", s: Subject{Stages: stages("ls")}, want: ActionAllow, line: 1},
		{name: "rest with more args", policy: "allow any ls ...", s: Subject{Stages: stages("ls -l -a /")}, want: ActionAllow, line: 1},
		{name: "rest still checks earlier words", policy: "allow any systemctl status ...", s: Subject{Stages: stages("systemctl restart nginx")}, want: ActionAsk},
		{name: "rest needs the fixed words", policy: "allow any systemctl status ...", s: Subject{Stages: stages("systemctl")}, want: ActionAsk},
		{name: "rest alone matches anything", policy: "allow any ...", s: Subject{Stages: stages("rm -rf /")}, want: ActionAllow, line: 1},
		{name: "exact arity", policy: "allow any apt-get update", s: Subject{Stages: stages("apt-get update")}, want: ActionAllow, line: 1},
		{name: "exact arity, one more", policy: "allow any apt-get update", s: Subject{Stages: stages("apt-get update -y")}, want: ActionAsk},
		{name: "exact arity, one fewer", policy: "allow any apt-get update", s: Subject{Stages: stages("apt-get")}, want: ActionAsk},
		{name: "quoted dots, literal", policy: `allow any echo "..."`, s: Subject{Stages: [][]string{{"echo", "..."}}}, want: ActionAllow, line: 1},
		{name: "quoted dots, not rest (zero)", policy: `allow any echo "..."`, s: Subject{Stages: stages("echo")}, want: ActionAsk},
		{name: "quoted dots, not rest (other)", policy: `allow any echo "..."`, s: Subject{Stages: stages("echo hi")}, want: ActionAsk},
		{name: "no patterns and empty argv", policy: "allow any", s: Subject{Stages: [][]string{{}}}, want: ActionAllow, line: 1},
		{name: "patterns and empty argv", policy: "allow any ls ...", s: Subject{Stages: [][]string{{}}}, want: ActionAsk},
		// Quoting.
		{name: "quoted space", policy: `allow any echo "a b"`, s: Subject{Stages: [][]string{{"echo", "a b"}}}, want: ActionAllow, line: 1},
		{name: "quoted space is one word", policy: `allow any echo "a b"`, s: Subject{Stages: stages("echo a b")}, want: ActionAsk},
		{name: "escaped quote", policy: `allow any echo "say \"hi\""`, s: Subject{Stages: [][]string{{"echo", `say "hi"`}}}, want: ActionAllow, line: 1},
		{name: "escaped backslash then glob escape", policy: `allow any echo "a\\b"`, s: Subject{Stages: [][]string{{"echo", "ab"}}}, want: ActionAllow, line: 1},
		{name: "literal backslash, quoted", policy: `allow any echo "a\\\\b"`, s: Subject{Stages: [][]string{{"echo", `a\b`}}}, want: ActionAllow, line: 1},
		{name: "literal backslash, unquoted", policy: `allow any echo a\\b`, s: Subject{Stages: [][]string{{"echo", `a\b`}}}, want: ActionAllow, line: 1},
		{name: "empty word", policy: `allow any echo ""`, s: Subject{Stages: [][]string{{"echo", ""}}}, want: ActionAllow, line: 1},
		{name: "hash inside quotes", policy: `allow any echo "#x"`, s: Subject{Stages: stages("echo #x")}, want: ActionAllow, line: 1},
		// Qualifiers.
		{name: "user glob", policy: "allow any,user=a*", s: Subject{User: "alice", Stages: stages("id")}, want: ActionAllow, line: 1},
		{name: "user glob misses", policy: "allow any,user=a*", s: Subject{User: "bob", Stages: stages("id")}, want: ActionAsk},
		{name: "session glob", policy: "allow any,session=ci-*", s: Subject{Session: "ci-42", Stages: stages("id")}, want: ActionAllow, line: 1},
		{name: "session glob misses", policy: "allow any,session=ci-*", s: Subject{Session: "laptop", Stages: stages("id")}, want: ActionAsk},
		{name: "session star matches none given", policy: "allow any,session=*", s: Subject{Stages: stages("id")}, want: ActionAllow, line: 1},
		{name: "host glob", policy: "allow any,host=web[0-9]", s: Subject{Host: "web3", Stages: stages("id")}, want: ActionAllow, line: 1},
		{name: "host glob misses", policy: "allow any,host=web[0-9]", s: Subject{Host: "web10", Stages: stages("id")}, want: ActionAsk},
		{name: "every qualifier must match", policy: "allow any,user=alice,host=web*", s: Subject{User: "alice", Host: "db1", Stages: stages("id")}, want: ActionAsk},
		{name: "all qualifiers match", policy: "allow any,user=alice,host=web*", s: Subject{User: "alice", Host: "web1", Stages: stages("id")}, want: ActionAllow, line: 1},
		// Scope.
		{name: "privileged scope, privileged", policy: "allow privileged", s: Subject{Privileged: true, Stages: stages("id")}, want: ActionAllow, line: 1},
		{name: "privileged scope, unprivileged", policy: "allow privileged", s: Subject{Stages: stages("id")}, want: ActionAsk},
		{name: "unprivileged scope, unprivileged", policy: "allow unprivileged", s: Subject{Stages: stages("id")}, want: ActionAllow, line: 1},
		{name: "unprivileged scope, privileged", policy: "allow unprivileged", s: Subject{Privileged: true, Stages: stages("id")}, want: ActionAsk},
		{name: "any scope, privileged", policy: "deny any", s: Subject{Privileged: true, Stages: stages("id")}, want: ActionDeny, line: 1},
		{name: "any scope, unprivileged", policy: "deny any", s: Subject{Stages: stages("id")}, want: ActionDeny, line: 1},
		// The strictest match per stage, whatever the order.
		{name: "deny first beats allow", policy: "deny any ls -l\nallow any ls ...", s: Subject{Stages: stages("ls -l")}, want: ActionDeny, line: 1},
		{name: "later deny beats allow", policy: "allow any ls ...\ndeny any ls -l", s: Subject{Stages: stages("ls -l")}, want: ActionDeny, line: 2},
		{name: "later ask beats allow", policy: "allow any ls ...\nask any ls -l", s: Subject{Stages: stages("ls -l")}, want: ActionAsk, line: 2},
		{name: "later deny beats ask", policy: "ask any ls ...\ndeny any ls -l", s: Subject{Stages: stages("ls -l")}, want: ActionDeny, line: 2},
		{name: "first of two allows reported", policy: "allow any ls ...\nallow any ls -l", s: Subject{Stages: stages("ls -l")}, want: ActionAllow, line: 1},
		{name: "later rule when earlier misses", policy: "deny any ls -l\nallow any ls ...", s: Subject{Stages: stages("ls -a")}, want: ActionAllow, line: 2},
		{name: "earlier ask shadows later allow", policy: "ask any ls ...\nallow any", s: Subject{Stages: stages("ls")}, want: ActionAsk, line: 1},
		{name: "unmatched stage asks", policy: "allow any ls ...", s: Subject{Stages: stages("rm x")}, want: ActionAsk},
		// Stages combined.
		{name: "deny beats allow across stages", policy: "allow any cat ...\ndeny any rm ...", s: Subject{Stages: stages("cat x", "rm y")}, want: ActionDeny, line: 2},
		{name: "first denying stage reported", policy: "deny any rm ...\ndeny any dd ...\nallow any", s: Subject{Stages: stages("cat", "dd", "rm")}, want: ActionDeny, line: 2},
		{name: "deny beats ask", policy: "ask any cat ...\ndeny any rm ...", s: Subject{Stages: stages("cat", "rm")}, want: ActionDeny, line: 2},
		{name: "deny beats unmatched", policy: "deny any rm ...", s: Subject{Stages: stages("cat", "rm")}, want: ActionDeny, line: 1},
		{name: "unmatched stage beats allow", policy: "allow any cat ...", s: Subject{Stages: stages("cat x", "wc -l")}, want: ActionAsk},
		{name: "explicit ask beats allow", policy: "allow any cat ...\nask any wc ...", s: Subject{Stages: stages("cat x", "wc -l")}, want: ActionAsk, line: 2},
		{name: "first asking stage reported, unmatched", policy: "allow any cat ...\nask any wc ...", s: Subject{Stages: stages("cat", "sort", "wc")}, want: ActionAsk},
		{name: "first asking stage reported, rule", policy: "allow any cat ...\nask any wc ...", s: Subject{Stages: stages("cat", "wc", "sort")}, want: ActionAsk, line: 2},
		{name: "all allowed, stage 0 rule reported", policy: "allow any wc ...\nallow any cat ...", s: Subject{Stages: stages("cat x", "wc -l")}, want: ActionAllow, line: 2},
		// Resolved path.
		{name: "resolved path matches first word", policy: "allow any /usr/bin/ls ...", s: Subject{Stages: stages("ls -l"), Paths: []string{"/usr/bin/ls"}}, want: ActionAllow, line: 1},
		{name: "resolved path glob", policy: "deny any /usr/sbin/mkfs* ...", s: Subject{Stages: stages("mkfs.ext4 /dev/sda1"), Paths: []string{"/usr/sbin/mkfs.ext4"}}, want: ActionDeny, line: 1},
		{name: "written absolute path matches as resolved", policy: "allow any /bin/ls ...", s: Subject{Stages: stages("/bin/ls"), Paths: []string{"/bin/ls"}}, want: ActionAllow, line: 1},
		{name: "written relative path never matches as written", policy: "allow any ./deploy.sh", s: Subject{Stages: stages("./deploy.sh"), Paths: []string{"/home/eve/deploy.sh"}}, want: ActionAsk},
		{name: "written path glob never matches as written", policy: "allow any */deploy.sh", s: Subject{Stages: stages("x/deploy.sh"), Paths: []string{"/tmp/x/deploy.sh"}}, want: ActionAsk},
		{name: "resolved path of the right stage", policy: "allow any /usr/bin/ls ...", s: Subject{Stages: stages("cat", "ls"), Paths: []string{"/usr/bin/ls", "/usr/bin/cat"}}, want: ActionAsk},
		{name: "name pattern misses a written path", policy: "deny any mkfs* ...", s: Subject{Stages: stages("/usr/sbin/mkfs.ext4 /dev/sda1"), Paths: []string{"/usr/sbin/mkfs.ext4"}}, want: ActionAsk},
		{name: "resolved path only for the first word", policy: "allow any cat /usr/bin/x", s: Subject{Stages: stages("cat x"), Paths: []string{"/usr/bin/cat"}}, want: ActionAsk},
		{name: "paths shorter than stages", policy: "allow any /usr/bin/* ...", s: Subject{Stages: stages("cat", "wc"), Paths: []string{"/usr/bin/cat"}}, want: ActionAsk},
		{name: "paths for every stage", policy: "allow any /usr/bin/* ...", s: Subject{Stages: stages("cat", "wc"), Paths: []string{"/usr/bin/cat", "/usr/bin/wc"}}, want: ActionAllow, line: 1},
		// Degenerate.
		{name: "no rules", policy: "", s: Subject{Stages: stages("ls")}, want: ActionAsk},
		{name: "no stages", policy: "allow any", s: Subject{}, want: ActionAsk},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.policy)
			m := p.Evaluate(tt.s)
			if m.Action != tt.want {
				t.Errorf("Evaluate = %v, want %v", m.Action, tt.want)
			}
			line := 0
			if m.Rule != nil {
				line = m.Rule.Line
				if !pointsInto(p, m.Rule) {
					t.Errorf("Match.Rule does not point into Policy.Rules")
				}
			}
			if line != tt.line {
				t.Errorf("Evaluate rule line = %d, want %d", line, tt.line)
			}
		})
	}
}

// pointsInto reports whether r is one of p's rules rather than a copy.
func pointsInto(p *Policy, r *Rule) bool {
	for i := range p.Rules {
		if &p.Rules[i] == r {
			return true
		}
	}
	return false
}

func TestEvaluateRulePointsIntoPolicy(t *testing.T) {
	p := mustParse(t, "ask any ls\ndeny any rm")
	m := p.Evaluate(Subject{Stages: stages("rm")})
	if m.Rule != &p.Rules[1] {
		t.Errorf("Match.Rule = %p, want &p.Rules[1] = %p", m.Rule, &p.Rules[1])
	}
}

func TestEvaluateNoPolicy(t *testing.T) {
	s := Subject{Privileged: true, Stages: stages("rm -rf /")}
	var nilPolicy *Policy
	for name, p := range map[string]*Policy{"nil": nilPolicy, "zero": {}} {
		if m := p.Evaluate(s); m != (Match{Action: ActionAsk}) {
			t.Errorf("%s policy: Evaluate = %+v, want ask with no rule", name, m)
		}
		if r := p.AllowsAllPrivileged(); r != nil {
			t.Errorf("%s policy: AllowsAllPrivileged = %v, want nil", name, r)
		}
	}
	if got := nilPolicy.Name(); got != "" {
		t.Errorf("nil policy: Name() = %q, want empty", got)
	}
}

func TestHandMadeRuleMatchesNothing(t *testing.T) {
	p := &Policy{Rules: []Rule{{Line: 1, Text: "allow any", Action: ActionAllow}}}
	if m := p.Evaluate(Subject{Stages: stages("id")}); m.Action != ActionAsk || m.Rule != nil {
		t.Errorf("Evaluate = %+v, want ask with no rule", m)
	}
	if r := p.AllowsAllPrivileged(); r != nil {
		t.Errorf("AllowsAllPrivileged = %v, want nil", r)
	}
}

func TestExamplePolicy(t *testing.T) {
	p := mustParse(t, examplePolicy)
	if len(p.Rules) != 6 {
		t.Fatalf("example has %d rules, want 6", len(p.Rules))
	}
	tests := []struct {
		name       string
		privileged bool
		stages     [][]string
		paths      []string
		env        map[string]string
		want       Action
		line       int
	}{
		{name: "rm -rf /", privileged: true, stages: stages("rm -rf /"), want: ActionDeny, line: 1},
		{name: "rm -rf / unprivileged", stages: stages("rm -rf /"), want: ActionDeny, line: 1},
		{name: "rm -rf /tmp/x asks", privileged: true, stages: stages("rm -rf /tmp/x"), want: ActionAsk},
		{name: "mkfs", privileged: true, stages: stages("mkfs.ext4 /dev/sda1"), want: ActionDeny, line: 2},
		{name: "mkfs alone", privileged: true, stages: stages("mkfs"), want: ActionDeny, line: 2},
		{name: "ls unprivileged", stages: stages("ls -la /etc"), want: ActionAllow, line: 3},
		{name: "ls privileged asks", privileged: true, stages: stages("ls /root"), want: ActionAsk},
		{name: "ls by resolved path asks", stages: stages("/usr/bin/ls"), paths: []string{"/usr/bin/ls"}, want: ActionAsk},
		{name: "systemctl status", privileged: true, stages: stages("systemctl status nginx"), want: ActionAllow, line: 4},
		{name: "systemctl restart asks", privileged: true, stages: stages("systemctl restart nginx"), want: ActionAsk},
		{name: "systemctl status of a template unit", privileged: true, stages: stages("systemctl status getty@tty1.service"), want: ActionAllow, line: 4},
		{name: "systemctl status alone asks", privileged: true, stages: stages("systemctl status"), want: ActionAsk},
		{name: "systemctl status -H asks", privileged: true, stages: stages("systemctl status -H root@elsewhere"), want: ActionAsk},
		{name: "systemctl status --host= asks", privileged: true, stages: stages("systemctl status --host=root@elsewhere"), want: ActionAsk},
		{name: "systemctl status -Hhost asks", privileged: true, stages: stages("systemctl status -Hroot@elsewhere"), want: ActionAsk},
		{name: "systemctl status two units asks", privileged: true, stages: stages("systemctl status nginx ssh"), want: ActionAsk},
		{name: "journalctl --file asks", privileged: true, stages: stages("journalctl -u --file=/x -n 5"), want: ActionAsk},
		{name: "journalctl", privileged: true, stages: stages("journalctl -u nginx -n 50"), want: ActionAllow, line: 5},
		{name: "journalctl bad count asks", privileged: true, stages: stages("journalctl -u nginx -n x50"), want: ActionAsk},
		{name: "journalctl extra arg asks", privileged: true, stages: stages("journalctl -u nginx -n 50 -f"), want: ActionAsk},
		{name: "apt-get update", privileged: true, stages: stages("apt-get update"), want: ActionAllow, line: 6},
		{name: "apt-get update -y asks", privileged: true, stages: stages("apt-get update -y"), want: ActionAsk},
		{name: "apt-get update with LANG", privileged: true, stages: stages("apt-get update"), env: map[string]string{"LANG": "C.UTF-8"}, want: ActionAllow, line: 6},
		{name: "apt-get update with LANGUAGE asks", privileged: true, stages: stages("apt-get update"), env: map[string]string{"LANG": "C.UTF-8", "LANGUAGE": "de"}, want: ActionAsk},
		{name: "allowed pipeline", privileged: true, stages: stages("journalctl -u ssh -n 100", "systemctl status ssh"), want: ActionAllow, line: 5},
		{name: "pipeline with a denied stage", privileged: true, stages: stages("systemctl status", "rm -rf /"), want: ActionDeny, line: 1},
		{name: "pipeline with an asked stage", privileged: true, stages: stages("apt-get update", "ls"), want: ActionAsk},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := p.Evaluate(Subject{Privileged: tt.privileged, User: "alice", Stages: tt.stages, Paths: tt.paths, Env: tt.env})
			if m.Action != tt.want || (m.Rule == nil) != (tt.line == 0) || m.Rule != nil && m.Rule.Line != tt.line {
				t.Errorf("Evaluate = %+v, want %v by line %d (0: no rule)", m, tt.want, tt.line)
			}
		})
	}
	if r := p.AllowsAllPrivileged(); r != nil {
		t.Errorf("AllowsAllPrivileged = %v, want none", r)
	}
}

// TestDocs holds docs/policy.md to the code: it repeats the design's
// example, and every block fenced as "policy" parses.
func TestDocs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if !strings.Contains(doc, "```policy\n"+examplePolicy+"```\n") {
		t.Errorf("docs/policy.md does not hold the example policy in a policy block")
	}
	blocks := 0
	for rest := doc; ; {
		_, after, ok := strings.Cut(rest, "```policy\n")
		if !ok {
			break
		}
		block, after, ok := strings.Cut(after, "```\n")
		if !ok {
			t.Fatalf("docs/policy.md: unterminated policy block")
		}
		blocks++
		if _, err := Parse("docs/policy.md", strings.NewReader(block)); err != nil {
			t.Errorf("policy block %d does not parse: %v\n%s", blocks, err, block)
		}
		rest = after
	}
	if blocks < 2 {
		t.Errorf("docs/policy.md has %d policy blocks, want several", blocks)
	}
	// Error messages quoted in the docs are the real ones.
	for _, tt := range []struct{ text, want string }{
		{"alow any ls\n", `policy /etc/rootgate/policy:1: unknown action "alow"`},
		{"allow user=alice ls\n", `policy /etc/rootgate/policy:1: unknown scope "user=alice"`},
	} {
		_, err := Parse("/etc/rootgate/policy", strings.NewReader(tt.text))
		if err == nil || err.Error() != tt.want {
			t.Errorf("Parse(%q) = %v, want %s", tt.text, err, tt.want)
		}
		if !strings.Contains(doc, tt.want) {
			t.Errorf("docs/policy.md does not quote %s", tt.want)
		}
	}
}

// TestDenyRuleText: a deny rule keeps its line and its text as written,
// which the requester is told (wire.DeniedByPolicyError).
func TestDenyRuleText(t *testing.T) {
	p := mustParse(t, "\nallow any ls ...\n  deny   any   rm -rf /   # no\n")
	m := p.Evaluate(Subject{Stages: stages("ls", "rm -rf /")})
	if m.Action != ActionDeny {
		t.Fatalf("Evaluate = %+v, want deny", m)
	}
	want := "denied by policy rule at policy:3: deny   any   rm -rf /"
	if got := wire.DeniedByPolicyError(fmt.Sprintf("policy:%d", m.Rule.Line), m.Rule.Text).Error(); got != want {
		t.Errorf("denial = %q, want %q", got, want)
	}
}

func TestAllowsAllPrivileged(t *testing.T) {
	tests := []struct {
		name  string
		rules string
		want  bool
	}{
		{name: "allow any", rules: "allow any", want: true},
		{name: "allow privileged", rules: "allow privileged", want: true},
		{name: "rest alone", rules: "allow any ...", want: true},
		{name: "star and rest", rules: "allow privileged * ...", want: true},
		{name: "stars and rest", rules: "allow privileged ** ...", want: true},
		{name: "quoted star and rest", rules: `allow privileged "*" ...`, want: true},
		{name: "with a user qualifier", rules: "allow any,user=alice", want: true},
		{name: "with a host qualifier", rules: "allow privileged,host=* * ...", want: true},
		{name: "unprivileged", rules: "allow unprivileged", want: false},
		{name: "deny any", rules: "deny any", want: false},
		{name: "ask any", rules: "ask any", want: false},
		{name: "star without rest", rules: "allow privileged *", want: false},
		{name: "star and literal dots", rules: `allow privileged * "..."`, want: false},
		{name: "empty word and rest", rules: `allow privileged "" ...`, want: false},
		{name: "a command", rules: "allow privileged ls ...", want: false},
		{name: "star prefix", rules: "allow privileged a* ...", want: false},
		{name: "star then argument", rules: "allow privileged * -h ...", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.rules)
			got := p.AllowsAllPrivileged()
			if tt.want && (len(got) != 1 || got[0] != &p.Rules[0]) || !tt.want && got != nil {
				t.Errorf("AllowsAllPrivileged(%q) = %v, want reported %v", tt.rules, got, tt.want)
			}
		})
	}

	p := mustParse(t, "deny any rm ...\nallow any,user=alice\nallow unprivileged\nallow privileged * ...\n")
	var lines []int
	for _, r := range p.AllowsAllPrivileged() {
		lines = append(lines, r.Line)
	}
	if !slices.Equal(lines, []int{2, 4}) {
		t.Errorf("AllowsAllPrivileged lines = %v, want [2 4]", lines)
	}
}

func TestLoadPolicy(t *testing.T) {
	dir := t.TempDir()

	missing := filepath.Join(dir, "missing")
	p, err := Load(missing)
	if err != nil {
		t.Fatalf("Load(missing) error = %v, want nil", err)
	}
	if p == nil || len(p.Rules) != 0 || p.Name() != missing {
		t.Fatalf("Load(missing) = %+v, want an empty policy named %q", p, missing)
	}
	if m := p.Evaluate(Subject{Privileged: true, Stages: stages("id")}); m.Action != ActionAsk {
		t.Errorf("empty policy: Evaluate = %v, want ask", m.Action)
	}

	good := filepath.Join(dir, "good")
	if err := os.WriteFile(good, []byte(examplePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = Load(good)
	if err != nil || len(p.Rules) != 6 || p.Name() != good {
		t.Fatalf("Load(good) = %+v, %v; want 6 rules named %q", p, err, good)
	}

	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("allow any\nalow any\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Load(bad)
	if want := fmt.Sprintf("policy %s:2: unknown action \"alow\"", bad); err == nil || err.Error() != want {
		t.Errorf("Load(bad) error = %v, want %s", err, want)
	}

	_, err = Load(dir)
	if err == nil || !strings.HasPrefix(err.Error(), "policy "+dir+": ") {
		t.Errorf("Load(directory) error = %v, want one naming the policy", err)
	}

	notDir := filepath.Join(good, "x")
	_, err = Load(notDir)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Load(%q) error = %v, want a failure other than not-exist", notDir, err)
	}
}

// formatRule writes r in a canonical form: every word quoted, the scope's
// qualifiers in a fixed order.
func formatRule(r *Rule) string {
	q := func(s string) string {
		return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s) + `"`
	}
	var scope string
	switch r.scope {
	case scopePrivileged:
		scope = "privileged"
	case scopeUnprivileged:
		scope = "unprivileged"
	case scopeAny:
		scope = "any"
	}
	stdin := r.stdin
	if stdin != "" && stdin != "none" {
		stdin = "sha256:" + stdin
	}
	for _, kv := range [][2]string{{"user", r.user}, {"session", r.session}, {"host", r.host},
		{"runas", r.runas}, {"rungroup", r.rungroup}, {"cwd", r.cwd}, {"stdin", stdin}} {
		if kv[1] != "" {
			scope += "," + kv[0] + "=" + kv[1]
		}
	}
	if r.memory > 0 {
		scope += ",memory=" + strconv.FormatInt(r.memory, 10)
	}
	if r.tasks > 0 {
		scope += ",tasks=" + strconv.FormatInt(r.tasks, 10)
	}
	for _, e := range r.env {
		scope += ",env=" + e.key
		if e.hasValue {
			scope += "=" + e.value
		}
	}
	words := []string{r.Action.String(), q(scope)}
	for _, w := range r.words {
		words = append(words, q(w))
	}
	if r.rest {
		words = append(words, "...")
	}
	return strings.Join(words, " ")
}

// sameRule reports whether a and b mean the same, whatever their line and text.
func sameRule(a, b Rule) bool {
	a.File, a.Line, a.Text, b.File, b.Line, b.Text = "", 0, "", "", 0, ""
	return reflect.DeepEqual(a, b)
}

func TestFormatRuleRoundTrip(t *testing.T) {
	p := mustParse(t, examplePolicy+`allow "any,user=a\"b,session=x y,host=#h" echo "a\\b" "" "..." ...`+
		"\nallow privileged,runas=pg*,rungroup=adm,cwd=/srv/*,stdin=none,memory=1M,tasks=9 ls"+
		"\ndeny any,stdin=sha256:"+strings.Repeat("ab", 32)+" sh"+
		"\nallow privileged journalctl -u {unit} -n \"{int<=500}\" {-f|--follow} \\{} {int} ...")
	for i := range p.Rules {
		text := formatRule(&p.Rules[i])
		q := mustParse(t, text)
		if len(q.Rules) != 1 || !sameRule(q.Rules[0], p.Rules[i]) {
			t.Errorf("rule %q formatted as %q parses to %#v", p.Rules[i].Text, text, q.Rules)
		}
	}
}

func FuzzParsePolicy(f *testing.F) {
	f.Add(examplePolicy)
	f.Add("allow privileged journalctl -u {unit} -n {int<=500}\nallow any systemctl restart {nginx|php-fpm|[} \\{x}\n")
	f.Add("allow privileged,user=u,cwd=/srv/app,stdin=none make\nask any,cwd=/tmp/* sh\ndeny any,stdin=sha256:" + strings.Repeat("0f", 32) + " sh\n")
	f.Fuzz(func(t *testing.T, text string) {
		p, err := Parse("fuzz", strings.NewReader(text))
		if err != nil {
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is %T, want *ParseError", err, err)
			}
			if lines := strings.Count(text, "\n") + 1; pe.Line < 1 || pe.Line > lines {
				t.Fatalf("error %v: line %d outside 1..%d", err, pe.Line, lines)
			}
			if prefix := "policy fuzz:" + strconv.Itoa(pe.Line) + ": "; !strings.HasPrefix(err.Error(), prefix) {
				t.Fatalf("error %q does not start with %q", err, prefix)
			}
			return
		}
		for _, o := range p.Overrides() {
			if o.Rule == o.By || strictness(o.By.Action) < strictness(o.Rule.Action) {
				t.Fatalf("override %s", o)
			}
		}
		names := []string{"", "a", "/", "ls", "/usr/bin/ls", "...", `\`, "[", "é", "\xff"}
		var cmds [][]string
		for i := range p.Rules {
			r := &p.Rules[i]
			if strings.ContainsAny(r.Text, "\n") || r.Text != strings.Trim(r.Text, " \t\r") {
				t.Fatalf("rule %d text %q: holds a newline or surrounding blanks", i, r.Text)
			}
			// The text as written means the same on its own.
			q, err := Parse("text", strings.NewReader(r.Text))
			if err != nil || len(q.Rules) != 1 || !sameRule(q.Rules[0], *r) {
				t.Fatalf("rule %q reparsed = %v, %v", r.Text, q, err)
			}
			// So does its canonical form.
			canon := formatRule(r)
			q, err = Parse("canon", strings.NewReader(canon))
			if err != nil || len(q.Rules) != 1 || !sameRule(q.Rules[0], *r) {
				t.Fatalf("rule %q formatted as %q reparsed = %v, %v", r.Text, canon, q, err)
			}
			// Its globs were checked: they never fail to match. A
			// placeholder word is not a glob.
			var globs []string
			for j, w := range r.words {
				if j >= len(r.places) || r.places[j].kind == phNone {
					globs = append(globs, w)
				}
			}
			for _, g := range append(globs, r.user, r.session, r.host) {
				for _, n := range append(names, r.words[:min(len(r.words), 8)]...) {
					if _, err := path.Match(g, n); err != nil {
						t.Fatalf("glob %q of rule %q: %v", g, r.Text, err)
					}
				}
			}
			if len(r.words) > 0 && len(cmds) < 16 {
				cmds = append(cmds, r.words, append(slices.Clone(r.words), "x"))
			}
		}
		subjects := []Subject{
			{Privileged: true, User: "root", Stages: stages("ls -l")},
			{User: "alice", Session: "s", Host: "h", Stages: stages("rm -rf /", "cat"), Paths: []string{"/usr/bin/rm"}},
			{Privileged: true, Stages: cmds},
			{Stages: cmds, Paths: []string{"/usr/bin/x"}},
		}
		for _, s := range subjects {
			m := p.Evaluate(s)
			if m.Action != ActionAsk && m.Rule == nil {
				t.Fatalf("Evaluate = %v with no rule", m.Action)
			}
			if m.Rule != nil && !pointsInto(p, m.Rule) {
				t.Fatalf("Evaluate: Match.Rule does not point into Policy.Rules")
			}
			if m.Rule != nil && m.Rule.Action != m.Action {
				t.Fatalf("Evaluate = %v by rule %q of action %v", m.Action, m.Rule.Text, m.Rule.Action)
			}
		}
		for _, r := range p.AllowsAllPrivileged() {
			if r.Action != ActionAllow || r.scope == scopeUnprivileged {
				t.Fatalf("AllowsAllPrivileged reported %q", r.Text)
			}
		}
	})
}

// TestParseRefusesUnsafeText: a rule line that could rewrite a terminal
// (an OSC title, a bidi override, invalid UTF-8) is refused, so `rootgate
// policy test` on a file someone else wrote prints nothing of it; tabs and
// CRLF line ends still parse.
func TestParseRefusesUnsafeText(t *testing.T) {
	for _, line := range []string{"allow any true x\x1b]0;pwned\x07", "allow any echo \u202egnp.exe", "allow any echo \xff", "# \x1b[2J"} {
		if _, err := Parse("p", strings.NewReader(line+"\n")); err == nil || !errors.Is(err, errUnsafeText) {
			t.Errorf("Parse(%q) = %v, want the unsafe-text error", line, err)
		}
	}
	if _, err := Parse("p", strings.NewReader("allow\tany\techo hi\r\n")); err != nil {
		t.Errorf("tabs and CRLF: %v", err)
	}
}

// TestEvaluateDoesNotCopyArguments: matching a request against rules that
// do not match builds no explanations, so a requester's 1 MiB argument
// costs each rule a match, not a quoted copy (100 rules once allocated
// 1.3 GB for one request).
func TestEvaluateDoesNotCopyArguments(t *testing.T) {
	var rules strings.Builder
	for range 100 {
		rules.WriteString("allow privileged foo a?*\n")
	}
	p := mustParse(t, rules.String())
	big := strings.Repeat("\n", 1<<20)
	s := Subject{Privileged: true, Stages: [][]string{{"foo", big}}, Paths: []string{"/usr/bin/foo"}}
	allocs := testing.AllocsPerRun(3, func() { p.Evaluate(s) })
	if allocs > 50 {
		t.Errorf("Evaluate allocated %.0f times for 100 rules that do not match", allocs)
	}
}

func TestRuleLimits(t *testing.T) {
	for text, want := range map[string][2]int64{
		"allow privileged apt-get ...":                       {0, 0},
		"allow privileged,memory=512M,tasks=100 apt-get ...": {512 << 20, 100},
		"allow any,memory=4096 ls":                           {4096, 0},
		"allow any,memory=2g,user=a* ls":                     {2 << 30, 0},
		"allow any,tasks=7 ls":                               {0, 7},
	} {
		p, err := Parse("test", strings.NewReader(text+"\n"))
		if err != nil {
			t.Fatalf("%s: %v", text, err)
		}
		mem, tasks := p.Rules[0].Limits()
		if mem != want[0] || tasks != want[1] {
			t.Errorf("%s: memory %d tasks %d, want %v", text, mem, tasks, want)
		}
	}
}

// TestEvaluateLimitsOfEveryStage: each stage's allow rule limits the
// whole run, the lowest limit applying; a first stage allowed without
// limits does not lift a later one's.
func TestEvaluateLimitsOfEveryStage(t *testing.T) {
	p, err := Parse("p", strings.NewReader("allow any,tasks=50,memory=1M make ...\nallow any,memory=2M cat\nallow any true\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		stages        [][]string
		memory, tasks int64
	}{
		{[][]string{{"true"}}, 0, 0},
		{[][]string{{"true"}, {"make"}}, 1 << 20, 50},
		{[][]string{{"cat"}, {"true"}}, 2 << 20, 0},
		{[][]string{{"true"}, {"cat"}, {"make", "-j4"}}, 1 << 20, 50},
	} {
		m := p.Evaluate(Subject{Privileged: true, User: "alice", Stages: tc.stages})
		if m.Action != ActionAllow || m.Memory != tc.memory || m.Tasks != tc.tasks {
			t.Errorf("%q: %v memory %d tasks %d, want allow memory %d tasks %d", tc.stages, m.Action, m.Memory, m.Tasks, tc.memory, tc.tasks)
		}
	}
}
