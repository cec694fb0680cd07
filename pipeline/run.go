package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/internal/cgroup"
	"golang.org/x/sys/unix"
)

// NoCap, as [Cmd].Cap, keeps every byte: for a caller that writes the
// output on as it comes (StdoutTo, StderrTo) and holds none of it.
const NoCap = math.MaxInt

// DefaultKillGrace is the time between SIGTERM and SIGKILL when
// [Cmd].KillGrace is 0.
const DefaultKillGrace = 5 * time.Second

// drainWait bounds how long Run keeps reading output once every stage's
// leader has exited and its process group has been killed. Only a process
// that left its group can still be writing then.
const drainWait = 250 * time.Millisecond

// Cmd describes one run. Set its fields, then call [Cmd.Run] once; a Cmd
// cannot be reused.
type Cmd struct {
	// Argv holds one argv per stage; there must be at least one stage and
	// each argv must be non-empty. Argv[i][0] is passed as written.
	Argv [][]string
	// Paths holds the absolute path executed for each stage, as returned
	// by [Resolve]; it must have the same length as Argv.
	Paths []string
	// Pinned, when set, holds one [Pinned] executable per stage, pinned
	// when Paths were resolved: Run refuses to start when one is no
	// longer the file at its path or was modified, and executes each
	// through its held descriptor, never by its path. A stage whose file
	// is interpreted (a #! script) inherits that descriptor as its
	// descriptor 3, so that its interpreter can open the script through
	// it (/proc/self/fd/3, the name the kernel gives it); this is the one
	// exception to "no descriptor but 0, 1 and 2". The caller closes them
	// after Run.
	Pinned []*Pinned
	// Env is every stage's whole environment (see [Env]). Nil means an
	// empty environment, never the daemon's.
	Env []string
	// StageEnv, when set, holds entries added to Env for one stage alone
	// (such as the stage's own SUDO_COMMAND); nil or shorter than Argv
	// adds none to the stages past its end.
	StageEnv [][]string
	// Dir is the working directory, an absolute path; "" means "/". The
	// run-as user must be able to enter it.
	Dir string
	// DirFile, when set, is the working directory held open (see
	// [OpenDir]): the stages start in the directory it refers to, whatever
	// Dir names by then. Dir is still what error messages name.
	DirFile *os.File
	// Stdin is fed to the first stage through a pipe; nil means /dev/null.
	Stdin []byte
	// Account is the identity every stage runs as: its UID, GID and
	// supplementary Groups (an empty list clears them). Nil keeps the
	// caller's identity.
	Account *Account
	// Timeout bounds the run from the moment its stages have started;
	// 0 means no limit.
	Timeout time.Duration
	// KillGrace is the time between SIGTERM and SIGKILL when the run is
	// stopped; 0 means DefaultKillGrace.
	KillGrace time.Duration
	// Cap is how many bytes of the last stage's stdout are kept, and how
	// many of all the stages' stderr together; 0 means DefaultCap. The
	// stderr captures share their Cap, so that a run holds at most two
	// Caps whatever its number of stages: each takes room from it as its
	// bytes arrive, first come first served, and once it is spent a
	// stage's stderr keeps nothing more and is marked Truncated. Room is
	// taken a chunk at a time (see [Capture]), so a stream that ends with
	// its last chunk part full leaves that room unused by the others.
	Cap int
	// StdoutTo, when set, receives the kept bytes of the last stage's
	// stdout (the first Cap of them) as they are read, in order, while the
	// run goes on, instead of [Result].Stdout holding them: it holds only
	// their count and SHA-256 (see [Capture]). Its Write is called from
	// one goroutine, one call at a time, and the stream waits for it, so a
	// slow writer slows the last stage's output once the pipe is full. A
	// Write that returns an error is the last one: the rest of the kept
	// bytes are still read, counted and hashed, and what passes the Cap is
	// thrown away, so the run is never held by a writer that failed. Every
	// call has returned by the time Run does.
	StdoutTo io.Writer
	// StderrTo, when set, is asked once per stage, by its index in Argv,
	// where that stage's stderr goes: a stage it gives a writer has its
	// kept stderr written there as it is read, as StdoutTo's stdout is
	// (the stages' shared Cap still bounds what is kept, so a caller that
	// wants every byte sets Cap to [NoCap]), and its [StageResult].Stderr
	// holds only its count and SHA-256. Each stage's writer is called from
	// that stage's own goroutine: writers shared between stages must be
	// safe for concurrent use. A stage it gives nil is captured as usual.
	StderrTo func(stage int) io.Writer
	// Cgroup, when set, is the run's own cgroup (see [cgroup.Cgroup]): every
	// stage is created in it, and when the run ends everything in it is
	// killed, in place of the environment tag and the sweep (see the
	// package documentation). Run does not remove it; the caller does,
	// after reading what it needs ([Result].Usage holds its counters).
	Cgroup *cgroup.Cgroup
	// Gate, when set, is called once, after the pipes are made and the
	// stages are on their way to start, before any stage's process is
	// created; Run starts nothing when it returns an error, and returns
	// that error as a stage's start error. It lets the caller finish what
	// must come before the run (such as making a record durable) while
	// the run gets ready.
	Gate func() error
	// Tag, when the run has no Cgroup, is its environment tag (see
	// [RunEnvKey]); "" makes a random one. A caller that records the tag
	// before the run, such as where a later process can find it should
	// this one die mid-run, makes it with [NewRunTag].
	Tag string
	// Started, when set, is called once every stage has started, with
	// their processes: what a later process needs to find the run's
	// process groups and sessions should this one die mid-run (see
	// [KillLeftovers]). It is not called for a run that failed to start.
	Started func(stages []Leader)

	ran bool
}

// StageResult is how one stage ended.
type StageResult struct {
	ExitCode int           // exit status; a signal death gets 128+N; -1 if unknown
	Signal   string        // "SIGKILL" etc when killed by a signal, else ""
	Stderr   Capture       // the stage's stderr
	Duration time.Duration // from start to exit
}

// Result is how a run ended.
type Result struct {
	Stages   []StageResult // one per stage, in order
	Stdout   Capture       // last stage's stdout
	TimedOut bool          // the Timeout fired and the run was killed
	Canceled bool          // ctx ended before the run finished and it was killed
	// Usage is what the run's cgroup counted, read once everything in
	// it was killed; nil without [Cmd].Cgroup.
	Usage *cgroup.Usage
	// KillErr, with [Cmd].Cgroup only, says why the end of the run could
	// not make sure nothing of it is left (cgroup.kill failed, or a
	// process outlived SIGKILL by 10 seconds); nil otherwise.
	KillErr error
}

// Run starts every stage at once, waits for all of them and their output,
// and kills what is left of each stage's process group (see the package
// documentation). When the Timeout fires or ctx ends first, the run is
// stopped with SIGTERM, then SIGKILL after KillGrace, and TimedOut or
// Canceled is set, whichever came first.
//
// Before starting the stages, Run marks every descriptor of the calling
// process above 2 close-on-exec, so that none it inherited without that
// flag reaches a stage.
//
// Run returns an error only when the run could not be started: the Cmd is
// invalid or was run before, ctx had already ended, a pipe could not be made
// or a stage could not be started (stages are numbered from 1 in the
// message). Then nothing it started is left running. Exit codes and signals
// are results, not errors.
func (c *Cmd) Run(ctx context.Context) (*Result, error) {
	if c.ran {
		return nil, errors.New("run: already run")
	}
	c.ran = true
	if err := c.check(); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	if err := closeOnExec(); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	// Checked last before starting, to keep the window to the exec short.
	for i, p := range c.Pinned {
		if err := p.check(); err != nil {
			return nil, fmt.Errorf("run: stage %d: %w", i+1, err)
		}
	}
	r, err := c.prepare()
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	if err := r.start(); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	res := r.wait(ctx, c.Timeout, cmp.Or(c.KillGrace, DefaultKillGrace))
	return res, nil
}

// check reports what is wrong with c's fields.
func (c *Cmd) check() error {
	if len(c.Argv) == 0 {
		return errors.New("no stages")
	}
	if len(c.Paths) != len(c.Argv) {
		return fmt.Errorf("%d paths for %d stages", len(c.Paths), len(c.Argv))
	}
	for i, argv := range c.Argv {
		if len(argv) == 0 {
			return fmt.Errorf("stage %d: empty argv", i+1)
		}
		if !filepath.IsAbs(c.Paths[i]) {
			return fmt.Errorf("stage %d: path %q is not absolute", i+1, c.Paths[i])
		}
	}
	if c.Pinned != nil && len(c.Pinned) != len(c.Argv) {
		return fmt.Errorf("%d pinned executables for %d stages", len(c.Pinned), len(c.Argv))
	}
	for i, p := range c.Pinned {
		if p.Path != c.Paths[i] {
			return fmt.Errorf("stage %d: pinned %q, not %q", i+1, p.Path, c.Paths[i])
		}
	}
	if c.Dir != "" && !filepath.IsAbs(c.Dir) {
		return fmt.Errorf("dir %q is not absolute", c.Dir)
	}
	if c.Timeout < 0 || c.KillGrace < 0 || c.Cap < 0 {
		return errors.New("negative Timeout, KillGrace or Cap")
	}
	return nil
}

// closeOnExec marks every descriptor of this process above 2 close-on-exec.
// Go opens all its descriptors so; this catches those the process
// inherited without the flag, which would otherwise pass to every stage.
// It is one close_range(2) call; on a kernel without CLOSE_RANGE_CLOEXEC,
// it lists /proc/self/fd and marks each descriptor.
func closeOnExec() error {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return nil
	}
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("list descriptors: %w", err)
	}
	for _, name := range names {
		fd, err := strconv.Atoi(name)
		if err != nil || fd <= 2 {
			continue
		}
		flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
		if err != nil || flags&unix.FD_CLOEXEC != 0 {
			continue // closed since it was listed, or already marked
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, flags|unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("mark descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}

// runner is one run in progress.
type runner struct {
	stages []*stage
	stdin  []byte // fed to the first stage when stdinW is set

	childEnds []*os.File // pipe ends the children use; closed once started
	stdout    *os.File   // read end of the last stage's stdout
	stderr    []*os.File // read ends of each stage's stderr
	stdinW    *os.File   // write end of the first stage's stdin, or nil

	started chan struct{} // a value per stage once started or failed to
	exited  chan struct{} // a value per started stage once reaped

	out     Capture
	outTo   io.Writer           // Cmd.StdoutTo: where stdout goes as it is read, if not kept in out
	errTo   func(int) io.Writer // Cmd.StderrTo
	outLeft budget              // what the stdout capture may still allocate
	errLeft budget              // what the stderr captures, together, may still allocate
	tag     string              // the run's RunEnvKey value, without a cgroup
	cg      *cgroup.Cgroup      // the run's cgroup, if it has one
	gate    func() error        // Cmd.Gate, called once, by the first stage to start

	// What a caller recording the run for a later process needs.
	onStart func([]Leader) // Cmd.Started
	session bool           // every stage leads a session of its own
}

// prepare makes the pipes and the exec.Cmd of every stage.
func (c *Cmd) prepare() (r *runner, err error) {
	r = &runner{stdin: c.Stdin, outTo: c.StdoutTo, errTo: c.StderrTo, cg: c.Cgroup, gate: func() error { return nil }, onStart: c.Started}
	if c.Gate != nil {
		r.gate = sync.OnceValue(c.Gate)
	}
	limit := int64(cmp.Or(c.Cap, DefaultCap))
	r.outLeft.left.Store(limit)
	r.errLeft.left.Store(limit)
	defer func() {
		if err != nil {
			closeAll(r.childEnds)
			closeAll(r.parentEnds())
		}
	}()
	// Never nil (that would make exec inherit our environment).
	env := slices.Clip(c.Env)
	if env == nil {
		env = []string{}
	}
	if r.cg == nil {
		// Without a cgroup the tag is what the sweep looks for; it comes
		// last so that it wins over any entry of the same name.
		r.tag = cmp.Or(c.Tag, NewRunTag())
		env = append(env, RunEnvKey+"="+r.tag)
	}
	dir := cmp.Or(c.Dir, "/")
	// Each stage leads its own process group, the unit its kill signals.
	// It leads its own session too when it runs as another user than
	// root (SIGCONT may be sent to any process of one's session, whatever
	// its owner) or when this process has a terminal (a stage of its
	// session could open it as /dev/tty). Otherwise it is better off in
	// this session: not leading a session, it can never take a terminal
	// as its own, and the scheduler's autogroups (one per session) do
	// not split a pipeline's stages apart as they would one each.
	session := c.Account != nil && c.Account.UID != 0 || hasTerminal()
	r.session = session
	var prevOut *os.File // read end of the previous stage's stdout
	for i, argv := range c.Argv {
		attr := &syscall.SysProcAttr{
			Setsid:  session,
			Setpgid: !session,
			// Safe from early firing: the thread that starts the child
			// stays locked to its goroutine until the child is reaped.
			Pdeathsig: syscall.SIGKILL,
		}
		if r.cg != nil {
			// clone3 with CLONE_INTO_CGROUP: the stage is in the run's
			// cgroup from its first instruction.
			attr.UseCgroupFD, attr.CgroupFD = true, r.cg.FD()
		}
		if a := c.Account; a != nil {
			attr.Credential = &syscall.Credential{Uid: a.UID, Gid: a.GID, Groups: slices.Clone(a.Groups)}
		}
		stageEnv := env
		if i < len(c.StageEnv) && len(c.StageEnv[i]) > 0 {
			// Before the tag, which stays last.
			n := len(env) - tagEntries(r.tag)
			stageEnv = slices.Concat(env[:n], c.StageEnv[i], env[n:])
		}
		cmd := &exec.Cmd{Path: c.Paths[i], Args: argv, Env: stageEnv, Dir: dir, SysProcAttr: attr}
		s := &stage{cmd: cmd, dir: c.DirFile}
		if c.Pinned != nil {
			s.pin, s.shown = c.Pinned[i], c.Paths[i]
		}
		r.stages = append(r.stages, s)

		switch {
		case i > 0:
			cmd.Stdin = prevOut
		case c.Stdin != nil:
			rd, wr, err := pipe(ownWrite)
			if err != nil {
				return r, err
			}
			r.childEnds = append(r.childEnds, rd)
			r.stdinW = wr
			cmd.Stdin = rd
		}
		// cmd.Stdin nil: exec opens /dev/null.

		own := ownRead
		if i < len(c.Argv)-1 {
			own = ownNeither // between two stages
		}
		rd, wr, err := pipe(own)
		if err != nil {
			return r, err
		}
		r.childEnds = append(r.childEnds, wr)
		cmd.Stdout = wr
		if i < len(c.Argv)-1 {
			r.childEnds = append(r.childEnds, rd)
			prevOut = rd
		} else {
			r.stdout = rd
		}

		if rd, wr, err = pipe(ownRead); err != nil {
			return r, err
		}
		r.childEnds = append(r.childEnds, wr)
		r.stderr = append(r.stderr, rd)
		cmd.Stderr = wr
	}
	return r, nil
}

// Which end of a pipe this process uses.
const (
	ownNeither = -1
	ownRead    = 0
	ownWrite   = 1
)

// pipe makes a pipe. The end own (ownRead, ownWrite) is this process's,
// non-blocking and in the runtime's poller, so that its reads and writes
// can be given deadlines; the other ends go to children as they are,
// blocking, never registered with the poller, so that making them and
// handing them to exec takes no system call but pipe2 itself.
func pipe(own int) (rd, wr *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, fmt.Errorf("pipe: %w", err)
	}
	if own != ownNeither {
		// Both ends are open for a single direction, which F_SETFL
		// leaves alone.
		if _, err := unix.FcntlInt(uintptr(p[own]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
			unix.Close(p[0])
			unix.Close(p[1])
			return nil, nil, fmt.Errorf("pipe: %w", err)
		}
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// hasTerminal says whether this process has a controlling terminal: if
// /dev/tty opens at all, or fails other than for want of one (ENXIO), it
// counts as having one.
func hasTerminal() bool {
	fd, err := unix.Open("/dev/tty", unix.O_RDONLY|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	return err != unix.ENXIO
}

// parentEnds lists the pipe ends Run itself reads or writes.
func (r *runner) parentEnds() []*os.File {
	ends := append([]*os.File{r.stdout, r.stdinW}, r.stderr...)
	return slices.DeleteFunc(ends, func(f *os.File) bool { return f == nil })
}

// closeAll closes every file of fs, ignoring errors.
func closeAll(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// start starts every stage. If one cannot be started, it kills and reaps
// those that were, closes every pipe and returns the error of the first
// stage that failed.
func (r *runner) start() error {
	r.started = make(chan struct{}, len(r.stages))
	r.exited = make(chan struct{}, len(r.stages))
	for _, s := range r.stages {
		go s.run(r.gate, r.started, r.exited)
	}
	for range r.stages {
		<-r.started
	}
	closeAll(r.childEnds)
	var err error
	for i, s := range r.stages {
		if s.startErr != nil {
			// Name the file as resolved, not the descriptor it ran through.
			if pe, ok := errors.AsType[*os.PathError](s.startErr); ok && s.shown != "" && !s.gated {
				pe.Path = s.shown
			}
			err = fmt.Errorf("stage %d: %w", i+1, s.startErr)
			break
		}
	}
	if err == nil {
		if r.onStart != nil {
			leaders := make([]Leader, len(r.stages))
			for i, s := range r.stages {
				pid := s.cmd.Process.Pid
				leaders[i] = Leader{Pid: pid, Start: startTime(pid), Session: r.session}
			}
			r.onStart(leaders)
		}
		return nil
	}
	for _, s := range r.stages {
		if s.startErr == nil {
			s.signal(unix.SIGKILL)
		}
	}
	for _, s := range r.stages {
		if s.startErr == nil {
			<-r.exited
		}
	}
	closeAll(r.parentEnds())
	return err
}

// OpenDir opens the directory at path (following symlinks, but never
// through a /proc magic link) for [Cmd].DirFile, so that a run enters the
// directory that path named then, even if a component of path is replaced
// meanwhile. Path is followed, and the directory's search permission
// checked, with the calling thread's file system identity (see [AsUser]).
// The error is an *os.PathError, wrapping
// [ErrMagicLink] for a magic link.
func OpenDir(path string) (*os.File, error) {
	fd, err := openPath(path, unix.O_DIRECTORY)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	// An O_PATH open needs no search permission on the directory itself,
	// entering it does: looking up "." in it checks that.
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC}
	dot, err := unix.Openat2(fd, ".", &how)
	if err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	unix.Close(dot)
	return os.NewFile(uintptr(fd), path), nil
}

// wait runs the started stages to their end: it feeds stdin, drains the
// output, stops the run on timeout or when ctx ends, and collects the
// results.
func (r *runner) wait(ctx context.Context, timeout, grace time.Duration) *Result {
	var streams sync.WaitGroup // the goroutines feeding stdin and draining output
	if r.stdinW != nil {
		streams.Go(func() {
			// EPIPE (the stage does not read it all) is not an error.
			_, _ = r.stdinW.Write(r.stdin)
			_ = r.stdinW.Close()
		})
	}
	if r.outTo != nil {
		streams.Go(func() { stream(r.stdout, &r.out, &r.outLeft, r.outTo) })
	} else {
		streams.Go(func() { drain(r.stdout, &r.out, &r.outLeft) })
	}
	for i, s := range r.stages {
		if r.errTo != nil {
			if w := r.errTo(i); w != nil {
				streams.Go(func() { stream(r.stderr[i], &s.stderr, &r.errLeft, w) })
				continue
			}
		}
		streams.Go(func() { drain(r.stderr[i], &s.stderr, &r.errLeft) })
	}

	res := &Result{Stages: make([]StageResult, len(r.stages))}
	var timeoutC, killC <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	ctxDone := ctx.Done()
	var kill *time.Timer
	stop := func() {
		timeoutC, ctxDone = nil, nil
		for _, s := range r.stages {
			s.signal(unix.SIGTERM)
			// A stopped process acts on SIGTERM only once continued.
			s.signal(unix.SIGCONT)
		}
		kill = time.NewTimer(grace)
		killC = kill.C
	}
	for left := len(r.stages); left > 0; {
		select {
		case <-r.exited:
			left--
		case <-timeoutC:
			res.TimedOut = true
			stop()
		case <-ctxDone:
			res.Canceled = true
			stop()
		case <-killC:
			killC = nil
			if r.cg != nil {
				// Every process of the run, whatever group it is in;
				// a failure is the end of the run's too (Kill, below).
				_ = r.cg.KillNoWait()
			}
			for _, s := range r.stages {
				s.signal(unix.SIGKILL)
			}
		}
	}
	if kill != nil {
		kill.Stop()
	}
	// Every stage's group is dead; what is left of the run left its group.
	if r.cg != nil {
		res.KillErr = r.cg.Kill()
		u := r.cg.Usage()
		res.Usage = &u
		reapStrays()
	} else {
		sweep(r.tag)
	}

	// Every group has been killed; output still pending can only come from
	// a process that left its group. Stop waiting for it after drainWait.
	// The streams are waited for here, not in another goroutine: one
	// wake-up less on every run's path to its result.
	// The timer holds the pipe ends alone, not the runner: a stopped
	// timer may stay in the runtime's heap until its time, and must not
	// keep the run's captured output from being collected meanwhile.
	ends := r.parentEnds()
	late := time.AfterFunc(drainWait, func() {
		now := time.Now()
		for _, f := range ends {
			_ = f.SetDeadline(now) // a file closed meanwhile just says so
		}
	})
	streams.Wait()
	late.Stop()
	closeAll([]*os.File{r.stdout})
	closeAll(r.stderr)

	res.Stdout = r.out
	for i, s := range r.stages {
		res.Stages[i] = s.result()
	}
	return res
}
