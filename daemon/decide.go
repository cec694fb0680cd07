package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/wire"
)

// decide is check 10: the policy first, then a person.
// receive writes the received record: it is called once the request is
// decided by the policy, or admitted to be put to a person.
func (s *Server) decide(ctx context.Context, p *runPlan, log *slog.Logger, receive func(runsNothing bool) error) (approval.Decision, error) {
	req := p.req
	userName := userNameOf(p.peer.UID)
	m := p.policy.Evaluate(approval.Subject{
		Privileged: req.Privileged,
		User:       userName,
		Session:    req.Session,
		Host:       req.Host,
		Stages:     req.Pipeline,
		Paths:      p.cmd.Paths,
		Env:        req.Env,
	})
	if m.Action == approval.ActionDeny && !s.reject.allow(p.peer.UID, s.cfg.Now()) {
		// Denied without a person: such records share the per-uid budget
		// of refused requests, so a flood of them cannot fill the log.
		p.unrecorded = true
	} else if m.Action == approval.ActionDeny || m.Action == approval.ActionAllow && !req.ForwardAgent {
		if err := receive(m.Action == approval.ActionDeny); err != nil {
			return approval.Decision{}, err
		}
	}
	switch m.Action {
	case approval.ActionDeny:
		p.rule = m.Rule
		denied := wire.DeniedByPolicyError(m.Rule.Line, m.Rule.Text)
		return approval.Decision{Verdict: approval.Deny, Message: denied.Error(), Code: wire.CodeOf(denied), By: fmt.Sprintf("policy line %d", m.Rule.Line)}, nil
	case approval.ActionAllow:
		if req.ForwardAgent {
			// Lending the operator's SSH agent is the operator's call:
			// such a request is always put to a person.
			log.Info("allowed by policy, but forward_agent asks a person", "line", m.Rule.Line)
			break
		}
		p.rule = m.Rule
		return approval.Decision{Verdict: approval.Allow, By: fmt.Sprintf("policy line %d", m.Rule.Line)}, nil
	}
	// One requester must not flood the people who approve.
	end, err := s.limit.begin(p.peer.UID, s.cfg.Now())
	if err != nil {
		log.Warn("prompt refused", "err", err)
		return approval.Decision{}, err
	}
	defer end()
	if err := receive(false); err != nil {
		return approval.Decision{}, err
	}
	prompt := &approval.Prompt{
		ID:      req.ID,
		Host:    req.Host,
		Session: req.Session,
		Version: req.Version,
		Time:    req.Time,
		Reason:  req.Reason,
		Requester: approval.Requester{
			UID: p.peer.UID, GID: p.peer.GID, PID: p.peer.PID,
			User: userName, Exe: p.peer.Exe,
		},
		Stages:       p.stages,
		Privileged:   req.Privileged,
		RunAs:        p.account.Name,
		Cwd:          p.cwd,
		Env:          req.Env,
		Stdin:        req.Stdin,
		ForwardAgent: req.ForwardAgent,
		RunTimeout:   p.cmd.Timeout,
	}
	// Every approver client must be able to read the prompt: refuse
	// plainly, rather than send a line they would have to skip.
	if _, err := approval.PromptLine(prompt, time.Now()); err != nil {
		log.Warn("prompt refused", "err", err)
		return approval.Decision{}, err
	}
	log.Info("asking for approval")
	d := s.cfg.Approver.Approve(ctx, prompt)
	return d, nil
}
