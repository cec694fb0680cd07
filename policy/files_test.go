package policy

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestLoadFilesNoPath: an empty path is a policy without a file, from
// any working directory: one another user owns (a checkout in a user's
// home, where the tests run through sudo) is not checked as the place
// of a missing file, and a .d directory there is not read as drop-ins.
func TestLoadFilesNoPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, ".d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".d", "x"+DropInSuffix), []byte("allow any echo ...\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	for _, opts := range []LoadOptions{{Trusted: true}, {}} {
		p, err := LoadFiles("", opts)
		if err != nil {
			t.Fatalf("LoadFiles(\"\", %+v): %v", opts, err)
		}
		if n := len(p.Rules); n != 0 || len(p.Files()) != 0 {
			t.Errorf("LoadFiles(\"\", %+v): %d rules from %q, want none", opts, n, p.Files())
		}
	}
}

// TestLoadFilesOrder: the main file's rules come first, then each
// drop-in's in byte order of the names; other names are skipped; each
// rule keeps its file and line, and the first match wins across files.
func TestLoadFilesOrder(t *testing.T) {
	dir := t.TempDir()
	main := filepath.Join(dir, "policy")
	files := map[string]string{
		"policy":                   "ask any echo main\n",
		"policy.d/b.policy":        "\nallow any echo ...\n",
		"policy.d/A.policy":        "deny any echo a\n",
		"policy.d/a.policy.bak":    "not a rule\n",
		"policy.d/.hidden.policy":  "not a rule\n",
		"policy.d/c.policy~":       "not a rule\n",
		"policy.d/10-first.policy": "deny any echo first\n",
	}
	if err := os.Mkdir(Dir(main), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p, err := LoadFiles(main, LoadOptions{Trusted: true})
	if err != nil {
		t.Fatal(err)
	}
	d := Dir(main)
	wantFiles := []string{main, d + "/10-first.policy", d + "/A.policy", d + "/b.policy"}
	if !slices.Equal(p.Files(), wantFiles) {
		t.Errorf("Files() = %q, want %q", p.Files(), wantFiles)
	}
	var got []string
	for _, r := range p.Rules {
		got = append(got, filepath.Base(r.File)+":"+r.Text)
	}
	want := []string{"policy:ask any echo main", "10-first.policy:deny any echo first", "A.policy:deny any echo a", "b.policy:allow any echo ..."}
	if !slices.Equal(got, want) {
		t.Errorf("rules %q, want %q", got, want)
	}
	if r := p.Rules[3]; r.Line != 2 {
		t.Errorf("b.policy's rule at line %d, want 2", r.Line)
	}
	for argv, want := range map[string]Action{"main": ActionAsk, "first": ActionDeny, "a": ActionDeny, "other": ActionAllow} {
		if m := p.Evaluate(Subject{Stages: [][]string{{"echo", argv}}}); m.Action != want {
			t.Errorf("echo %s: %v, want %v", argv, m.Action, want)
		}
	}
}

// TestExplainAgreesWithEvaluate: Explain gives the decision Evaluate
// gives, and for each stage the rule decideStage finds, every rule once:
// that rule, the others that match as overridden, and the rest with a
// reason.
func TestExplainAgreesWithEvaluate(t *testing.T) {
	p := mustParse(t, examplePolicy+"allow privileged,user=alice,env=LANG ls ...\nask any,host=h* cat\n")
	subjects := []Subject{
		{Privileged: true, Stages: [][]string{{"rm", "-rf", "/"}}},
		{Privileged: true, Stages: [][]string{{"ls", "-l"}, {"wc"}}, Paths: []string{"/usr/bin/ls", "/usr/bin/wc"}},
		{Privileged: true, User: "alice", Env: map[string]string{"LANG": "C"}, Stages: [][]string{{"ls"}}},
		{Privileged: true, User: "alice", Env: map[string]string{"TZ": "UTC"}, Stages: [][]string{{"ls"}}},
		{Host: "hx", Stages: [][]string{{"cat"}, {"/usr/bin/cat", "x"}}},
		{Stages: [][]string{{"systemctl", "status", "nginx"}}},
		{},
	}
	for _, s := range subjects {
		m, why := p.Explain(s)
		if want := p.Evaluate(s); m != want {
			t.Errorf("%+v: Explain %+v, Evaluate %+v", s, m, want)
		}
		if len(why) != len(s.Stages) {
			t.Fatalf("%+v: %d stage explanations", s, len(why))
		}
		for i, e := range why {
			path := ""
			if i < len(s.Paths) {
				path = s.Paths[i]
			}
			if d := p.decideStage(&s, s.Stages[i], path); d.rule != e.Rule || d.action != e.Action {
				t.Errorf("%+v stage %d: rule %v, decideStage %v", s, i, e.Rule, d.rule)
			}
			n := len(e.Skipped) + len(e.Overridden)
			if e.Rule != nil {
				n++
			}
			if n != len(p.Rules) {
				t.Errorf("%+v stage %d: %d rules explained, want %d", s, i, n, len(p.Rules))
			}
			for _, r := range e.Overridden {
				if !r.matches(&s, s.Stages[i], path) || strictness(r.Action) > strictness(e.Action) {
					t.Errorf("%+v stage %d: rule %q overridden by %v", s, i, r.Text, e.Rule)
				}
			}
			for _, sk := range e.Skipped {
				if sk.Why == "" {
					t.Errorf("%+v stage %d: rule %q skipped without a reason", s, i, sk.Rule.Text)
				}
			}
		}
	}
}
