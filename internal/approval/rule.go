package approval

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/policy"
)

// Saving a policy rule from the prompt (docs/policy.md, "Saving a rule
// from the prompt"): the rule a prompt offers, and the checks the
// approver's screen and the daemon both apply to the rule a person
// confirmed.

// RuleDropIn is the drop-in file, in the policy's drop-in directory,
// that rules saved from the prompt are appended to.
const RuleDropIn = "approved" + policy.DropInSuffix

// RuleSubject is the request p as the policy matches it, as the daemon
// gives it to the policy: a named account of uid 0 is root (no run_as).
func RuleSubject(p *Prompt) policy.Subject {
	s := policy.Subject{Privileged: p.Privileged, User: p.Requester.User, Session: p.Session, Host: p.Host, Env: p.Env, Cwd: p.Cwd}
	if len(p.Stdin) > 0 {
		s.StdinSHA256 = policy.StdinSHA256(p.Stdin)
	}
	if p.Named != nil {
		if p.Named.UID != 0 {
			s.RunAs = p.RunAs
		}
		s.RunGroup = p.Named.Group
	}
	for _, st := range p.Stages {
		s.Stages = append(s.Stages, st.Argv)
		s.Paths = append(s.Paths, st.Path)
	}
	return s
}

// Ruleable reports why no rule can be saved for p, or "".
func Ruleable(p *Prompt) string {
	switch {
	case p.ForwardAgent:
		return "a request that forwards an SSH agent is always put to a person"
	case p.ApproverPower != "":
		return ApproverPowerWhy(p)
	case len(p.Stages) != 1:
		return "a rule is about one command, and this request is a pipeline"
	}
	return ""
}

// SuggestRule returns the text of the allow rule that admits exactly p's
// request ([policy.RuleFor]), or an error saying why none is offered.
func SuggestRule(p *Prompt) (string, error) {
	if why := Ruleable(p); why != "" {
		return "", errors.New(why)
	}
	return policy.RuleFor(RuleSubject(p))
}

// CheckRule parses text as the rule a person confirmed for p and returns
// it, or an error saying why it cannot be saved: it must be exactly one
// allow rule, name its command in plain text, and match p's request (a
// rule saved from a prompt that did not cover the request shown would be
// a surprise). The daemon checks again what the approver's screen
// checked: it never takes the screen's word.
func CheckRule(p *Prompt, text string) (*policy.Rule, error) {
	if why := Ruleable(p); why != "" {
		return nil, errors.New(why)
	}
	r, err := policy.ParseRule(text)
	switch {
	case err != nil:
		return nil, fmt.Errorf("the rule does not parse: %w", err)
	case r.Action != policy.ActionAllow:
		return nil, fmt.Errorf("the rule is not an allow rule (it says %s): only allow rules are saved from the prompt", r.Action)
	case !r.NamesCommand():
		return nil, errors.New("the rule must name its command in plain text (no glob): write other rules in the policy file")
	}
	s := RuleSubject(p)
	if why := r.WhyNot(s); why != "" {
		return nil, fmt.Errorf("the rule does not match the request shown (%s): a rule saved from here must cover it", why)
	}
	if why := r.BroaderThanShown(s); why != "" {
		return nil, fmt.Errorf("the rule is broader than the request shown (%s): a rule saved from here binds the directory and the input shown", why)
	}
	return r, nil
}

// RuleRunsAnything lists why saving r for p needs a second confirmation:
// the request runs a shell, an interpreter or a command runner
// ([RunsAnything]). Any rule for one does, open ([policy.Rule.Open]) or
// not: a rule from the prompt binds the stdin and the directory shown
// (cwd=, stdin=), but not the files such a program reads its code from,
// which may say anything by the time the rule is used (`allow
// privileged,cwd=/srv/app,stdin=none make`, whatever the Makefile there
// says then). Empty when it needs none.
//
// find, tar and the others of runsWith run commands only with an option
// the request may not have shown, but an open rule admits them
// (find /var/log ... admits -exec).
func RuleRunsAnything(p *Prompt, r *policy.Rule) []string {
	why := RunsAnything(p)
	if len(why) == 0 && r.Open() && len(p.Stages) == 1 {
		if name, opts := runnerOptions(p.Stages[0]); name != "" {
			why = append(why, fmt.Sprintf("stage [1] is %s, and the rule admits its options that run a command (%s)", name, strings.Join(opts, ", ")))
		}
	}
	return why
}

// RenderRule describes, in full, the rule text a person is about to save
// for p into file. The text is plain, like [Render].
func RenderRule(p *Prompt, text, file string) string {
	var b strings.Builder
	b.WriteString("SAVE A POLICY RULE\n")
	b.WriteString("  Approves this request now, and appends this rule to\n")
	fmt.Fprintf(&b, "  %s, where it takes effect at once:\n", termsafe.Quote(file))
	b.WriteString("\n")
	fmt.Fprintf(&b, "    %s\n", termsafe.Sanitize(text))
	b.WriteString("\n")
	fmt.Fprintf(&b, "  Every request it matches runs from then on without asking anyone, from any\n")
	b.WriteString("  requester its user= qualifier admits, with the stdin (none, or the bytes\n")
	b.WriteString("  shown) and in the directory its stdin= and cwd= name, and with whatever\n")
	b.WriteString("  file its command names, and its files hold, at that time.\n")
	b.WriteString("  A stricter rule anywhere in the policy (ask or deny) that matches this request\n")
	b.WriteString("  keeps deciding it: then the rule is taken out again and you are told.\n")
	b.WriteString("  Remove it by editing the file and reloading (systemctl reload rootgate).\n")
	return b.String()
}
