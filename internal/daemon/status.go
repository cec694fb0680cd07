package daemon

import (
	"fmt"
	"slices"
	"sync"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
)

// keptDecisions is how many decisions the server remembers for the
// approvers' idle screens: more than one status shows, since each
// approver sees only those of the requesters it may be asked about.
const keptDecisions = 64

// decisionLog is the last decisions, for the approvers' idle screens.
type decisionLog struct {
	mu   sync.Mutex // guards last
	last []remote.DecisionInfo
}

// add remembers d, made now about req's request from peer.
func (l *decisionLog) add(d remote.DecisionInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.last = append(l.last, d)
	if len(l.last) > keptDecisions {
		l.last = slices.Delete(l.last, 0, len(l.last)-keptDecisions)
	}
}

// noteDecision remembers the verdict v on plan's request for the
// approvers' idle screens, and tells them.
func (s *Server) noteDecision(plan *runPlan, userName string, v *verdict) {
	d := &v.d
	info := remote.DecisionInfo{
		ID: plan.req.ID, UID: plan.peer.UID, User: userName, Pipeline: clipPipeline(plan.req.Pipeline),
		Time: s.cfg.Now().UTC(), Verdict: d.Verdict.String(), By: decidedByText(v),
	}
	if d.Group > 1 {
		info.Count = d.Group
	}
	s.decisions.add(info)
	s.statusChanged()
}

// decidedByText says who made v, for an approver's idle screen.
func decidedByText(v *verdict) string {
	d := &v.d
	switch {
	case v.grant != nil:
		return "grant " + v.grant.id + " (given by " + v.grant.approver + ")"
	case v.rule != nil:
		return "rule " + ruleSource(v.rule)
	case d.Member != nil && (d.Verdict == approval.Allow || d.Verdict == approval.Deny):
		by := "person " + d.Member.Name
		if d.SelfApproval {
			by += " (UNSAFE self-approval)"
		}
		return by
	case d.Verdict == approval.Expired:
		return "timeout: nobody answered"
	case d.Verdict == approval.Withdrawn:
		return "withdrawn by the requester"
	}
	return d.By
}

// A pipeline in a status message is only a reminder of the command (its
// prompt shows it whole): each word cut to clipWord characters, each
// stage to clipWords words and the pipeline to clipStages stages, so a
// requester's megabyte of arguments does not make every status that
// large, nor the last decisions kept.
const (
	clipWord   = 120
	clipWords  = 24
	clipStages = 4
)

// clipText is w cut to clipWord characters, saying how many it left out,
// without converting all of w (a word of the requester's may be MiBs).
func clipText(w string) string {
	i, n := 0, 0
	for i < len(w) && n < clipWord {
		_, size := utf8.DecodeRuneInString(w[i:])
		i += size
		n++
	}
	if i == len(w) {
		return w
	}
	return w[:i] + fmt.Sprintf("...(+%d)", utf8.RuneCountInString(w[i:]))
}

// clipPipeline is p cut for a status message, each cut saying so.
func clipPipeline(p [][]string) [][]string {
	n := min(len(p), clipStages)
	out := make([][]string, n, n+1)
	for i, argv := range p[:n] {
		n := min(len(argv), clipWords)
		st := make([]string, 0, n+1)
		for _, w := range argv[:n] {
			st = append(st, clipText(w))
		}
		if len(argv) > n {
			st = append(st, fmt.Sprintf("...(+%d words)", len(argv)-n))
		}
		out[i] = st
	}
	if len(p) > n {
		out = append(out, []string{fmt.Sprintf("...(+%d stages)", len(p)-n)})
	}
	return out
}

// statusChanged tells the attached approvers their status changed.
func (s *Server) statusChanged() {
	if s.host != nil {
		s.host.Changed()
	}
}

// mayShow reports whether an approver peer may be shown a request, grant
// or decision of uid: those of the requesters it may be asked about (see
// approval.Broker), root's, and with --unsafe-self-approval any.
func (s *Server) mayShow(peer remote.Peer, uid int) bool {
	if uid == 0 || s.cfg.Broker != nil && s.cfg.Broker.UnsafeSelfApproval {
		return true
	}
	return uid != peer.UID && !slices.Contains(peer.Controllers, uid)
}

// statusSource is the server's [remote.StatusSource].
type statusSource struct{ s *Server }

var _ remote.StatusSource = statusSource{}

// Status implements [remote.StatusSource]: the requests waiting for a
// person, the standing grants and the last decisions that peer may see.
func (src statusSource) Status(peer remote.Peer) *remote.Message {
	s := src.s
	m := &remote.Message{Type: remote.MsgStatus, Queue: []remote.QueueItem{}, Decisions: []remote.DecisionInfo{}}
	if s.cfg.Broker != nil {
		for _, w := range s.cfg.Broker.Waiting() {
			p := w.Prompt
			if !s.mayShow(peer, p.Requester.UID) {
				m.Hidden++
				continue
			}
			if len(m.Queue) == remote.StatusItems {
				m.More++
				continue
			}
			q := remote.QueueItem{ID: p.ID, UID: p.Requester.UID, User: p.Requester.User, Since: w.Since.UTC()}
			for _, st := range p.Stages {
				q.Pipeline = append(q.Pipeline, st.Argv)
			}
			q.Pipeline = clipPipeline(q.Pipeline)
			if w.Count > 1 {
				q.Count = w.Count
			}
			m.Queue = append(m.Queue, q)
		}
	}
	grants, hidden := grantKeeper{s}.ListGrants(peer)
	if len(grants) > remote.StatusItems { // those that end first are kept
		m.More += len(grants) - remote.StatusItems
		grants = grants[:remote.StatusItems]
	}
	for i := range grants {
		grants[i].Pipeline = clipPipeline(grants[i].Pipeline)
		grants[i].Paths, grants[i].Env = nil, nil
	}
	m.Grants, m.Hidden = grants, m.Hidden+hidden
	s.decisions.mu.Lock()
	for i := len(s.decisions.last) - 1; i >= 0 && len(m.Decisions) < remote.StatusDecisions; i-- {
		if d := s.decisions.last[i]; s.mayShow(peer, d.UID) {
			m.Decisions = append(m.Decisions, d)
		}
	}
	s.decisions.mu.Unlock()
	return m
}
