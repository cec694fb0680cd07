package policy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Writing rules: the text of a rule that admits exactly one request, as
// the approval prompt offers to save it, and the checks a rule saved from
// a prompt must pass (docs/policy.md, "Saving a rule from the prompt").

// globMeta are the characters a pattern word must escape to mean
// themselves: path.Match's own, and "{", which starts a placeholder.
const globMeta = `*?[\{`

// escapeGlob returns s with each character of globMeta escaped by a
// backslash, so that it matches s alone.
func escapeGlob(s string) string {
	if !strings.ContainsAny(s, globMeta) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if strings.IndexByte(globMeta, s[i]) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// quoteRuleWord writes the text t as one word of a rule line: as it is
// when it can stand alone, else in double quotes with '"' and '\'
// escaped. A word that is empty, holds a blank or a '"', starts with "#"
// or is "..." (which would mean any further arguments) is quoted.
func quoteRuleWord(t string) string {
	if t != "" && t != restWord && !strings.HasPrefix(t, "#") && !strings.ContainsAny(t, " \t\r\"") {
		return t
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(t) + `"`
}

// QuoteWord returns the pattern word that matches the argument (or
// command) w and nothing else. ok is false when no word can: w holds a
// character a glob must escape and is not a clean path (a glob never
// matches "..", "./x" or "a//b", see docs/policy.md).
func QuoteWord(w string) (word string, ok bool) {
	g := escapeGlob(w)
	if g != w && !cleanPath(w) {
		return "", false
	}
	return quoteRuleWord(g), true
}

// stdinWord is the stdin= value admitting the stdin of hash sum only.
func stdinWord(sum string) string {
	if sum == "" {
		return "none"
	}
	return "sha256:" + sum
}

// RuleFor returns the text of an allow rule that admits the request s
// and, as near as the grammar can say, nothing else: its scope
// (privileged or unprivileged), the account and group it runs as when it
// names them, the requester's user name, its cwd and its stdin (none, or
// the SHA-256 of the bytes shown), each env key
// with its value, and the stage's command and every argument as literal
// words. The command is written as the request wrote it when that is a
// bare name (looked up in the daemon's fixed path), else as the path it
// resolved to. s must have exactly one stage: a rule is about one stage.
// The error says why no such rule can be written (e.g. an env value with
// a comma, which a qualifier cannot hold).
func RuleFor(s Subject) (string, error) {
	if len(s.Stages) != 1 || len(s.Stages[0]) == 0 {
		return "", errors.New("a rule is about one command: the request is a pipeline")
	}
	quals, err := qualifiersFor(s)
	if err != nil {
		return "", err
	}
	pattern, err := patternFor(s)
	if err != nil {
		return "", err
	}
	words := append([]string{"allow", quoteRuleWord(strings.Join(quals, ","))}, pattern...)
	text := strings.Join(words, " ")
	r, err := ParseRule(text)
	if err != nil {
		return "", fmt.Errorf("the request cannot be written as a rule: %w", err)
	}
	if why := r.WhyNot(s); why != "" {
		return "", fmt.Errorf("the request cannot be written as a rule: %s", why)
	}
	return text, nil
}

// qualifiersFor returns RuleFor's scope and qualifiers for s, in the
// order they are written.
func qualifiersFor(s Subject) ([]string, error) {
	scope := "unprivileged"
	if s.Privileged {
		scope = "privileged"
	}
	quals := []string{scope}
	for _, q := range []struct{ key, name string }{{"runas", s.RunAs}, {"rungroup", s.RunGroup}} {
		if q.name == "" || (q.key == "runas" && q.name == "root") {
			continue
		}
		if strings.Contains(q.name, ",") {
			return nil, fmt.Errorf("the %s name holds a comma, which a qualifier cannot", q.key)
		}
		quals = append(quals, q.key+"="+escapeGlob(q.name))
	}
	if s.User != "" {
		if strings.Contains(s.User, ",") {
			return nil, errors.New("the requester's user name holds a comma, which a qualifier cannot")
		}
		quals = append(quals, "user="+escapeGlob(s.User))
	}
	// The cwd and stdin shown: a rule from the prompt admits no other
	// directory (whose files a program may run) and no other input (the
	// script a shell reads).
	if s.Cwd == "" || strings.Contains(s.Cwd, ",") {
		return nil, errors.New("the request's cwd is not known, or holds a comma, which a qualifier cannot")
	}
	if escapeGlob(s.Cwd) != s.Cwd && !cleanPath(s.Cwd) {
		return nil, errors.New("the request's cwd cannot be written as a word that matches it alone")
	}
	quals = append(quals, "cwd="+escapeGlob(s.Cwd), "stdin="+stdinWord(s.StdinSHA256))
	env, err := envQualifiersFor(s.Env)
	if err != nil {
		return nil, err
	}
	return append(quals, env...), nil
}

// envQualifiersFor returns an env=KEY=VALUE qualifier for each pair of
// env, by key.
func envQualifiersFor(env map[string]string) ([]string, error) {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var quals []string
	for _, k := range keys {
		v := env[k]
		if strings.Contains(k, ",") || strings.Contains(v, ",") {
			return nil, fmt.Errorf("env %s holds a comma, which a qualifier cannot", k)
		}
		quals = append(quals, "env="+escapeGlob(k)+"="+escapeGlob(v))
	}
	return quals, nil
}

// patternFor returns RuleFor's pattern for the one stage of s: its
// command and every argument as literal words.
func patternFor(s Subject) ([]string, error) {
	argv := s.Stages[0]
	cmd := argv[0]
	if strings.Contains(cmd, "/") {
		if len(s.Paths) == 0 || s.Paths[0] == "" {
			return nil, errors.New("the command's path is not known")
		}
		cmd = s.Paths[0]
	}
	var words []string
	for i, a := range append([]string{cmd}, argv[1:]...) {
		w, ok := QuoteWord(a)
		if !ok {
			return nil, fmt.Errorf("argument %d cannot be written as a word that matches it alone", i)
		}
		words = append(words, w)
	}
	return words, nil
}

// ParseRule parses text as one line of a policy file that holds exactly
// one rule (a comment after it is dropped from its Text). The error says
// what is wrong, as [Parse] would for the line.
func ParseRule(text string) (*Rule, error) {
	if strings.ContainsAny(text, "\n") {
		return nil, errors.New("a rule is one line")
	}
	p, err := Parse("rule", strings.NewReader(text))
	if err != nil {
		var pe *ParseError
		if errors.As(err, &pe) {
			return nil, pe.Err
		}
		return nil, err
	}
	if len(p.Rules) != 1 {
		return nil, errors.New("no rule: the text is blank or a comment")
	}
	r := p.Rules[0]
	r.File, r.Line = "", 0
	return &r, nil
}

// WhyNot returns why r does not match every stage of the request s, or
// "" when it matches them all.
func (r *Rule) WhyNot(s Subject) string {
	if len(s.Stages) == 0 {
		return "the request has no stages"
	}
	for i, argv := range s.Stages {
		resolved := ""
		if i < len(s.Paths) {
			resolved = s.Paths[i]
		}
		if why := r.whyNot(&s, argv, resolved, true); why != "" {
			if len(s.Stages) > 1 {
				return fmt.Sprintf("stage %d: %s", i+1, why)
			}
			return why
		}
	}
	return ""
}

// BroaderThanShown returns why r, a rule saved from the prompt that showed
// the request s, admits a cwd or a stdin other than those shown, or "":
// it must say cwd= with the shown directory as plain text and stdin= with
// none or the very bytes shown. A rule for a shell or a build tool binds
// its code that way, as far as the request shows it.
func (r *Rule) BroaderThanShown(s Subject) string {
	switch {
	case r.cwd == "":
		return "it says no cwd=, so it admits any directory"
	case hasGlob(r.cwd) || r.cwd != escapeGlob(s.Cwd):
		return fmt.Sprintf("cwd=%s admits another directory than the one shown (%s)", r.cwd, s.Cwd)
	case r.stdin == "":
		return "it says no stdin=, so it admits any input"
	case r.stdin != stdinWord(s.StdinSHA256) && "sha256:"+r.stdin != stdinWord(s.StdinSHA256):
		return "its stdin= admits other input than the one shown"
	}
	return ""
}

// NamesCommand reports whether r's pattern names its command as plain
// text: it has a pattern and its first word holds no glob character. A
// rule saved from a prompt must (a rule for every command, or for a
// glob of commands, is written in the policy file by hand).
func (r *Rule) NamesCommand() bool {
	return len(r.words) > 0 && !hasGlob(r.words[0])
}

// Open reports whether r admits arguments other than the ones it spells
// out: its pattern ends in "...", or an argument word is a glob or a
// placeholder.
func (r *Rule) Open() bool {
	if r.rest || len(r.words) == 0 {
		return true
	}
	for i, w := range r.words[1:] {
		if i+1 < len(r.places) && r.places[i+1].kind != phNone || hasGlob(w) {
			return true
		}
	}
	return false
}

// hasGlob reports whether the glob w holds a "*", "?" or "[" that a
// backslash does not escape.
func hasGlob(w string) bool {
	for i := 0; i < len(w); i++ {
		switch w[i] {
		case '\\':
			i++
		case '*', '?', '[':
			return true
		}
	}
	return false
}
