package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/policy"
	"github.com/rootgate/rootgate/wire"
	"golang.org/x/sys/unix"
)

// maxGrants caps the standing grants held at once; past it a person's
// grant is not made (the approval it came with stands).
const maxGrants = 256

// A grant is a person's standing decision: requests from uid whose shape
// (shapeOf) is shape run without asking until ends. Grants live in the
// daemon's memory only: a restart ends them all.
type grant struct {
	id          string
	uid         int
	user        string
	shape       string
	pipeline    [][]string
	stages      []approval.Stage
	runAs       string
	runAsGroup  string // the group the request named, "" when none
	cwd         string
	env         map[string]string
	stdinSize   int
	timeout     time.Duration // the run's time limit
	ends        time.Time
	approverUID int
	approver    string // "USER on WHERE"
	via         string
	uses        int
}

// grantStore holds the standing grants.
type grantStore struct {
	mu   sync.Mutex // guards the fields that follow
	next int
	byID map[string]*grant
	// expired are the last grants whose time ran out, newest last, for
	// the prompt's hint (hintFor).
	expired []*grant
}

// keptExpired is how many expired grants are remembered for hints.
const keptExpired = 16

// shapeOf is the SHA-256 of everything a grant must match exactly: the
// requester's uid, privileged, forward_agent, the run-as account, the cwd
// (and the directory's identity), the env, stdin, the run's time limit
// (which the prompt shows, and the requester sets), and each stage's argv,
// resolved path, real path and pinned file's identity (so a file put in
// place of the granted one, or changed, does not match).
func shapeOf(p *runPlan) string {
	type stage struct {
		Argv     []string `json:"argv"`
		Path     string   `json:"path"`
		Target   string   `json:"target"`
		Identity string   `json:"identity"`
	}
	var dir unix.Stat_t
	dirID := ""
	if p.dir != nil && unix.Fstat(int(p.dir.Fd()), &dir) == nil {
		dirID = fmt.Sprintf("dev=%d ino=%d", dir.Dev, dir.Ino)
	}
	shape := struct {
		UID          int               `json:"uid"`
		Privileged   bool              `json:"privileged"`
		ForwardAgent bool              `json:"forward_agent"`
		RunAsUID     uint32            `json:"run_as_uid"`
		RunAsGID     uint32            `json:"run_as_gid"`
		Groups       []uint32          `json:"groups"`
		Cwd          string            `json:"cwd"`
		CwdIdentity  string            `json:"cwd_identity"`
		Env          map[string]string `json:"env"`
		Stdin        []byte            `json:"stdin"`
		Timeout      time.Duration     `json:"timeout"`
		Stages       []stage           `json:"stages"`
	}{
		UID: p.peer.UID, Privileged: p.req.Privileged, ForwardAgent: p.req.ForwardAgent,
		RunAsUID: p.account.UID, RunAsGID: p.account.GID, Groups: p.account.Groups,
		Cwd: p.cwd, CwdIdentity: dirID, Env: p.req.Env, Stdin: p.req.Stdin, Timeout: p.cmd.Timeout,
	}
	for i, st := range p.stages {
		shape.Stages = append(shape.Stages, stage{Argv: st.Argv, Path: st.Path, Target: st.Target, Identity: p.pinned[i].Identity()})
	}
	b, err := json.Marshal(shape)
	if err != nil {
		panic("daemon: shape does not marshal: " + err.Error()) // plain fields only
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// endedLocked removes the grants that ended by now and returns them.
func (gs *grantStore) endedLocked(now time.Time) []*grant {
	var out []*grant
	for id, g := range gs.byID {
		if !now.Before(g.ends) {
			out = append(out, g)
			delete(gs.byID, id)
		}
	}
	gs.expired = append(gs.expired, out...)
	if len(gs.expired) > keptExpired {
		gs.expired = slices.Delete(gs.expired, 0, len(gs.expired)-keptExpired)
	}
	return out
}

// grantShape is shapeOf(p), computed once per request: it hashes the
// whole request, stdin included.
func (p *runPlan) grantShape() string { return p.shape() }

// namedGroup is the name of the group the request named (run_as_group),
// as the group database gives it, or "" when it named none.
func (p *runPlan) namedGroup() string {
	if p.named == nil {
		return ""
	}
	return p.named.Group
}

// groupShape is what requests must share to be decided by one prompt
// ([approval.Prompt].Shape): the grant shape, and the requester's
// executable, which the prompt shows as the kernel's word on who asks (a
// grant is for whichever process of the uid asks; a group's banner says
// its requests are the same in all it shows but the requester's words).
func (p *runPlan) groupShape() string {
	return p.grantShape() + " exe=" + p.peer.Exe
}

// grantDecides returns the standing grant that decides p's request at
// now, given the policy's verdict m on it, or nil: none when the policy
// decides it (a deny rule, or an allow rule without forward_agent), the
// request forwards an SSH agent (always put to a person) or its run may
// approve rootgate requests (approverPower). The real
// decision (judge) and a check request (check) both ask it; use counts
// a use of the grant, which only a real decision does.
func (s *Server) grantDecides(p *runPlan, m policy.Match, now time.Time, use bool) *grant {
	if p.req.ForwardAgent || m.Action == policy.ActionDeny || m.Action == policy.ActionAllow {
		return nil
	}
	if s.approverPower(p) != "" {
		// A run that may approve is put to a person each time, as a
		// request for root; a grant made before its account could
		// approve (an approver attached later) runs nothing since.
		return nil
	}
	return s.grantFor(p, now, use)
}

// grantFor returns the grant that allows p's request now, counting a
// use when use is set, or nil.
func (s *Server) grantFor(p *runPlan, now time.Time, use bool) *grant {
	gs := &s.grants
	// The shape is computed outside the lock every request takes, and
	// only when there are grants to match.
	gs.mu.Lock()
	have := len(gs.byID) > 0
	gs.mu.Unlock()
	if have && (p.contentUnbound() != nil || p.interpretersMayChange() != nil) {
		// None is made for such a run (Prompt.NoGrant); one made when
		// its content was bound, or only root could change its
		// interpreters, runs nothing since: a grant never runs a file
		// that is neither captured nor root's alone.
		have = false
	}
	shape := ""
	if have {
		shape = p.grantShape()
	}
	gs.mu.Lock()
	ended := gs.endedLocked(now)
	var found *grant
	if shape != "" {
		for _, g := range gs.byID {
			if g.uid == p.peer.UID && g.shape == shape {
				if use {
					g.uses++
				}
				c := *g
				found = &c
				break
			}
		}
	}
	gs.mu.Unlock()
	s.grantsEnded(ended)
	return found
}

// addGrant makes the standing grant d asks for, for p's request, given by
// the person d names; it returns the grant, or nil when none was made.
func (s *Server) addGrant(p *runPlan, prompt *approval.Prompt, d *approval.Decision, now time.Time) *grant {
	if d.Grant <= 0 || d.Member == nil || d.Verdict != approval.Allow {
		return nil
	}
	log := s.cfg.Log.With("request_id", p.req.ID)
	switch {
	case d.Grant > approval.MaxGrant:
		log.Warn("grant not made: longer than the maximum", "grant", d.Grant)
		return nil
	}
	if why := approval.Grantable(prompt); why != "" {
		log.Warn("grant not made", "why", why)
		return nil
	}
	g := &grant{
		uid: p.peer.UID, user: prompt.Requester.User, shape: p.grantShape(),
		pipeline: p.req.Pipeline, stages: p.stages, runAs: p.account.Name, runAsGroup: p.namedGroup(), cwd: p.cwd,
		env: p.req.Env, stdinSize: len(p.req.Stdin), timeout: p.cmd.Timeout, ends: now.Add(d.Grant),
		approverUID: d.Member.UID, approver: d.Member.Name, via: d.Member.Via,
	}
	gs := &s.grants
	gs.mu.Lock()
	ended := gs.endedLocked(now)
	var replaced *grant
	for _, o := range gs.byID {
		if o.uid == g.uid && o.shape == g.shape {
			replaced = o
			delete(gs.byID, o.id)
		}
	}
	if len(gs.byID) >= maxGrants {
		gs.mu.Unlock()
		s.grantsEnded(ended)
		log.Warn("grant not made: too many standing grants", "max", maxGrants)
		return nil
	}
	gs.next++
	g.id = "g" + strconv.Itoa(gs.next)
	if gs.byID == nil {
		gs.byID = map[string]*grant{}
	}
	gs.byID[g.id] = g
	gs.mu.Unlock()
	s.grantsEnded(ended)
	if replaced != nil {
		s.grantEvent(audit.KindGrantRevoked, replaced, "replaced by "+g.id, &g.approverUID, g.approver)
	}
	s.grantEvent(audit.KindGrantCreated, g, "", &g.approverUID, g.approver)
	return g
}

// grantsEnded records the end of grants whose time is up.
func (s *Server) grantsEnded(ended []*grant) {
	for _, g := range ended {
		s.grantEvent(audit.KindGrantRevoked, g, "ended", nil, "")
	}
}

// grantEvent records a grant's creation or end in the audit log and logs it.
func (s *Server) grantEvent(kind audit.Kind, g *grant, why string, byUID *int, by string) {
	r := &audit.Record{Kind: kind, Grant: &audit.Grant{
		ID: g.id, RequesterUID: g.uid, Pipeline: g.pipeline, RunAsUser: g.runAs, Cwd: g.cwd,
		Shape: g.shape, Ends: g.ends.UTC(), ApproverUID: byUID, Approver: by, Uses: g.uses, Why: why,
	}}
	for _, st := range g.stages {
		r.Grant.Stages = append(r.Grant.Stages, audit.Stage{Path: st.Path, Target: st.Target})
	}
	var err error
	if s.cfg.Audit != nil {
		if err = s.cfg.Audit.Append(r); err != nil {
			s.cfg.Log.Error("cannot write audit record", "event", string(kind), "grant", g.id, "err", err)
		}
	}
	s.cfg.Log.Info("audit: "+string(kind), "grant", g.id, "requester_uid", g.uid, "ends", g.ends.UTC(), "by", by, "uses", g.uses, "why", why)
	s.statusChanged()
}

// grantDecider names the grant g as the decider of a request.
func grantDecider(g *grant) *wire.DecidedBy {
	by := &wire.DecidedBy{By: wire.DecidedByGrant, Grant: g.id, Ends: g.ends.UTC().Format(time.RFC3339), Via: g.via}
	by.Approver = approverText(g.approver, g.approverUID)
	return by
}

// grantKeeper is the server's [remote.GrantKeeper].
type grantKeeper struct{ s *Server }

var _ remote.GrantKeeper = grantKeeper{}

// ListGrants implements [remote.GrantKeeper]. An approver sees the grants
// of the requesters whose requests it may be shown: not those of a uid
// that controls its terminal or session (unless the daemon runs with
// --unsafe-self-approval), which it could not have given and whose
// commands it is not shown. It is told how many it does not see.
func (k grantKeeper) ListGrants(peer remote.Peer) ([]remote.GrantInfo, int) {
	s := k.s
	now := s.cfg.Now()
	gs := &s.grants
	gs.mu.Lock()
	ended := gs.endedLocked(now)
	var shown []remote.GrantInfo
	hidden := 0
	unsafeSelf := s.cfg.Broker != nil && s.cfg.Broker.UnsafeSelfApproval
	for _, g := range gs.byID {
		if g.uid != 0 && slices.Contains(peer.Controllers, g.uid) && !unsafeSelf {
			hidden++
			continue
		}
		gi := remote.GrantInfo{ID: g.id, UID: g.uid, User: g.user, Pipeline: g.pipeline, RunAs: g.runAs, RunAsGroup: g.runAsGroup, Cwd: g.cwd,
			StdinSize: g.stdinSize, Ends: g.ends.UTC(), By: approverText(g.approver, g.approverUID), Uses: g.uses}
		for _, st := range g.stages {
			gi.Paths = append(gi.Paths, st.Path)
		}
		for k, v := range g.env {
			gi.Env = append(gi.Env, k+"="+v)
		}
		slices.Sort(gi.Env)
		shown = append(shown, gi)
	}
	gs.mu.Unlock()
	s.grantsEnded(ended)
	slices.SortFunc(shown, func(a, b remote.GrantInfo) int { return a.Ends.Compare(b.Ends) })
	return shown, hidden
}

// RevokeGrant implements [remote.GrantKeeper]. Any admitted approver may
// revoke any grant: revoking only takes a permission away.
func (k grantKeeper) RevokeGrant(id string, peer remote.Peer) string {
	s := k.s
	gs := &s.grants
	gs.mu.Lock()
	ended := gs.endedLocked(s.cfg.Now())
	g := gs.byID[id]
	delete(gs.byID, id)
	gs.mu.Unlock()
	s.grantsEnded(ended)
	if g == nil {
		return remote.ApproverNoGrant(id)
	}
	uid := peer.UID
	s.grantEvent(audit.KindGrantRevoked, g, "revoked", &uid, peer.User)
	return ""
}

// approverText is "NAME (uid N) on WHERE" for a member named "NAME on
// WHERE".
func approverText(name string, uid int) string {
	user, where, ok := strings.Cut(name, " on ")
	if ok {
		return fmt.Sprintf("%s (uid %d) on %s", user, uid, where)
	}
	return fmt.Sprintf("%s (uid %d)", name, uid)
}
