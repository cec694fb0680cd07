package daemon

import (
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/policy"
)

// A prompt's hint tells the operator which standing grant (held, or
// expired and still remembered) or policy allow rule would have covered
// a request nearly the same as the one asked about, and what differs, so
// they learn what to grant or which rule to widen. It never decides
// anything: a near miss is only words on the prompt.

// hintFor returns the hint for p's request at now: one or two lines, or
// "". pol is the policy the request is decided against, and na the allow
// rule of it that matched and does not decide, if one did.
func (s *Server) hintFor(p *runPlan, pol *policy.Policy, na *notApplied, now time.Time) string {
	var lines []string
	if h := s.grantHint(p, now); h != "" {
		lines = append(lines, h)
	}
	if na != nil {
		lines = append(lines, fmt.Sprintf("rule %s (%s) allows this command, but not the file that runs: %s", ruleSource(na.rule),
			termsafe.Sanitize(na.rule.Text), termsafe.Sanitize(na.why.Error())))
	} else if h := ruleHint(p, pol); h != "" {
		lines = append(lines, h)
	}
	return strings.Join(lines, "\n")
}

// grantHint names a grant of the requester's, held or expired, that is
// the same as p's request but for one thing, and that thing; or a held
// or expired grant for exactly this command that did not apply.
func (s *Server) grantHint(p *runPlan, now time.Time) string {
	gs := &s.grants
	gs.mu.Lock()
	cands := make([]grant, 0, len(gs.byID)+len(gs.expired))
	for _, g := range gs.byID {
		cands = append(cands, *g)
	}
	for i := len(gs.expired) - 1; i >= 0; i-- {
		cands = append(cands, *gs.expired[i])
	}
	gs.mu.Unlock()
	for _, g := range cands {
		if g.uid != p.peer.UID {
			continue
		}
		diff, ok := grantDiff(&g, p)
		if !ok {
			continue
		}
		state := "held until " + g.ends.Local().Format("15:04:05")
		if !now.Before(g.ends) {
			state = "ENDED at " + g.ends.Local().Format("15:04:05")
		}
		if diff == "" {
			// "Exactly" only when the whole shape is the grant's: the
			// requester chooses both requests, and what the diff does
			// not name (stdin's bytes, the files' identities) may be
			// what it changed.
			if g.shape == p.grantShape() && !now.Before(g.ends) {
				return fmt.Sprintf("grant %s (%s, given by %s) covered exactly this request", g.id, state, g.approver)
			}
			return fmt.Sprintf("grant %s (%s) has this command, but not all of this request: the file that runs, the directory or stdin is not the one granted", g.id, state)
		}
		return fmt.Sprintf("grant %s (%s, given by %s) would have covered it but for %s", g.id, state, g.approver, diff)
	}
	return ""
}

// grantDiff compares grant g with p's request: ok when they differ in at
// most one thing, and diff says what ("" when nothing it keeps differs).
// The resolved executables and each stage's argument count must be the
// same.
func grantDiff(g *grant, p *runPlan) (diff string, ok bool) {
	if len(g.stages) != len(p.stages) || g.runAs != p.account.Name || g.stdinSize != len(p.req.Stdin) {
		return "", false
	}
	var diffs []string
	for i, st := range p.stages {
		if g.stages[i].Path != st.Path || len(g.pipeline[i]) != len(st.Argv) {
			return "", false
		}
		for j, a := range st.Argv {
			if g.pipeline[i][j] != a {
				where := fmt.Sprintf("argument %d", j)
				if len(p.stages) > 1 {
					where += fmt.Sprintf(" of stage %d", i+1)
				}
				diffs = append(diffs, fmt.Sprintf("%s: granted %s, here %s", where, termsafe.Quote(clipText(g.pipeline[i][j])), termsafe.Quote(clipText(a))))
			}
		}
	}
	if g.cwd != p.cwd {
		diffs = append(diffs, fmt.Sprintf("the directory: granted %s, here %s", termsafe.Quote(clipText(g.cwd)), termsafe.Quote(clipText(p.cwd))))
	}
	if !maps.Equal(g.env, p.req.Env) {
		diffs = append(diffs, "the env")
	}
	if g.runAsGroup != p.namedGroup() {
		diffs = append(diffs, fmt.Sprintf("the group: granted %s, here %s", termsafe.Quote(g.runAsGroup), termsafe.Quote(p.namedGroup())))
	}
	if g.timeout != p.cmd.Timeout {
		diffs = append(diffs, fmt.Sprintf("the time limit: granted %s, here %s", approval.DisplaySeconds(g.timeout), approval.DisplaySeconds(p.cmd.Timeout)))
	}
	if len(diffs) > 1 {
		return "", false
	}
	if len(diffs) == 1 {
		return diffs[0], true
	}
	return "", true
}

// ruleHint names the first allow rule of pol that would have allowed a
// stage of p's request but for one argument or the env.
func ruleHint(p *runPlan, pol *policy.Policy) string {
	req := p.req
	nm := pol.NearMisses(p.subject(userNameOf(p.peer.UID)))
	if len(nm) == 0 {
		return ""
	}
	n := nm[0]
	stage := ""
	if len(req.Pipeline) > 1 {
		stage = fmt.Sprintf(" stage %d", n.Stage+1)
	}
	return fmt.Sprintf("rule %s (%s) would have allowed%s but for %s", ruleSource(n.Rule),
		termsafe.Sanitize(n.Rule.Text), stage, termsafe.Sanitize(n.Why))
}
