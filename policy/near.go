package policy

import (
	"slices"
	"strings"
)

// NearMiss is an allow rule that would have allowed a stage of a request
// but for one difference: one argument, or the env.
type NearMiss struct {
	Rule  *Rule
	Stage int    // the stage's index
	Why   string // the one difference, e.g. `argument 2 "x" does not match "[a-z]*"`
}

// NearMisses returns, for each stage of s that no allow rule matches, the
// first allow rule that would match it but for exactly one argument or
// but for the env (its scope, qualifiers and command matching), so an
// operator asked about s learns which rule almost covered it. A stage a
// rule denies or allows has none.
func (p *Policy) NearMisses(s Subject) []NearMiss {
	if p == nil {
		return nil
	}
	var out []NearMiss
	for i, argv := range s.Stages {
		resolved := s.path(i)
		if d := p.decideStage(&s, argv, resolved); d.rule != nil && d.action != ActionAsk {
			continue
		}
		for j := range p.Rules {
			if why := p.Rules[j].nearMiss(&s, argv, resolved); why != "" {
				out = append(out, NearMiss{Rule: &p.Rules[j], Stage: i, Why: why})
				break
			}
		}
	}
	return out
}

// nearMiss returns the one difference that keeps the allow rule r from
// matching the stage argv of s, or "" when it matches or more differs.
func (r *Rule) nearMiss(s *Subject, argv []string, resolved string) string {
	if r.Action != ActionAllow || len(argv) == 0 || r.matches(s, argv, resolved) {
		return ""
	}
	noEnv := *s
	noEnv.Env = nil
	// Scope and qualifiers: r without its pattern.
	bare := *r
	bare.words, bare.places, bare.rest = nil, nil, false
	if !bare.matches(&noEnv, argv, resolved) {
		return ""
	}
	envOK := r.admitsEnv(s.Env)
	if r.matches(&noEnv, argv, resolved) {
		if envOK {
			return ""
		}
		return r.envNearMiss(s.Env)
	}
	if !envOK {
		return ""
	}
	return r.argNearMiss(argv, resolved)
}

// envNearMiss names, in order, the keys of env that r does not admit.
func (r *Rule) envNearMiss(env map[string]string) string {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var not []string
	for _, k := range keys {
		if !r.admitsEnv(map[string]string{k: env[k]}) {
			not = append(not, k)
		}
	}
	return "the env: the rule does not admit " + strings.Join(not, ", ")
}

// argNearMiss returns the one argument of the stage argv that r's pattern
// does not match, when its command and number of words do, or "".
func (r *Rule) argNearMiss(argv []string, resolved string) string {
	if len(r.words) == 0 {
		return ""
	}
	named := !strings.Contains(argv[0], "/") && wordMatch(r.words[0], argv[0])
	if !named && (resolved == "" || !wordMatch(r.words[0], resolved)) {
		return ""
	}
	if len(argv) < len(r.words) || !r.rest && len(argv) != len(r.words) {
		return ""
	}
	why := ""
	for i := 1; i < len(r.words); i++ {
		if w := r.argWhyNot(i, argv[i], true); w != "" {
			if why != "" {
				return "" // two arguments differ
			}
			why = w
		}
	}
	return why
}
