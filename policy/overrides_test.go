package policy

import (
	"fmt"
	"strings"
	"testing"
)

// TestOverrides: every rule reported never decides (checked against
// requests it matches), and the rules that still decide something are
// not reported.
func TestOverrides(t *testing.T) {
	for _, tt := range []struct {
		name   string
		policy string
		want   []string // "RULE LINE by BY LINE"
	}{
		{"catch-all ask over allows", "allow privileged systemctl status {unit}\nallow unprivileged ls ...\nask any\n", []string{"1 by 3", "2 by 3"}},
		{"ask of the command over an allow", "allow privileged systemctl status {unit}\nask any systemctl ...\n", []string{"1 by 2"}},
		{"later deny over an earlier allow", "allow privileged,user=alice rm -rf /tmp/x\ndeny any rm ...\n", []string{"1 by 2"}},
		{"same deny twice", "deny any rm ...\ndeny privileged rm -rf /\n", []string{"2 by 1"}},
		{"glob covers a plain word", "ask privileged apt-get install *\nallow privileged apt-get install nginx\n", []string{"2 by 1"}},
		{"placeholder covers a plain word", "deny privileged systemctl stop {unit}\nallow privileged systemctl stop nginx\n", []string{"2 by 1"}},
		{"narrower ask leaves the allow", "allow privileged systemctl status {unit}\nask privileged systemctl status sshd\n", nil},
		{"other user", "ask any,user=bob\nallow privileged,user=alice ls\n", nil},
		{"other scope", "ask unprivileged\nallow privileged ls\n", nil},
		{"runas ask over root's allow", "ask privileged,runas=root\nallow privileged ls\n", []string{"2 by 1"}},
		{"runas ask leaves root's allow", "ask privileged,runas=postgres\nallow privileged ls\n", nil},
		{"allow by an allow with limits kept", "allow privileged ls ...\nallow privileged,memory=1G ls -l\n", nil},
		{"allow by an earlier allow", "allow privileged ls ...\nallow privileged ls -l\n", []string{"2 by 1"}},
		{"env of the earlier allow too narrow", "allow privileged ls ...\nallow privileged,env=LANG ls -l\n", nil},
		{"fixed-length ask leaves longer allow", "ask privileged ls -l\nallow privileged ls -l ...\n", nil},
		{"empty policy", "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := mustParse(t, tt.policy)
			var got []string
			for _, o := range p.Overrides() {
				got = append(got, fmt.Sprintf("%d by %d", o.Rule.Line, o.By.Line))
				if !strings.Contains(o.String(), "never decides anything") {
					t.Errorf("String() = %q", o.String())
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("Overrides = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestOverridesNeverDecide: a rule reported never decides a request made
// of its own words, which it matches.
func TestOverridesNeverDecide(t *testing.T) {
	p := mustParse(t, "allow privileged systemctl status nginx\nallow privileged,user=alice ls -l\nask any\ndeny any rm ...\nallow any rm x\n")
	for _, o := range p.Overrides() {
		s := Subject{Privileged: true, User: "alice", Stages: [][]string{o.Rule.words}}
		if !o.Rule.matches(&s, s.Stages[0], "") {
			t.Fatalf("%s does not match its own words", o.Rule.Text)
		}
		if m := p.Evaluate(s); m.Rule == o.Rule {
			t.Errorf("%s decides %v, yet is reported: %s", o.Rule.Text, s.Stages, o)
		}
	}
	if n := len(p.Overrides()); n != 3 {
		t.Errorf("%d overrides, want 3", n)
	}
}
