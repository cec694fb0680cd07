package daemon

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/policy"
)

// ErrNoReload is returned by [Server.ReloadPolicy] when the Config has no
// LoadPolicy.
var ErrNoReload = errors.New("policy: no way to reload it")

// ReloadPolicy reads the policy again with Config.LoadPolicy and puts it
// in force for the requests received from now on; requests already
// received, pending prompts and runs keep the policy they were received
// under. When the policy cannot be read or does not parse, the one in
// force stays, the error is logged at error level and returned. Either
// way a policy_reload record goes to the audit log. It is safe to call
// from any goroutine: on SIGHUP, or when a rule was saved.
func (s *Server) ReloadPolicy() error {
	if s.cfg.LoadPolicy == nil {
		return ErrNoReload
	}
	s.reload.Lock()
	defer s.reload.Unlock()
	p, err := s.cfg.LoadPolicy()
	rec := &audit.Record{Kind: audit.KindPolicyReload, Policy: &audit.PolicyLoad{}}
	if err != nil {
		rec.Error = err.Error()
		if old := s.policy.Load(); old != nil {
			rec.Policy.Rules = len(old.Rules)
		}
		var pe *policy.ParseError
		var fe *policy.FileError
		switch {
		case errors.As(err, &pe):
			rec.Policy.File, rec.Policy.Line = pe.Name, pe.Line
		case errors.As(err, &fe):
			rec.Policy.File = fe.Name
		}
		// The reason is in the message too: journalctl -p err shows
		// only the message, not the fields.
		s.cfg.Log.Error("policy reload failed; the policy in force stays: "+err.Error(), "err", err, "file", rec.Policy.File, "line", rec.Policy.Line, "rules", rec.Policy.Rules)
	} else {
		s.policy.Store(p)
		rec.Policy.OK, rec.Policy.Files, rec.Policy.Rules = true, p.Files(), len(p.Rules)
		s.cfg.Log.Info("policy reloaded", "files", p.Files(), "rules", len(p.Rules))
		for _, r := range p.AllowsAllPrivileged() {
			s.cfg.Log.Warn("policy allows every privileged command without asking", "file", r.File, "line", r.Line, "rule", r.Text)
		}
		s.warnLimits(p)
		WarnOverrides(s.cfg.Log, p)
	}
	if s.cfg.Audit != nil {
		if aerr := s.cfg.Audit.Append(rec); aerr != nil {
			s.cfg.Log.Error("cannot write audit record", "event", string(rec.Kind), "err", aerr)
		}
	}
	return err
}

// WarnOverrides logs, at warning level, each rule of p that can never
// decide anything because a stricter rule (or an earlier one of the same
// action) matches wherever it matches: a catch-all "ask any" left from
// when the first matching rule decided turns every allow rule into a
// prompt, and the operator must be told rather than find out.
func WarnOverrides(log *slog.Logger, p *policy.Policy) {
	for _, o := range p.Overrides() {
		log.Warn("policy rule never decides anything",
			"rule", fmt.Sprintf("%s:%d: %s", o.Rule.File, o.Rule.Line, o.Rule.Text),
			"by", fmt.Sprintf("%s:%d: %s", o.By.File, o.By.Line, o.By.Text))
	}
}
