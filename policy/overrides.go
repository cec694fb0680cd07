package policy

import (
	"fmt"
	"strings"
)

// Rules that can never decide: the strictest matching rule decides, so a
// rule every request of which another, stricter rule matches too never
// gives its action. What `rootgate policy check` and the daemon's load
// warnings report.

// Override is a rule that can never decide anything because of another.
type Override struct {
	// Rule is the rule that never decides.
	Rule *Rule
	// By matches every request Rule matches, and decides them: it is
	// stricter (deny over ask over allow), or of the same action and
	// earlier, so it is the one reported.
	By *Rule
}

// String says it in a line: "FILE:LINE: RULE never decides: FILE:LINE: BY
// matches every request it matches and decides them (ACTION)".
func (o Override) String() string {
	return fmt.Sprintf("%s:%d: %s never decides anything: %s:%d: %s matches every request it matches and decides them (%s)",
		o.Rule.File, o.Rule.Line, o.Rule.Text, o.By.File, o.By.Line, o.By.Text, o.By.Action)
}

// Overrides returns, in file order, each rule that can never decide
// anything because another rule matches every request it matches and wins
// over it: a stricter one wherever it sits, or an earlier one of the same
// action. An allow rule with limits (memory=, tasks=) still limits a run
// another allow rule decides, so it is reported only under a stricter one.
//
// The check is syntactic and conservative: a rule is reported only when
// the other's scope, qualifiers and pattern cover its own word for word
// (the same text, "*", or a glob or placeholder matching its plain word),
// so every rule reported is dead, while a rule two others cover between
// them is not reported.
func (p *Policy) Overrides() []Override {
	if p == nil {
		return nil
	}
	var out []Override
	for i := range p.Rules {
		b := &p.Rules[i]
		for j := range p.Rules {
			a := &p.Rules[j]
			if i == j {
				continue
			}
			sa, sb := strictness(a.Action), strictness(b.Action)
			wins := sa > sb || sa == sb && j < i && (b.memory == 0 && b.tasks == 0)
			if wins && a.covers(b) {
				out = append(out, Override{Rule: b, By: a})
				break
			}
		}
	}
	return out
}

// covers reports whether a matches every stage of every request b
// matches, by their text.
func (a *Rule) covers(b *Rule) bool {
	return a.coversQualifiers(b) && a.coversPattern(b)
}

// coversQualifiers reports whether a's scope and qualifiers admit every
// request b's admit.
func (a *Rule) coversQualifiers(b *Rule) bool {
	if a.scope == scopeUnset || b.scope == scopeUnset {
		return false
	}
	if a.scope != scopeAny && a.scope != b.scope {
		return false
	}
	for _, q := range [][2]string{{a.user, b.user}, {a.session, b.session}, {a.host, b.host}} {
		if !globCovers(q[0], q[1]) {
			return false
		}
	}
	if !a.coversRunAs(b) || !a.coversEnv(b) {
		return false
	}
	if a.cwd != "" && a.cwd != b.cwd && (b.cwd == "" || strings.ContainsAny(b.cwd, `*?[\`) || !wordMatch(a.cwd, b.cwd)) {
		return false
	}
	return a.stdin == "" || a.stdin == b.stdin
}

// coversPattern reports whether a's pattern matches every stage b's
// pattern matches.
func (a *Rule) coversPattern(b *Rule) bool {
	if len(a.words) == 0 {
		return true
	}
	if len(b.words) == 0 {
		return false
	}
	if a.rest {
		if len(b.words) < len(a.words) {
			return false
		}
	} else if b.rest || len(b.words) != len(a.words) {
		return false
	}
	for i := range a.words {
		if !a.coversWord(b, i) {
			return false
		}
	}
	return true
}

// coversWord reports whether word i of a's pattern matches every word
// that word i of b's matches: the same glob or placeholder, or a plain
// word that a's matches.
func (a *Rule) coversWord(b *Rule, i int) bool {
	switch {
	case a.words[i] == b.words[i]:
		return true
	case !b.literalAt(i):
		return false
	case i == 0:
		return wordMatch(a.words[0], b.words[0])
	}
	return a.argWhyNot(i, b.words[i], false) == ""
}

// globCovers reports whether the qualifier glob a ("" for none) matches
// every value the qualifier glob b matches.
func globCovers(a, b string) bool {
	return a == "" || a == b || a == "*" && b != "" ||
		b != "" && !strings.ContainsAny(b, `*?[\`) && globMatch(a, b)
}

// coversRunAs compares the account and group qualifiers, with the default
// of each action: an allow rule without runas= admits root only, without
// rungroup= no named group; a deny or ask rule without them any.
func (a *Rule) coversRunAs(b *Rule) bool {
	for _, q := range []struct{ a, b, none string }{
		{a.runas, b.runas, "root"},
		{a.rungroup, b.rungroup, ""},
	} {
		switch {
		case q.a == q.b && (a.Action == ActionAllow) == (b.Action == ActionAllow):
		case q.a == "" && a.Action != ActionAllow:
			// Any account or group.
		case q.a == "":
			// a admits only the default.
			if b.Action != ActionAllow || q.b != "" && q.b != q.none {
				return false
			}
		case q.b == "" && b.Action == ActionAllow:
			// b admits only the default: root, or no group.
			if q.none == "" || !globMatch(q.a, q.none) {
				return false
			}
		case q.b == "":
			return false
		default:
			if !globCovers(q.a, q.b) {
				return false
			}
		}
	}
	return true
}

// coversEnv: a deny or ask rule matches whatever the env; an allow rule
// only the env its env= admit, which must admit all b admits.
func (a *Rule) coversEnv(b *Rule) bool {
	if a.Action != ActionAllow {
		return true
	}
	if b.Action != ActionAllow {
		// b matches whatever the env; a does only when it admits all.
		for _, e := range a.env {
			if e.key == "*" && !e.hasValue {
				return true
			}
		}
		return false
	}
	for _, be := range b.env {
		ok := false
		for _, ae := range a.env {
			if globCovers(ae.key, be.key) && (!ae.hasValue || be.hasValue && globCovers(ae.value, be.value)) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// literalAt reports whether word i of r matches one string only: itself.
func (r *Rule) literalAt(i int) bool {
	if i < len(r.places) && r.places[i].kind != phNone {
		return false
	}
	return !strings.ContainsAny(r.words[i], `*?[\`)
}
