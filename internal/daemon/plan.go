package daemon

import (
	"errors"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/internal/rootpath"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/wire"
)

// runPlan is a request made ready to run: executables resolved, identity and
// environment fixed. What the approver is shown is made from it, and it is
// what runs. What decides the request is its verdict, not the plan's,
// and the run sets up a copy of its cmd. Filled in after planning are
// only what is found from it when first asked, for it costs: the facts
// at the end, and, once a person is to be asked, what each stage's
// program is (identify), which the prompt shows.
type runPlan struct {
	req     *wire.Request
	peer    peerInfo
	account pipeline.Account
	stages  []approval.Stage
	cwd     string             // the held cwd's real path
	dir     *os.File           // the cwd, held open
	pinned  []*pipeline.Pinned // the stages' executables, held open
	cmd     *pipeline.Cmd
	// named is the identity a request naming its account or group
	// (run_as other than root, run_as_group) runs with; nil otherwise.
	named *approval.NamedRun
	// lim is the limits of the run's cgroup, as the daemon sets them
	// (a rule that allows the run may lower them: request.limits).
	lim cgroup.Limits
	// search is where a bare name is found and the run's PATH: the fixed
	// search path, less its directories others than root may change for
	// a privileged run another user asks for (pipeline.SafeSearchPath).
	search string
	// leftOut is why each directory of the fixed search path not in
	// search was left out (pipeline.SafeSearchPath's reasons).
	leftOut []pipeline.LeftOut
	// resolveOnly: the plan only resolves (requesterFirst's look with
	// the requester's identity): nothing is captured.
	resolveOnly bool
	// captures is the daemon's budget of captured content, and captured
	// what the plan's captures reserved of it, given back by close.
	captures *capturedBudget
	captured int64
	// captureLeft is what is left of the request's capture allowance
	// (pipeline.MaxCapture), all stages together.
	captureLeft int64

	// Facts of the plan that cost, found once when first asked (set by
	// plan, never assigned after): shape is shapeOf(p) (grantShape),
	// interp is interpretersMayChange's answer, and unbound
	// contentUnbound's.
	shape   func() string
	interp  func() error
	unbound func() error
}

// close releases the pinned executables and the cwd.
func (p *runPlan) close() {
	for _, f := range p.pinned {
		f.Close()
	}
	if p.captures != nil {
		p.captures.give(p.peer.UID, p.captured)
		p.captured = 0
	}
	if p.dir != nil {
		p.dir.Close()
	}
}

// plan is check 9: resolve every executable, the cwd and the run-as user.
// Each executable is pinned (held open) from here to the run, so the file
// the approver is shown is the one that runs; the caller closes the plan.
// For a run that is not privileged, the cwd and the executables are
// opened with the run-as user's file system identity, so such a run
// reaches nothing its user could not.
func (s *Server) plan(req *wire.Request, peer peerInfo) (_ *runPlan, err error) {
	if req.ForwardAgent && (s.cfg.Broker == nil || !s.cfg.Broker.OffersAgent(peer.UID)) {
		return nil, wire.ErrNoAgent
	}
	account, named, err := runIdentity(req, peer)
	if err != nil {
		return nil, err
	}
	p := &runPlan{req: req, peer: peer, account: account, named: named, stages: make([]approval.Stage, len(req.Pipeline)), search: pipeline.SearchPath, captures: &s.captures}
	if req.Privileged && peer.UID != 0 {
		// A directory of the search path the requester may write to
		// would hand its file the run's identity, found by name.
		p.search, p.leftOut = pipeline.SafeSearchPath()
	}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if err := p.opener()(); err != nil {
		return nil, err
	}
	if err := p.captureAsRequester(); err != nil {
		return nil, err
	}
	p.cmd = s.command(p)
	if s.cfg.Cgroups != nil {
		p.lim = s.cfg.Cgroups.Limits
	}
	p.shape = sync.OnceValue(func() string { return shapeOf(p) })
	p.interp = sync.OnceValue(p.findInterpreters)
	p.unbound = sync.OnceValue(p.findUnbound)
	return p, nil
}

// runIdentity is the account req's run has, as peer asked for it, and
// for a request naming its account or group (run_as other than root,
// run_as_group), the identity it names.
func runIdentity(req *wire.Request, peer peerInfo) (account pipeline.Account, named *approval.NamedRun, err error) {
	uid := uint32(0)
	if !req.Privileged || req.RunAs == "" && req.RunAsGroup != "" {
		// Not privileged: the requester. A group and no account: the
		// requester with that group, as sudo -g runs; a raw client
		// must not get root with a group by leaving run_as out.
		uid = uint32(peer.UID)
	}
	if req.RunAs != "" {
		account, err = lookupRunAs(req.RunAs)
	} else if account, err = pipeline.CachedAccount(uid); err != nil {
		err = wire.NoUserError(int(uid))
	}
	if err != nil {
		return pipeline.Account{}, nil, err
	}
	if !req.Privileged {
		// The peer's own groups, as the kernel reported them at connect.
		account.GID = uint32(peer.GID)
		account.Groups = peer.Groups
	}
	if account.UID != 0 && req.Privileged || req.RunAsGroup != "" {
		named = &approval.NamedRun{UID: account.UID, GID: account.GID}
	}
	if req.RunAsGroup != "" {
		g, err := lookupRunGroup(req.RunAsGroup)
		if err != nil {
			return pipeline.Account{}, nil, err
		}
		account.GID, named.GID, named.Group = g.gid, g.gid, g.name
	}
	return account, named, nil
}

// opener is how p's cwd and executables are opened (open): with the
// daemon's identity for a privileged run as root; else as the run will
// reach them. A privileged request of a requester other than root opens
// nothing the requester cannot see (seen.go).
func (p *runPlan) opener() func() error {
	open := p.open
	if !p.req.Privileged || p.account.UID != 0 {
		// Not privileged, or a named account: the cwd and executables
		// are reached as the run will reach them.
		open = func() error { return pipeline.AsUser(&p.account, p.open) }
	}
	if p.req.Privileged && p.peer.UID != 0 {
		open = p.requesterFirst(open)
	}
	return open
}

// command is p's run, as planned: its time limit the daemon's, or the
// request's when lower.
func (s *Server) command(p *runPlan) *pipeline.Cmd {
	req := p.req
	timeout := s.cfg.ExecTimeout
	if req.Timeout > 0 && req.Timeout < timeout {
		timeout = req.Timeout
	}
	paths := make([]string, len(p.stages))
	for i, st := range p.stages {
		paths[i] = st.Path
	}
	return &pipeline.Cmd{
		Argv:      req.Pipeline,
		Paths:     paths,
		Env:       pipeline.EnvIn(p.search, p.account, req.Env),
		Pinned:    p.pinned,
		Dir:       p.cwd,
		DirFile:   p.dir,
		Stdin:     req.Stdin,
		Account:   &p.account,
		Timeout:   timeout,
		KillGrace: s.cfg.KillGrace,
		Cap:       wire.MaxCapture,
	}
}

// open opens the cwd and resolves and pins every stage's executable, with
// the calling thread's file system identity. The cwd is held open from
// here to the run, which enters the directory held, not whatever its path
// names by then; the prompt shows that directory's own path, symlinks
// resolved, as the kernel names the descriptor. Likewise each stage shows
// the real path of the file pinned, which is the one that runs.
func (p *runPlan) open() error {
	req := p.req
	dir, err := pipeline.OpenDir(req.Cwd)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return wire.CwdDeniedError(req.Cwd)
	case errors.Is(err, pipeline.ErrMagicLink):
		return wire.CwdError(req.Cwd, pipeline.ErrMagicLink)
	case err != nil:
		return wire.CwdMissingError(req.Cwd)
	}
	p.dir = dir
	cwd, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(dir.Fd())))
	if err != nil || !filepath.IsAbs(cwd) {
		return wire.CwdMissingError(req.Cwd)
	}
	p.cwd = cwd
	p.captureLeft = pipeline.MaxCapture
	for i, argv := range req.Pipeline {
		// The file found is the file pinned: one open.
		exe, pin, err := pipeline.ResolvePinnedIn(argv[0], cwd, p.search)
		switch {
		case errors.Is(err, pipeline.ErrNotFound):
			if dir, why := p.leftOutHolding(argv[0]); dir != "" {
				return wire.NotFoundLeftOutError(i+1, argv[0], dir, termsafe.Sanitize(why))
			}
			return wire.NotFoundError(i+1, argv[0])
		case err != nil:
			return wire.ResolveError(i+1, err)
		}
		p.pinned = append(p.pinned, pin)
		p.stages[i] = approval.Stage{Argv: argv, Path: exe.Path, Target: exe.Target}
		// A run with more than the requester's own rights executes
		// exactly the bytes read now, before anyone is asked, of a file
		// someone other than root may change.
		if p.resolveOnly {
			continue
		}
		own := !req.Privileged || p.peer.UID == 0
		if err := p.captureStage(i, func(budget int64, reserve func(int64) error) (int64, error) {
			return pin.Capture(own, budget, reserve)
		}); err != nil {
			return err
		}
	}
	return nil
}

// captureStage captures stage i's file with capture (pipeline.Pinned's
// Capture or CaptureUnread), within what is left of the request's
// allowance and the daemon's budget, and shows on the stage what was
// captured, or that what had to be could not be.
func (p *runPlan) captureStage(i int, capture func(budget int64, reserve func(int64) error) (int64, error)) error {
	pin := p.pinned[i]
	var reserved int64
	used, err := capture(p.captureLeft, func(n int64) error {
		if err := p.reserve(n); err != nil {
			return err
		}
		reserved = n
		return nil
	})
	// What the capture did not hold (none for a file only the run
	// may execute, less for one that shrank) goes back at once, not
	// once a person has decided.
	p.unreserve(reserved - used)
	if errors.Is(err, errCapturesSpent) {
		return err
	}
	if err != nil {
		return wire.ResolveError(i+1, err)
	}
	p.captureLeft -= used
	if c := pin.Content(); c != nil {
		p.stages[i].Content = shownContent(pin, c)
	}
	p.stages[i].Uncaptured = pin.Uncaptured()
	return nil
}

// captureAsRequester captures, reading them with the requester's own file
// system identity, the files open had to capture but could not read with
// the run's (pipeline.Pinned.Uncaptured): the requester's program,
// execute-only for others (0711), asked to run as an account that may
// execute it but not read it. Left so, what ran would be whatever the
// file held when the run started, and its owner may rewrite it after the
// approval without changing any of its times (through a shared mapping).
// The capture tells the requester nothing: it could read the file anyway,
// and copy it where the run's account may read it. A file the requester
// may not read either stays uncaptured (contentUnbound).
func (p *runPlan) captureAsRequester() error {
	var unread []int
	for i, pin := range p.pinned {
		if pin.Uncaptured() {
			unread = append(unread, i)
		}
	}
	if len(unread) == 0 {
		return nil
	}
	requester := p.requester()
	return pipeline.AsUser(&requester, func() error {
		for _, i := range unread {
			if err := p.captureStage(i, p.pinned[i].CaptureUnread); err != nil {
				return err
			}
		}
		return nil
	})
}

// requester is the requester's own identity, as the kernel gave it at
// connect: its uid, gid and groups.
func (p *runPlan) requester() pipeline.Account {
	return pipeline.Account{UID: uint32(p.peer.UID), GID: uint32(p.peer.GID), Groups: p.peer.Groups}
}

// reserve takes n bytes of the daemon's budget of captured content for
// the plan's capture (pipeline.Pinned.Capture), or says the daemon is
// busy (an error wrapping errCapturesSpent).
func (p *runPlan) reserve(n int64) error {
	if err := p.captures.take(p.peer.UID, n); err != nil {
		return err
	}
	p.captured += n
	return nil
}

// unreserve gives back n bytes of what the plan reserved.
func (p *runPlan) unreserve(n int64) {
	if n <= 0 {
		return
	}
	p.captures.give(p.peer.UID, n)
	p.captured -= n
}

// shownContent is what a prompt shows of a stage's captured file c: its
// hash and size, a script's text, and whether the files beside it are
// root's alone.
func shownContent(pin *pipeline.Pinned, c *pipeline.Content) *approval.Content {
	shown := &approval.Content{SHA256: c.SHA256(), Size: c.Size()}
	if pin.Interpreted() {
		shown.Text, shown.Whole = c.Head(approval.ContentShownBytes)
		if dir := filepath.Dir(pin.Real); rootpath.Entry(pin.Real) != nil {
			shown.Beside = dir
		}
	}
	return shown
}

// leftOutHolding names the first directory of the fixed search path that
// p's search path left out and that holds an executable file named name,
// a bare name not found in p's, and why it was left out; "" when there
// is none. The operator learns why a command that is there is not found.
// The file is looked for with the requester's identity, so that the
// answer tells the requester nothing it could not find out itself (its
// link there to a file only root may reach says nothing of that file).
func (p *runPlan) leftOutHolding(name string) (dir, why string) {
	if len(p.leftOut) == 0 || strings.Contains(name, "/") {
		return "", ""
	}
	requester := p.requester()
	_ = pipeline.AsUser(&requester, func() error {
		for _, l := range p.leftOut {
			if st, err := os.Stat(filepath.Join(l.Dir, name)); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				dir, why = l.Dir, l.Why
				return nil
			}
		}
		return nil
	})
	return dir, why
}

// lookupRunAs is the account a request's run_as names: by name, or by
// number as "#UID", through NSS with its groups as initgroups(3) gives
// them. An account that does not exist is a [wire.RunAsError].
func lookupRunAs(name string) (pipeline.Account, error) {
	var a pipeline.Account
	var err error
	if id, ok := strings.CutPrefix(name, "#"); ok {
		var uid uint32
		if uid, err = wire.ParseAccountID(id); err == nil {
			a, err = pipeline.LookupAccount(uid)
		}
	} else {
		a, err = pipeline.LookupAccountName(name)
	}
	if err != nil {
		return pipeline.Account{}, wire.RunAsError("user", name)
	}
	return a, nil
}

// runGroup is the group a request's run_as_group names.
type runGroup struct {
	name string
	gid  uint32
}

// lookupRunGroup resolves run_as_group through NSS: by name, or by number
// as "#GID". A group that does not exist is a [wire.RunAsError].
func lookupRunGroup(name string) (runGroup, error) {
	var g *user.Group
	var err error
	if id, ok := strings.CutPrefix(name, "#"); ok {
		g, err = user.LookupGroupId(id)
	} else {
		g, err = user.LookupGroup(name)
	}
	if err != nil {
		return runGroup{}, wire.RunAsError("group", name)
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return runGroup{}, wire.RunAsError("group", name)
	}
	return runGroup{name: g.Name, gid: uint32(gid)}, nil
}

// userNameOf names uid, or gives its number when it has no passwd entry.
func userNameOf(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return strconv.Itoa(uid)
}
