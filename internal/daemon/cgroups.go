package daemon

import (
	"path/filepath"
	"strings"

	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/policy"
)

// limitsText is the prompt's Limits line for p.
func (s *Server) limitsText(p *runPlan) string {
	if s.cfg.Cgroups == nil {
		return "none; no cgroup (contained by sessions and an environment tag only)"
	}
	return p.lim.String() + " (the run's own cgroup)"
}

// recoverOrphans kills the runs' cgroups left in Cgroups.Parent by a
// daemon that did not stop cleanly (those with rootgated's mark: no
// other cgroup there is touched), removes them and logs each; it
// returns the names, without "~N" (cgroup.RunName of their ids), of those
// it removed. It writes no audit record: the trail says which of those
// runs started and never ended (recoverUnfinished), where a cgroup's name
// may stand for a longer id, and a cgroup may be left of a run whose end
// is recorded or that never started.
func (s *Server) recoverOrphans() map[string]bool {
	c := s.cfg.Cgroups
	killed := make(map[string]bool)
	names, err := c.Leftovers()
	if err != nil {
		s.cfg.Log.Error("cannot look for runs' cgroups left by a previous daemon", "err", err)
	}
	for _, name := range names {
		path := filepath.Join(c.Parent, name)
		cg, err := cgroup.Open(path)
		if err == nil {
			err = cg.Remove()
		}
		if err != nil {
			s.cfg.Log.Error("cannot remove a run's cgroup left by a previous daemon", "cgroup", path, "err", err)
			continue
		}
		base, _, _ := strings.Cut(name, "~")
		killed[base] = true
		s.cfg.Log.Warn("killed and removed a run's cgroup left by a daemon that did not stop cleanly", "cgroup", path, "id", cgroup.RunID(name))
	}
	return killed
}

// stricter is l with the limits r (of the allow rules) where they are
// lower (or l has none).
func stricter(l cgroup.Limits, r cgroup.Limits) cgroup.Limits {
	mem, tasks := r.Memory, r.Tasks
	if mem > 0 && (l.Memory == 0 || mem < l.Memory) {
		l.Memory = mem
	}
	if tasks > 0 && (l.Tasks == 0 || tasks < l.Tasks) {
		l.Tasks = tasks
	}
	return l
}

// warnLimits warns about each rule of p whose limits cannot be enforced
// here: the requests it allows will be refused.
func (s *Server) warnLimits(p *policy.Policy) {
	if p == nil {
		return
	}
	for _, r := range p.Rules {
		if mem, tasks := r.Limits(); mem > 0 || tasks > 0 {
			if err := s.cfg.Cgroups.Check(cgroup.Limits{Memory: mem, Tasks: tasks}); err != nil {
				s.cfg.Log.Warn("policy rule sets limits this machine cannot enforce: the requests it allows will be refused", "file", r.File, "line", r.Line, "rule", r.Text, "err", err)
			}
		}
	}
}
