package daemon

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/internal/rootpath"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/policy"
	"github.com/rootgate/rootgate/wire"
)

// A verdict is check 10's outcome for a planned request (judge): the
// decision, and what made it. The plan it is about stays as planned.
type verdict struct {
	d       approval.Decision
	rule    *policy.Rule     // the policy rule that decided, if one did
	ruleLim cgroup.Limits    // with rule allowing: the lowest limits of the rules that allowed the stages
	grant   *grant           // the standing grant that decided, if one did
	prompt  *approval.Prompt // what a person was shown, if one was asked
	// unrecorded: refused without a person past its uid's budget of
	// records for such requests (receiveUnasked); counted in a dropped
	// record.
	unrecorded bool
}

// A notApplied is an allow rule that matched a request but does not
// decide it, for the file that runs is not root's alone
// (othersMayChange) or the run may approve (approverPower), and why.
type notApplied struct {
	rule *policy.Rule
	why  error
}

// judge is check 10: the policy first, then a standing grant, then a
// person. The request is received (receive) once it is decided by the
// policy or a grant, or admitted to be put to a person; its error is
// then receive's when its record cannot be written.
func (r *request) judge() (verdict, error) {
	s, p, req, log := r.s, r.p, r.req, r.log
	userName := userNameOf(p.peer.UID)
	m, na := s.evaluate(r.pol, p, userName)
	switch m.Action {
	case policy.ActionDeny:
		recorded, err := r.receiveUnasked(s.cfg.Now())
		if err != nil {
			return verdict{}, err
		}
		denied := wire.DeniedByPolicyError(ruleSource(m.Rule), m.Rule.Text)
		return verdict{d: approval.Decision{Verdict: approval.Deny, Message: denied.Error(), Code: wire.CodeOf(denied), By: "policy " + ruleSource(m.Rule)},
			rule: m.Rule, unrecorded: !recorded}, nil
	case policy.ActionAllow:
		if req.ForwardAgent {
			// Lending the operator's SSH agent is the operator's call:
			// such a request is always put to a person.
			log.Info("allowed by policy, but forward_agent asks a person", "line", m.Rule.Line)
			break
		}
		if err := r.receive(); err != nil {
			return verdict{}, err
		}
		return verdict{d: approval.Decision{Verdict: approval.Allow, By: "policy " + ruleSource(m.Rule)},
			rule: m.Rule, ruleLim: cgroup.Limits{Memory: m.Memory, Tasks: m.Tasks}}, nil
	}
	// A person's standing grant for exactly this request decides it
	// without asking; the policy's deny rules were read first.
	if g := s.grantDecides(p, m, s.cfg.Now(), true); g != nil {
		if err := r.receive(); err != nil {
			return verdict{}, err
		}
		log.Info("allowed by a standing grant", "grant", g.id)
		return verdict{d: approval.Decision{Verdict: approval.Allow, By: "grant " + g.id + " from " + g.approver}, grant: g}, nil
	}
	// A request no one may be asked about now reaches no person, like a
	// policy denial: refused at once.
	if n, ok := s.cfg.Approver.(noneToAsker); ok {
		if d, none := n.NoneToAsk(&approval.Prompt{ForwardAgent: req.ForwardAgent, Requester: approval.Requester{UID: p.peer.UID, User: userName}, Named: p.named, RunAs: p.account.Name}); none {
			recorded, err := r.receiveUnasked(s.cfg.Now())
			if err != nil {
				return verdict{}, err
			}
			return verdict{d: d, unrecorded: !recorded}, nil
		}
	}
	return r.askPerson(userName, na)
}

// askPerson puts the request to a person: it is received once admitted
// by the per-uid prompt caps, and the prompt is made. na is the allow
// rule that matched and does not decide, if one did.
func (r *request) askPerson(userName string, na *notApplied) (verdict, error) {
	s, p, req, log := r.s, r.p, r.req, r.log
	// One requester must not flood the people who approve.
	end, err := s.limit.begin(p.peer.UID, s.cfg.Now())
	if err != nil {
		log.Warn("prompt refused", "err", err)
		return verdict{}, err
	}
	defer end()
	if err := r.receive(); err != nil {
		return verdict{}, err
	}
	if na != nil {
		// Once per prompt, so within the per-uid prompt limits.
		log.Warn("allow rule not applied, a person is asked", "rule", na.rule.Text, "source", ruleSource(na.rule), "err", na.why)
	}
	// What each stage's program is, by its file: a copy of a listed
	// program under another name, a script's interpreters.
	stages := s.identify(p)
	prompt := &approval.Prompt{
		ID:      req.ID,
		Host:    req.Host,
		Session: req.Session,
		Version: req.Version,
		Time:    req.Time,
		Reason:  req.Reason,
		Requester: approval.Requester{
			UID: p.peer.UID, GID: p.peer.GID, PID: p.peer.PID,
			User: userName, Exe: p.peer.Exe, ExeOwnNamespace: p.peer.ExeOwnNS,
		},
		Stages:       stages,
		Privileged:   req.Privileged,
		RunAs:        p.account.Name,
		Named:        p.named,
		Cwd:          p.cwd,
		CwdOthers:    req.Privileged && p.peer.UID != 0 && rootpath.Entry(filepath.Join(p.cwd, "entry")) != nil,
		Env:          req.Env,
		Stdin:        req.Stdin,
		ForwardAgent: req.ForwardAgent,
		RunTimeout:   p.cmd.Timeout,
		Limits:       s.limitsText(p),
		Shape:        p.groupShape(),
		Hint:         s.hintFor(p, r.pol, na, s.cfg.Now()),
		// The broker puts it only to approvers the run's account
		// cannot control (Named), and it makes no grant or rule.
		ApproverPower: s.approverPower(p),
	}
	prompt.NoGrant = p.noGrant()
	// Every approver client must be able to read the prompt: refuse
	// plainly, rather than send a line they would have to skip.
	if _, err := remote.PromptLine(prompt, time.Now(), ""); err != nil {
		log.Warn("prompt refused", "err", err)
		return verdict{}, err
	}
	log.Info("asking for approval")
	r.progress(wire.ProgressApproval)
	d := s.cfg.Approver.Approve(r.ctx, prompt)
	return verdict{d: d, prompt: prompt}, nil
}

// noneToAsker is an Approver that tells, before a request is recorded,
// that it would ask no one about it (*approval.Broker).
type noneToAsker interface {
	NoneToAsk(p *approval.Prompt) (approval.Decision, bool)
}

// evaluate is the verdict of pol, the policy the request is decided
// against, on p's request from the user userName. An allow rule does not
// decide a run as another identity than the requester's whose file
// someone other than root may change: a person is asked, who sees the
// file's real path; the rule is then returned as not applied.
func (s *Server) evaluate(pol *policy.Policy, p *runPlan, userName string) (policy.Match, *notApplied) {
	m := pol.Evaluate(p.subject(userName))
	if m.Action == policy.ActionAllow {
		if err := p.othersMayChange(); err != nil {
			// Said in the answer to a check, on the prompt, and in the
			// log once a person is asked (askPerson), not here: a check
			// is answered without a record, and must not log either.
			return policy.Match{Action: policy.ActionAsk}, &notApplied{m.Rule, err}
		}
		if why := s.approverPower(p); why != "" {
			// A run that may approve is root's equal: a person is
			// asked, told what approving it means (docs/security.md,
			// "Who can approve").
			return policy.Match{Action: policy.ActionAsk}, &notApplied{m.Rule, fmt.Errorf("the run as %s may approve rootgate requests (%s), so it is put to a person as a request for root", p.account.Name, why)}
		}
	}
	return m, nil
}

// othersMayChange says why a rule may not allow p's run: it is privileged
// (as root, or as a named account with that account's groups), from a
// requester other than root, and someone other than root may change a
// stage's file, or which file its path leads to, so that what runs is
// what they (the requester, maybe) put there, not what the rule's author
// meant by its name. The rule matched the path as written: a link on it
// of the requester's (to a root program, in its home or in /tmp) would
// choose which root file runs next time. A bare name is found in the
// fixed search path, whose directories an operator may have handed over
// (a /usr/local/bin chowned for npm -g, one writable by group staff).
func (p *runPlan) othersMayChange() error {
	if p.peer.UID == 0 || !p.req.Privileged {
		return nil
	}
	for i, pin := range p.pinned {
		// Every link and directory on the way from the path as written
		// to the file that runs (held open since check 9), and that
		// file.
		if err := pin.RootsAlone(p.stages[i].Path); err != nil {
			return err
		}
	}
	return p.interpretersMayChange()
}

// interpretersMayChange says why someone other than root may change an
// interpreter of p's privileged run: the interpreter of a #! script, and
// that one's if it is a script too, and the loader of the ELF binary at
// the end, which the kernel finds by their paths when the run starts,
// not through the pinned file. Then neither a rule nor a standing grant
// may run it unasked: the person approved the file, not whatever the
// requester puts at those paths later.
//
// It is found once per request (the rule, the grants and the prompt all
// ask): paths found root's alone stay so unless root changes them, and a
// refusal kept errs on the safe side.
func (p *runPlan) interpretersMayChange() error { return p.interp() }

// findInterpreters is interpretersMayChange's answer, found.
func (p *runPlan) findInterpreters() error {
	if p.peer.UID == 0 || !p.req.Privileged {
		return nil
	}
	for _, pin := range p.pinned {
		if err := pin.Interpreters(func(ip string) error {
			if err := rootpath.File(ip); err != nil {
				return fmt.Errorf("the interpreter of %s: %w", pin.Real, err)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// contentUnbound says why what p's privileged run (of a requester other
// than root) executes is not bound to what was planned, and so shown: a
// stage's file that someone other than root may change, or which file
// its path leads to, was not captured, neither the run's identity nor the
// requester's being able to read it (captureAsRequester). What runs is
// then whatever the file holds when the run starts. Neither a rule nor a
// standing grant may run it unasked (a rule does not, for the file is not
// root's alone: othersMayChange); a person asked is told. nil when every
// stage's file is captured or root's alone, and for a root requester's or
// an unprivileged run, which have the requester's own rights.
//
// It is found once per request, as interpretersMayChange is.
func (p *runPlan) contentUnbound() error { return p.unbound() }

// findUnbound is contentUnbound's answer, found.
func (p *runPlan) findUnbound() error {
	if p.peer.UID == 0 || !p.req.Privileged {
		return nil
	}
	for _, pin := range p.pinned {
		// What the captures found (pipeline.Pinned.Uncaptured), not a
		// walk of the path again now, with another identity than the
		// plan's and after the requester could change it.
		if pin.Uncaptured() {
			return fmt.Errorf("the content of %s could not be captured, as neither %s (the run's account) nor the requester may read it, and others than root may change it or which file its path leads to", pin.Real, p.account.Name)
		}
	}
	return nil
}

// noGrant is why no standing grant may be made for p's request
// (Prompt.NoGrant), "" when one may: a file whose content is not bound
// to what the person is shown, or an interpreter someone other than root
// may change.
func (p *runPlan) noGrant() string {
	err := p.contentUnbound()
	if err == nil {
		err = p.interpretersMayChange()
	}
	if err == nil {
		return ""
	}
	return termsafe.Sanitize(err.Error())
}

// subject is p's request as the policy sees it, from the user userName.
func (p *runPlan) subject(userName string) policy.Subject {
	req := p.req
	s := policy.Subject{
		Privileged: req.Privileged,
		User:       userName,
		Session:    req.Session,
		Host:       req.Host,
		Stages:     req.Pipeline,
		Paths:      p.cmd.Paths,
		Env:        req.Env,
		RunAs:      p.runAsName(),
		RunGroup:   p.runGroupName(),
		Cwd:        p.cwd,
	}
	if len(req.Stdin) > 0 {
		s.StdinSHA256 = policy.StdinSHA256(req.Stdin)
	}
	return s
}

// runAsName is the account p's request runs as, for the policy: "" for
// root and the requester's own unprivileged run; a request naming only a
// group runs as the requester, whose name it is then (a rule needs
// runas= for it).
func (p *runPlan) runAsName() string {
	if p.named == nil || p.account.UID == 0 {
		return ""
	}
	return p.account.Name
}

// runGroupName is the group p's request named (run_as_group), or "".
func (p *runPlan) runGroupName() string {
	if p.named == nil {
		return ""
	}
	return p.named.Group
}

// check answers a check request: what check 10 (judge) would do with
// p's request, as its requester sent it, now, against pol: the policy's
// verdict, then a standing grant of the requester's that covers it, as
// judge takes them. It asks no one, runs nothing and counts no use of a
// grant.
func (s *Server) check(p *runPlan, pol *policy.Policy) *wire.Response {
	m, na := s.evaluate(pol, p, userNameOf(p.peer.UID))
	resp := &wire.Response{ID: p.req.ID, Status: wire.StatusOK}
	if g := s.grantDecides(p, m, s.cfg.Now(), false); g != nil {
		resp.Check = wire.CheckAllow
		resp.Message = fmt.Sprintf("standing grant %s allows this request without asking, until %s", g.id, g.ends.UTC().Format(time.RFC3339))
		resp.DecidedBy = grantDecider(g)
		return resp
	}
	switch {
	case m.Action == policy.ActionDeny:
		resp.Check, resp.Message = wire.CheckDeny, "the policy denies this request"
	case m.Action == policy.ActionAllow && p.req.ForwardAgent:
		resp.Check, resp.Message = wire.CheckAsk, "a person would be asked: a policy rule allows it, but forward_agent is always put to a person"
	case m.Action == policy.ActionAllow:
		resp.Check, resp.Message = wire.CheckAllow, "the policy allows this request without asking"
	case na != nil:
		// The rule matched this request (so it applies to this
		// requester); the reason names files the requester may have
		// named, so both are made safe to print.
		resp.Check = wire.CheckAsk
		resp.Message = fmt.Sprintf("allow rule %s (%s) does not decide this: %s; a person would be asked",
			termsafe.Sanitize(ruleSource(na.rule)), termsafe.Sanitize(na.rule.Text), termsafe.Sanitize(na.why.Error()))
	default:
		resp.Check, resp.Message = wire.CheckAsk, "a person would be asked about this request"
	}
	resp.DecidedBy = s.policyDecider(m.Rule)
	return resp
}

// policyDecider names rule as the decider of a request; nil for no rule.
func (s *Server) policyDecider(rule *policy.Rule) *wire.DecidedBy {
	if rule == nil {
		return nil
	}
	return &wire.DecidedBy{By: wire.DecidedByPolicy, Rule: rule.Text, Source: ruleSource(rule)}
}

// ruleSource names where rule is written, as FILE:LINE: the policy file
// or the drop-in holding it, or "policy" for a policy not read from a
// file.
func ruleSource(rule *policy.Rule) string {
	name := rule.File
	if name == "" {
		name = "policy"
	}
	return fmt.Sprintf("%s:%d", name, rule.Line)
}

// decider names who decided d: the policy rule, or the person who
// answered; nil when no one did (no approver, a timeout).
func (s *Server) decider(d *approval.Decision, rule *policy.Rule) *wire.DecidedBy {
	if rule != nil {
		return s.policyDecider(rule)
	}
	if d.Member == nil || d.Verdict != approval.Allow && d.Verdict != approval.Deny {
		return nil
	}
	by := &wire.DecidedBy{By: wire.DecidedByPerson, Note: wire.SanitizeNote(d.Note)}
	// Member.Name is "USER on WHERE".
	by.Approver = approverText(d.Member.Name, d.Member.UID)
	by.Group, by.GroupOf = d.Group, d.GroupOf
	by.Via = d.Member.Via
	if by.Via == "" {
		by.Via = "terminal"
	}
	return by
}
