package policy

import (
	"fmt"
	"strings"
)

// Explaining a decision: what `rootgate policy test` prints, and what any
// other caller that must show why a policy decided as it did can reuse.

// StageExplanation says how a policy decided about one stage of a request.
type StageExplanation struct {
	Argv   []string
	Path   string // the resolved executable, "" if not known
	Action Action
	// Rule is the rule that decided the stage: the first, in file order,
	// of the strictest action among the rules matching it; nil when none
	// did (the stage is then asked about).
	Rule *Rule
	// Overridden are the other rules that match the stage, in file
	// order: a stricter rule, or an earlier one of the same action,
	// decides instead of them.
	Overridden []*Rule
	// Skipped are the rules that do not match the stage, each with why.
	Skipped []Skipped
}

// Skipped is a rule that did not match a stage, and why.
type Skipped struct {
	Rule *Rule
	Why  string // e.g. "scope privileged: the request is unprivileged"
}

// Explain evaluates s as [Policy.Evaluate] does and returns the same
// [Match] along with, for each stage, the rule that decided it, the other
// rules that match it, and why each other rule does not.
func (p *Policy) Explain(s Subject) (Match, []StageExplanation) {
	m := p.Evaluate(s)
	var out []StageExplanation
	for i, argv := range s.Stages {
		e := StageExplanation{Argv: argv, Path: s.path(i)}
		if p != nil {
			d := p.decideStage(&s, argv, e.Path)
			e.Rule, e.Action = d.rule, d.action
			for j := range p.Rules {
				r := &p.Rules[j]
				why := r.whyNot(&s, argv, e.Path, true)
				switch {
				case why != "":
					e.Skipped = append(e.Skipped, Skipped{Rule: r, Why: why})
				case r != d.rule:
					e.Overridden = append(e.Overridden, r)
				}
			}
		}
		out = append(out, e)
	}
	return m, out
}

// no is whyNot's answer when it is not asked to explain.
const no = "no"

// whyNot returns why r does not match the stage argv (resolved to the
// executable resolved) of s, or "" when it does. Without explain the why
// is only "no": a request is matched against every rule, and explaining
// would copy and quote its (requester-sized) arguments for each.
func (r *Rule) whyNot(s *Subject, argv []string, resolved string, explain bool) string {
	if why := r.scopeWhyNot(s); why != "" {
		return why
	}
	if why := r.identityWhyNot(s, explain); why != "" {
		return why
	}
	if why := r.runAsWhyNot(s, explain); why != "" {
		return why
	}
	if why := r.cwdWhyNot(s, explain); why != "" {
		return why
	}
	if why := r.stdinWhyNot(s, explain); why != "" {
		return why
	}
	if why := r.envWhyNot(s, explain); why != "" {
		return why
	}
	return r.patternWhyNot(argv, resolved, explain)
}

// scopeWhyNot returns why r's scope does not match s, or "".
func (r *Rule) scopeWhyNot(s *Subject) string {
	switch r.scope {
	case scopePrivileged:
		if !s.Privileged {
			return "scope privileged: the request is unprivileged"
		}
	case scopeUnprivileged:
		if s.Privileged {
			return "scope unprivileged: the request is privileged"
		}
	case scopeAny:
	default:
		return "no scope"
	}
	return ""
}

// identityWhyNot returns why r's user=, session= or host= qualifier does
// not match s, or "".
func (r *Rule) identityWhyNot(s *Subject, explain bool) string {
	for _, q := range []struct{ name, glob, value string }{
		{"user", r.user, s.User},
		{"session", r.session, s.Session},
		{"host", r.host, s.Host},
	} {
		if q.glob != "" && !globMatch(q.glob, q.value) {
			if !explain {
				return no
			}
			return fmt.Sprintf("%s=%s: the request's %s is %q", q.name, q.glob, q.name, q.value)
		}
	}
	return ""
}

// cwdWhyNot returns why r's cwd= qualifier does not match s, or "".
func (r *Rule) cwdWhyNot(s *Subject, explain bool) string {
	if r.cwd != "" && !wordMatch(r.cwd, s.Cwd) {
		if !explain {
			return no
		}
		return fmt.Sprintf("cwd=%s: the request's cwd is %q", r.cwd, s.Cwd)
	}
	return ""
}

// stdinWhyNot returns why r's stdin= qualifier does not match s, or "".
func (r *Rule) stdinWhyNot(s *Subject, explain bool) string {
	switch {
	case r.stdin == "" || r.stdin == "none" && s.StdinSHA256 == "" || r.stdin == s.StdinSHA256:
		return ""
	case !explain:
		return no
	case s.StdinSHA256 == "":
		return "stdin=sha256:…: the request has no stdin"
	case r.stdin == "none":
		return "stdin=none: the request has stdin"
	default:
		return "stdin=sha256:…: the request's stdin is other bytes"
	}
}

// envWhyNot returns why r does not admit the env of s, or "". An allow
// rule covers only the env it names: a root program may read an env
// value as code or as a file to load.
func (r *Rule) envWhyNot(s *Subject, explain bool) string {
	if r.Action != ActionAllow || r.admitsEnv(s.Env) {
		return ""
	}
	if !explain {
		return no
	}
	for k := range s.Env {
		if !r.admitsEnv(map[string]string{k: s.Env[k]}) {
			return fmt.Sprintf("env: the rule does not admit %s", k)
		}
	}
	return ""
}

// patternWhyNot returns why r's pattern does not match the stage argv
// (resolved to the executable resolved), or "".
func (r *Rule) patternWhyNot(argv []string, resolved string, explain bool) string {
	if len(r.words) == 0 {
		// No pattern, or "..." alone: every stage.
		return ""
	}
	if len(argv) == 0 {
		return "the stage is empty"
	}
	if why := r.commandWhyNot(argv[0], resolved, explain); why != "" {
		return why
	}
	if len(argv) < len(r.words) || !r.rest && len(argv) != len(r.words) {
		if !explain {
			return no
		}
		more := ""
		if r.rest {
			more = " or more"
		}
		return fmt.Sprintf("the pattern takes %d word(s)%s, the stage has %d", len(r.words), more, len(argv))
	}
	for i := 1; i < len(r.words); i++ {
		if why := r.argWhyNot(i, argv[i], explain); why != "" {
			return why
		}
	}
	return ""
}

// commandWhyNot returns why the first word of r's pattern does not match
// the command cmd (resolved to the executable resolved), or "".
func (r *Rule) commandWhyNot(cmd, resolved string, explain bool) string {
	// The command as written counts only when it is a bare name: those are
	// looked up in the daemon's fixed path. A written path with a '/' is
	// matched by what it resolved to, since a relative one leads wherever
	// the requester's cwd says.
	bare := !strings.Contains(cmd, "/")
	if (bare && wordMatch(r.words[0], cmd)) || (resolved != "" && wordMatch(r.words[0], resolved)) {
		return ""
	}
	if !explain {
		return no
	}
	if resolved == "" {
		return fmt.Sprintf("command %q does not match %q", cmd, r.words[0])
	}
	return fmt.Sprintf("command %q (%s) does not match %q", cmd, resolved, r.words[0])
}

// runAsWhyNot returns why r does not match the account and group s runs
// with, or "". A runas= or rungroup= qualifier must match the account or
// group named (a run as root is the account "root"; a request naming no
// group matches no rungroup=). Without the qualifier an allow rule admits
// only root and no named group: a rule written before named accounts
// existed must not start to let requests run as any account. Deny and
// ask rules without it match whatever the account.
func (r *Rule) runAsWhyNot(s *Subject, explain bool) string {
	account := s.RunAs
	if account == "" {
		account = "root"
	}
	for _, q := range []struct{ name, glob, value, none string }{
		{"runas", r.runas, account, "root"},
		{"rungroup", r.rungroup, s.RunGroup, ""},
	} {
		// The reason is worded only when asked for: Evaluate calls this
		// for every rule, with the requester's words.
		switch {
		case q.glob != "" && (q.value == "" || !globMatch(q.glob, q.value)):
			switch {
			case !explain:
				return no
			case q.value == "":
				return fmt.Sprintf("%s=%s: the request names no group", q.name, q.glob)
			}
			return fmt.Sprintf("%s=%s: the request runs as %s %q", q.name, q.glob, accountKind(q.name), q.value)
		case q.glob == "" && r.Action == ActionAllow && q.value != q.none:
			if !explain {
				return no
			}
			return fmt.Sprintf("no %s=: an allow rule without it does not admit the %s %q the request names", q.name, accountKind(q.name), q.value)
		}
	}
	return ""
}

// accountKind is what the qualifier name compares: "account" or "group".
func accountKind(name string) string {
	if name == "rungroup" {
		return "group"
	}
	return "account"
}
