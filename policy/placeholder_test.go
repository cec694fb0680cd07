package policy

import (
	"errors"
	"path"
	"strings"
	"testing"
)

// TestPlaceholderMatch: each placeholder admits exactly the arguments of
// its kind, and none that is an option (unless listed), a glob, a path or
// a number spelled another way.
func TestPlaceholderMatch(t *testing.T) {
	const journal = "allow privileged journalctl -u {unit} -n {int<=500}"
	const restart = "allow privileged systemctl restart {nginx|php-fpm}"
	tests := []struct {
		rule  string
		cmd   string
		admit bool
		why   string // for a refusal: Explain's reason, "" to skip
	}{
		{journal, "journalctl -u nginx -n 500", true, ""},
		{journal, "journalctl -u nginx.service -n 0", true, ""},
		{journal, "journalctl -u getty@tty1.service -n 20", true, ""},
		{journal, "journalctl -u systemd-journald -n 1", true, ""},
		{journal, "journalctl -u dbus-org.freedesktop.login1:x_y -n 9", true, ""},
		{journal, "journalctl -u nginx -n 500 --file=/etc/shadow", false, "the pattern takes 5 word(s), the stage has 6"},
		{journal, "journalctl -u -fu -n 5", false, `argument 2 "-fu" is not a unit name: it starts with '-'`},
		{journal, "journalctl -u --file=/etc/shadow -n 5", false, `argument 2 "--file=/etc/shadow" is not a unit name: it starts with '-'`},
		{journal, "journalctl -u nginx -n 5000", false, `argument 4 "5000" is over 500`},
		{journal, "journalctl -u nginx -n 501", false, `argument 4 "501" is over 500`},
		{journal, "journalctl -u nginx -n -1", false, `argument 4 "-1" is not a decimal integer`},
		{journal, "journalctl -u nginx -n +5", false, `argument 4 "+5" is not a decimal integer`},
		{journal, "journalctl -u nginx -n 0x10", false, `argument 4 "0x10" is not a decimal integer`},
		{journal, "journalctl -u nginx -n 010", false, `argument 4 "010" has a leading zero`},
		{journal, "journalctl -u nginx -n 1_0", false, `argument 4 "1_0" is not a decimal integer`},
		{journal, "journalctl -u nginx -n 99999999999999999999", false, `argument 4 "99999999999999999999" is over 9223372036854775807`},
		{journal, "journalctl -u nginx -n all", false, `argument 4 "all" is not a decimal integer`},
		{journal, "journalctl -u nginx* -n 5", false, `argument 2 "nginx*" is not a unit name: it holds '*'`},
		{journal, "journalctl -u ngin[x] -n 5", false, `argument 2 "ngin[x]" is not a unit name: it holds '['`},
		{journal, "journalctl -u ../../etc -n 5", false, `argument 2 "../../etc" is not a unit name: it starts with '.'`},
		{journal, "journalctl -u .. -n 5", false, `argument 2 ".." is not a unit name: it starts with '.'`},
		{journal, "journalctl -u a/b -n 5", false, `argument 2 "a/b" is not a unit name: it holds '/'`},
		{journal, "journalctl -u @x -n 5", false, `argument 2 "@x" is not a unit name: it starts with '@'`},
		{journal, "journalctl -u nginx;id -n 5", false, `argument 2 "nginx;id" is not a unit name: it holds ';'`},
		{journal, "journalctl -u ngínx -n 5", false, `argument 2 "ngínx" is not a unit name: it holds a non-ASCII character`},
		{journal, "journalctl -u " + strings.Repeat("a", 256) + " -n 5", false, `argument 2 "` + strings.Repeat("a", 256) + `" is not a unit name: it is over 255 characters`},
		{journal, "journalctl -u " + strings.Repeat("a", 255) + " -n 5", true, ""},
		{journal, "journalctl -n 5 -u nginx", false, `argument 1 "-n" does not match "-u"`},
		{restart, "systemctl restart nginx", true, ""},
		{restart, "systemctl restart php-fpm", true, ""},
		{restart, "systemctl restart nginx --now", false, "the pattern takes 3 word(s), the stage has 4"},
		{restart, "systemctl restart ssh", false, `argument 2 "ssh" is not one of {nginx|php-fpm}`},
		{restart, "systemctl restart nginx|php-fpm", false, `argument 2 "nginx|php-fpm" is not one of {nginx|php-fpm}`},
		{restart, "systemctl restart Nginx", false, ""},
		{restart, "systemctl restart ngin*", false, ""},
		{restart, "systemctl restart -H", false, ""},
		// A listed alternative may be an option.
		{"allow privileged journalctl {-f|--follow} -u {unit}", "journalctl --follow -u nginx", true, ""},
		{"allow privileged journalctl {-f|--follow} -u {unit}", "journalctl --file=x -u nginx", false, `argument 1 "--file=x" is not one of {-f|--follow}`},
		// Alternatives are literal: no globs.
		{"allow any echo {a*|b?}", "echo a*", true, ""},
		{"allow any echo {a*|b?}", "echo ab", false, `argument 1 "ab" is not one of {a*|b?}`},
		// {int} without a bound.
		{"allow any sleep {int}", "sleep 9223372036854775807", true, ""},
		{"allow any sleep {int}", "sleep 0", true, ""},
		{"allow any sleep {int}", "sleep 9223372036854775808", false, `argument 1 "9223372036854775808" is over 9223372036854775807`},
		{"allow any sleep {int}", "sleep 1.5", false, `argument 1 "1.5" is not a decimal integer`},
		{"allow any sleep {int<=0}", "sleep 0", true, ""},
		{"allow any sleep {int<=0}", "sleep 1", false, `argument 1 "1" is over 0`},
		// Placeholders mix with globs and a trailing "...".
		{"allow any head -n {int<=10} /var/log/*", "head -n 10 /var/log/syslog", true, ""},
		{"allow any head -n {int<=10} /var/log/*", "head -n 10 /var/log/../shadow", false, `argument 3 "/var/log/../shadow" does not match "/var/log/*"`},
		{"allow any echo {unit} ...", "echo nginx -x -y", true, ""},
		// An escaped brace is a literal brace, quoted or not.
		{`allow any find . -exec ls \{} ;`, "find . -exec ls {} ;", true, ""},
		{`allow any echo "\\{unit}"`, "echo {unit}", true, ""},
		{`allow any echo "\\{unit}"`, "echo nginx", false, `argument 1 "nginx" does not match "\\{unit}"`},
		// Quotes do not turn placeholders off, as they do not turn globs off.
		{`allow any echo "{unit}"`, "echo nginx", true, ""},
		// A brace after the start of a word, escaped, is literal too.
		{`allow any echo a\{b}`, "echo a{b}", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.rule+" / "+tt.cmd, func(t *testing.T) {
			p := mustParse(t, tt.rule)
			s := Subject{Privileged: true, Stages: stages(tt.cmd)}
			want := ActionAsk
			if tt.admit {
				want = ActionAllow
			}
			m, ex := p.Explain(s)
			if m.Action != want {
				t.Fatalf("%s: %v, want %v", tt.cmd, m.Action, want)
			}
			if tt.admit {
				return
			}
			if len(ex) != 1 || len(ex[0].Skipped) != 1 {
				t.Fatalf("Explain = %+v, want one skipped rule", ex)
			}
			if got := ex[0].Skipped[0].Why; tt.why != "" && got != tt.why {
				t.Errorf("why:\n got %s\nwant %s", got, tt.why)
			}
		})
	}
}

// TestPlaceholderParseErrors: a placeholder that is not one of the set, or
// a brace that is not a whole-word placeholder, stops the parse with the
// file and line.
func TestPlaceholderParseErrors(t *testing.T) {
	want := `want {unit}, {int}, {int<=N} or {a|b|...}; write \{ for a literal {`
	for _, tt := range []struct{ text, err string }{
		{"allow any journalctl -u {units}", `unknown placeholder "{units}": ` + want},
		{"allow any journalctl -u {Unit}", `unknown placeholder "{Unit}": ` + want},
		{"allow any journalctl -u { unit }", `placeholder "{" does not end in "}": a placeholder is a whole word; write \{ for a literal {`},
		{`allow any journalctl -u "{ unit }"`, `unknown placeholder "{ unit }": ` + want},
		{"allow any systemctl restart {nginx}", `unknown placeholder "{nginx}": ` + want},
		{"allow any find . -exec ls {} ;", `unknown placeholder "{}": ` + want},
		{"allow any journalctl -u {unit", `placeholder "{unit" does not end in "}": a placeholder is a whole word; write \{ for a literal {`},
		{"allow any journalctl -u {unit}x", `placeholder "{unit}x" does not end in "}": a placeholder is a whole word; write \{ for a literal {`},
		{"allow any journalctl -u {", `placeholder "{" does not end in "}": a placeholder is a whole word; write \{ for a literal {`},
		{"allow any journalctl --unit={unit}", `"{" inside "--unit={unit}": a placeholder is a whole word; write \{ for a literal {`},
		{"allow any echo [{]", `"{" inside "[{]": a placeholder is a whole word; write \{ for a literal {`},
		{"allow any {unit} ...", `placeholder "{unit}" in place of the command: a rule names its command`},
		{"allow any {ls|cat} ...", `placeholder "{ls|cat}" in place of the command: a rule names its command`},
		{"allow any /usr/bin/{ls} ...", `"{" inside "/usr/bin/{ls}": a placeholder is a whole word; write \{ for a literal {`},
		{"allow any head -n {int<=}", `bad bound in placeholder "{int<=}": want a decimal integer such as {int<=500}`},
		{"allow any head -n {int<=-1}", `bad bound in placeholder "{int<=-1}": want a decimal integer such as {int<=500}`},
		{"allow any head -n {int<=0x10}", `bad bound in placeholder "{int<=0x10}": want a decimal integer such as {int<=500}`},
		{"allow any head -n {int<=0500}", `bad bound in placeholder "{int<=0500}": want a decimal integer such as {int<=500}`},
		{"allow any head -n {int<=99999999999999999999}", `bad bound in placeholder "{int<=99999999999999999999}": want a decimal integer such as {int<=500}`},
		{"allow any head -n {int<500}", `unknown placeholder "{int<500}": ` + want},
		{"allow any systemctl restart {nginx||php-fpm}", `empty alternative in placeholder "{nginx||php-fpm}"`},
		{"allow any systemctl restart {nginx|}", `empty alternative in placeholder "{nginx|}"`},
		{"allow any systemctl restart {|}", `empty alternative in placeholder "{|}"`},
		{"allow any systemctl restart {a|{b}}", `alternative "{b}" in placeholder "{a|{b}}" holds "{", "}" or "\": alternatives are literal words`},
		{"allow any,env=LANG={C|C.UTF-8} ls", `"{" in qualifier "env=LANG={C|C.UTF-8}": placeholders are for arguments; repeat env=KEY=VALUE for each value, or write \{ for a literal {`},
		{"allow any,env={LANG} ls", `"{" in qualifier "env={LANG}": placeholders are for arguments; repeat env=KEY=VALUE for each value, or write \{ for a literal {`},
		{`allow any systemctl restart {a|b\c}`, `alternative "b\\c" in placeholder "{a|b\\c}" holds "{", "}" or "\": alternatives are literal words`},
	} {
		t.Run(tt.text, func(t *testing.T) {
			_, err := Parse("/etc/rootgate/policy.d/10-x.policy", strings.NewReader("# first\n"+tt.text+"\n"))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) = %v, want a *ParseError", tt.text, err)
			}
			if got, want := err.Error(), "policy /etc/rootgate/policy.d/10-x.policy:2: "+tt.err; got != want {
				t.Errorf("error:\n got %s\nwant %s", got, want)
			}
			if errors.Is(err, path.ErrBadPattern) {
				t.Errorf("a placeholder error unwraps to path.ErrBadPattern")
			}
		})
	}
}

// TestPlaceholderRuleFields: the parsed rule keeps every word as written and
// the placeholders index for index beside them; a rule without any has none.
func TestPlaceholderRuleFields(t *testing.T) {
	p := mustParse(t, "allow privileged journalctl -u {unit} -n {int<=500} ...\nallow any ls -l\n")
	r := &p.Rules[0]
	if got := strings.Join(r.words, " "); got != "journalctl -u {unit} -n {int<=500}" || !r.rest {
		t.Errorf("words = %q rest %v", got, r.rest)
	}
	kinds := []placeholderKind{phNone, phNone, phUnit, phNone, phInt}
	if len(r.places) != len(kinds) {
		t.Fatalf("places = %+v", r.places)
	}
	for i, k := range kinds {
		if r.places[i].kind != k {
			t.Errorf("places[%d] = %+v, want kind %d", i, r.places[i], k)
		}
	}
	if r.places[4].max != 500 {
		t.Errorf("bound = %d, want 500", r.places[4].max)
	}
	if p.Rules[1].places != nil {
		t.Errorf("a rule without placeholders has places %+v", p.Rules[1].places)
	}
}
