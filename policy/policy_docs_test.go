package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// docPolicyExamples returns the policy examples of a file: its blocks
// fenced as "policy" (Markdown), or, for packaging/policy, its commented
// example lines ("#   allow …").
func docPolicyExamples(t *testing.T, file string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	if !strings.HasSuffix(file, ".md") {
		var block strings.Builder
		for line := range strings.Lines(string(b)) {
			rule, ok := strings.CutPrefix(line, "#   ")
			if ok && strings.Contains(" allow deny ask ", " "+strings.Fields(rule)[0]+" ") {
				block.WriteString(rule)
			}
		}
		return append(blocks, block.String())
	}
	for rest := string(b); ; {
		_, after, ok := strings.Cut(rest, "```policy\n")
		if !ok {
			return blocks
		}
		block, after, ok := strings.Cut(after, "```\n")
		if !ok {
			t.Fatalf("%s: unterminated policy block", file)
		}
		blocks = append(blocks, block)
		rest = after
	}
}

// TestDocPolicyExamples: every policy example in README.md, docs/policy.md
// and the shipped packaging/policy parses, and none that may run as root
// admits options: no allow rule of scope privileged or any ends in "...",
// and none has an argument glob that matches an option such as -H or
// --host=… (which make systemctl run ssh as root). The only exceptions are
// the rules the daemon itself warns about (allow every privileged
// command), which docs/policy.md shows as what not to write.
func TestDocPolicyExamples(t *testing.T) {
	options := []string{"-H", "--host=root@elsewhere", "-Hroot@elsewhere", "--file=/etc/shadow"}
	for _, file := range []string{"README.md", "docs/policy.md", "packaging/policy"} {
		blocks := docPolicyExamples(t, file)
		if len(blocks) == 0 || strings.TrimSpace(blocks[0]) == "" {
			t.Errorf("%s has no policy example", file)
		}
		for i, block := range blocks {
			p, err := Parse(file, strings.NewReader(block))
			if err != nil {
				t.Errorf("%s: example %d does not parse: %v\n%s", file, i+1, err, block)
				continue
			}
			warned := map[*Rule]bool{}
			for _, r := range p.AllowsAllPrivileged() {
				warned[r] = true
			}
			for j := range p.Rules {
				r := &p.Rules[j]
				if r.Action != ActionAllow || r.scope == scopeUnprivileged || warned[r] {
					continue
				}
				if r.rest {
					t.Errorf("%s: example rule %q runs as root with any further arguments", file, r.Text)
				}
				for i := 1; i < len(r.words); i++ {
					for _, o := range options {
						if r.argWhyNot(i, o, false) == "" {
							t.Errorf("%s: example rule %q: %q admits the option %s", file, r.Text, r.words[i], o)
						}
					}
				}
			}
		}
	}
}

// TestDocPolicyClaims checks what docs/policy.md says about its examples
// of env= and of globs and path components, and its table of errors.
func TestDocPolicyClaims(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	var envBlock string
	for _, block := range docPolicyExamples(t, "docs/policy.md") {
		if strings.HasPrefix(block, "allow privileged,env=LANG,env=LC_*") {
			envBlock = block
		}
	}
	if envBlock == "" {
		t.Fatal("docs/policy.md: the Environment example is gone")
	}
	env := mustParse(t, envBlock)
	for _, tc := range []struct {
		cmd  string
		env  map[string]string
		want Action
	}{
		{"apt-get update", map[string]string{"LANG": "C.UTF-8", "LC_TIME": "de_DE.UTF-8"}, ActionAllow},
		{"apt-get update", nil, ActionAllow},
		{"apt-get install -y nginx", map[string]string{"DEBIAN_FRONTEND": "noninteractive"}, ActionAllow},
		{"apt-get install -y nginx", nil, ActionAllow},
		{"systemctl status nginx", nil, ActionAllow},
		{"systemctl status nginx", map[string]string{"LANG": "C"}, ActionAsk},
		{"apt-get update", map[string]string{"DEBIAN_FRONTEND": "noninteractive"}, ActionAsk},
		{"apt-get install -y nginx", map[string]string{"DEBIAN_FRONTEND": "readline"}, ActionAsk},
		{"apt-get install -y nginx", map[string]string{"LANG": "C"}, ActionAsk},
		{"date", map[string]string{"TZ": "UTC"}, ActionAllow},
		{"date", map[string]string{"TZ": "Europe/Berlin"}, ActionAllow},
		{"date", nil, ActionAllow},
		{"date", map[string]string{"TZ": "Asia/Tokyo"}, ActionAsk},
		{"date", map[string]string{"TZ": "UTC", "LANG": "C"}, ActionAsk},
		{"systemctl status -H", nil, ActionAsk},
	} {
		if m := env.Evaluate(Subject{Privileged: true, Stages: stages(tc.cmd), Env: tc.env}); m.Action != tc.want {
			t.Errorf("Environment example: %s with %v = %v, want %v", tc.cmd, tc.env, m.Action, tc.want)
		}
	}

	// The Globs section's words about "." and "..".
	globs := mustParse(t, "allow privileged chown svc /srv/pub/*\nallow privileged chown svc /srv/pub/*/*\nallow unprivileged ls ..\nallow unprivileged ls ...\n")
	for _, tc := range []struct {
		cmd  string
		want Action
	}{
		{"chown svc /srv/pub/file", ActionAllow},
		{"chown svc /srv/pub/..", ActionAsk},
		{"chown svc /srv/pub/.", ActionAsk},
		{"chown svc /srv/pub//x", ActionAsk},
		{"chown svc /srv/pub/./x", ActionAsk},
		{"chown svc /srv/pub/link/..", ActionAsk},
		{"chown svc /srv/pub/../../etc/shadow", ActionAsk},
	} {
		if m := globs.Evaluate(Subject{Privileged: true, Stages: stages(tc.cmd)}); m.Action != tc.want {
			t.Errorf("%s = %v, want %v", tc.cmd, m.Action, tc.want)
		}
	}
	for _, cmd := range []string{"ls ..", "ls ../x"} {
		if m := globs.Evaluate(Subject{Stages: stages(cmd)}); m.Action != ActionAllow {
			t.Errorf("unprivileged %s = %v, want allow", cmd, m.Action)
		}
	}

	// The order example: deny above allow.
	order := mustParse(t, "deny  unprivileged  git push ...\nallow unprivileged  git ...\n")
	if m := order.Evaluate(Subject{Stages: stages("git push origin")}); m.Action != ActionDeny {
		t.Errorf("git push origin = %v, want deny", m.Action)
	}
	if m := order.Evaluate(Subject{Stages: stages("git status")}); m.Action != ActionAllow {
		t.Errorf("git status = %v, want allow", m.Action)
	}

	// The table of errors: each example line gives its problem.
	_, table, ok := strings.Cut(doc, "| Problem | Example line |\n|---------|--------------|\n")
	if !ok {
		t.Fatal("docs/policy.md: the table of errors is gone")
	}
	table, _, _ = strings.Cut(table, "\n\n")
	rows := 0
	for row := range strings.Lines(table) {
		// A "|" in a cell is written "\|" for the Markdown table.
		cells := strings.Split(strings.ReplaceAll(strings.TrimSpace(row), `\|`, "|"), " | ")
		if len(cells) != 2 {
			t.Errorf("docs/policy.md: error row %q", row)
			continue
		}
		problem := strings.TrimSuffix(strings.TrimPrefix(cells[0], "| `"), "`")
		line := strings.TrimSuffix(strings.TrimSuffix(strings.TrimPrefix(cells[1], "`"), " |"), "`")
		rows++
		_, err := Parse("t", strings.NewReader(line))
		if want := "policy t:1: " + problem; err == nil || err.Error() != want {
			t.Errorf("docs/policy.md says %s gives %q; it gives %v", line, want, err)
		}
	}
	if rows < 10 {
		t.Errorf("docs/policy.md: %d error rows", rows)
	}
}

// TestDocPlaceholders holds the Placeholders section of docs/policy.md to
// the code: each policy block there is followed by a text block of
// decisions, "ACTION COMMAND [# WHY]", and each line is what the rules
// decide for that command run as root, with WHY among the reasons
// Explain gives. Every rule of the section admits at least one of the
// lines and refuses at least one for its own command, and the option
// injections the section is about are among the refused ones.
func TestDocPlaceholders(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Placeholders\n")
	if !ok {
		t.Fatal("docs/policy.md: the Placeholders section is gone")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	asked := map[string]bool{}
	blocks := 0
	for rest := section; ; {
		_, after, ok := strings.Cut(rest, "```policy\n")
		if !ok {
			break
		}
		rules, after, _ := strings.Cut(after, "```\n")
		between, after, ok := strings.Cut(after, "```text\n")
		if !ok || strings.Contains(between, "```") {
			t.Fatalf("policy block %q is not followed by its decisions", rules)
		}
		decisions, after, _ := strings.Cut(after, "```\n")
		rest = after
		blocks++
		p, err := Parse("docs/policy.md", strings.NewReader(rules))
		if err != nil {
			t.Fatalf("%v\n%s", err, rules)
		}
		admits, refuses := map[*Rule]bool{}, map[*Rule]bool{}
		for line := range strings.Lines(decisions) {
			req, why, hasWhy := strings.Cut(strings.TrimSpace(line), "  # ")
			fields := strings.Fields(req)
			if len(fields) < 2 || fields[0] != "allow" && fields[0] != "ask" {
				t.Errorf("decision line %q: want ACTION COMMAND [# WHY]", line)
				continue
			}
			cmd := strings.Join(fields[1:], " ")
			m, ex := p.Explain(Subject{Privileged: true, Stages: [][]string{fields[1:]}})
			if m.Action.String() != fields[0] {
				t.Errorf("docs/policy.md says %s: %s; the rules say %v", fields[0], cmd, m.Action)
				continue
			}
			if m.Action == ActionAllow {
				admits[m.Rule] = true
				if hasWhy {
					t.Errorf("decision line %q: an allowed request has no reason", line)
				}
				continue
			}
			asked[cmd] = true
			found := false
			for _, sk := range ex[0].Skipped {
				if !strings.HasPrefix(sk.Why, "command ") {
					refuses[sk.Rule] = true
				}
				found = found || sk.Why == strings.TrimSpace(why)
			}
			if hasWhy && !found {
				t.Errorf("docs/policy.md gives %s the reason %q; Explain gives %+v", cmd, why, ex[0].Skipped)
			}
		}
		for i := range p.Rules {
			r := &p.Rules[i]
			if !admits[r] || !refuses[r] {
				t.Errorf("example rule %q: a request it admits %v, one it refuses %v; want both", r.Text, admits[r], refuses[r])
			}
		}
	}
	if blocks == 0 {
		t.Fatal("the Placeholders section has no policy example")
	}
	for _, cmd := range []string{
		"journalctl -u nginx -n 500 --file=/etc/shadow",
		"journalctl -u -fu -n 5",
		"journalctl -u nginx -n 5000",
		"journalctl -u nginx -n -1",
		"journalctl -u nginx -n 0x10",
		"systemctl restart nginx --now",
	} {
		if !asked[cmd] {
			t.Errorf("the Placeholders section does not show that %q is asked about", cmd)
		}
	}
}

// TestDocRunAs holds the Run-as accounts section of docs/policy.md to the
// code: its policy block is followed by a text block of decisions,
// "ACTION ACCOUNT[:GROUP] COMMAND", each what the rules decide for that
// command run as that account (root: no account named) and group.
func TestDocRunAs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "policy.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Run-as accounts\n")
	if !ok {
		t.Fatal("docs/policy.md: the Run-as accounts section is gone")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	_, after, ok := strings.Cut(section, "```policy\n")
	if !ok {
		t.Fatal("the Run-as accounts section has no policy example")
	}
	rules, after, _ := strings.Cut(after, "```\n")
	_, after, ok = strings.Cut(after, "```text\n")
	if !ok {
		t.Fatal("the Run-as accounts example is not followed by its decisions")
	}
	decisions, _, _ := strings.Cut(after, "```\n")
	p := mustParse(t, rules)
	seen := map[string]bool{}
	for line := range strings.Lines(decisions) {
		f := strings.Fields(line)
		if len(f) < 3 {
			t.Errorf("decision line %q: want ACTION ACCOUNT[:GROUP] COMMAND", line)
			continue
		}
		account, group, _ := strings.Cut(f[1], ":")
		if account == "root" {
			account = ""
		}
		m := p.Evaluate(Subject{Privileged: true, RunAs: account, RunGroup: group, Stages: [][]string{f[2:]}})
		if m.Action.String() != f[0] {
			t.Errorf("docs/policy.md says %s for %s as %s; the rules say %v", f[0], strings.Join(f[2:], " "), f[1], m.Action)
		}
		seen[f[0]+" "+f[1]] = true
	}
	// The claims the section makes: a runas rule admits its account and
	// not root; a rule for root admits no account; deny covers accounts.
	for _, want := range []string{"allow postgres", "ask root", "ask www-data", "allow root", "ask postgres", "deny postgres", "allow postgres:backup", "ask postgres:backup"} {
		if !seen[want] {
			t.Errorf("the Run-as accounts decisions lack a line %q", want)
		}
	}
}
