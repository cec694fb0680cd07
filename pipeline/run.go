package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultCap is how many bytes of each captured stream a run keeps when
// [Cmd].Cap is 0.
const DefaultCap = 16 << 20

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
	// Cap is how many bytes of each captured stream are kept; 0 means
	// DefaultCap.
	Cap int

	ran bool
}

// Capture is the start of a captured output stream.
type Capture struct {
	Data      []byte // the first Cap bytes
	Truncated bool   // more than Cap bytes were written
	Total     int64  // bytes written in all
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
func closeOnExec() error {
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
	limit  int    // bytes kept per capture
	stdin  []byte // fed to the first stage when stdinW is set

	childEnds []*os.File // pipe ends the children use; closed once started
	stdout    *os.File   // read end of the last stage's stdout
	stderr    []*os.File // read ends of each stage's stderr
	stdinW    *os.File   // write end of the first stage's stdin, or nil

	started chan struct{} // a value per stage once started or failed to
	exited  chan struct{} // a value per started stage once reaped

	out Capture
	tag string // the run's RunEnvKey value
}

// stage is one process of a run.
type stage struct {
	cmd      *exec.Cmd
	shown    string   // the resolved path, when cmd.Path is a descriptor's
	pin      *Pinned  // the file executed through its descriptor, if any
	dir      *os.File // the working directory entered through its descriptor, if any
	startErr error
	pid      int
	begin    time.Time
	end      time.Time
	stderr   Capture

	mu     sync.Mutex // guards reaped; held while signalling the group
	reaped bool       // the leader is reaped (or about to be): its pid may be reused
}

// prepare makes the pipes and the exec.Cmd of every stage.
func (c *Cmd) prepare() (r *runner, err error) {
	r = &runner{limit: cmp.Or(c.Cap, DefaultCap), stdin: c.Stdin}
	defer func() {
		if err != nil {
			closeAll(r.childEnds)
			closeAll(r.parentEnds())
		}
	}()
	pipe := func() (rd, wr *os.File, err error) {
		if rd, wr, err = os.Pipe(); err != nil {
			return nil, nil, fmt.Errorf("pipe: %w", err)
		}
		return rd, wr, nil
	}
	r.tag = newRunTag()
	// Never nil (that would make exec inherit our environment); the tag
	// comes last so that it wins over any entry of the same name.
	env := append(slices.Clip(c.Env), RunEnvKey+"="+r.tag)
	dir := cmp.Or(c.Dir, "/")
	var prevOut *os.File // read end of the previous stage's stdout
	for i, argv := range c.Argv {
		attr := &syscall.SysProcAttr{
			Setsid: true,
			// Safe from early firing: the thread that starts the child
			// stays locked to its goroutine until the child is reaped.
			Pdeathsig: syscall.SIGKILL,
		}
		if a := c.Account; a != nil {
			attr.Credential = &syscall.Credential{Uid: a.UID, Gid: a.GID, Groups: slices.Clone(a.Groups)}
		}
		cmd := &exec.Cmd{Path: c.Paths[i], Args: argv, Env: env, Dir: dir, SysProcAttr: attr}
		s := &stage{cmd: cmd, dir: c.DirFile}
		if c.Pinned != nil {
			s.pin, s.shown = c.Pinned[i], c.Paths[i]
		}
		r.stages = append(r.stages, s)

		switch {
		case i > 0:
			cmd.Stdin = prevOut
		case c.Stdin != nil:
			rd, wr, err := pipe()
			if err != nil {
				return r, err
			}
			r.childEnds = append(r.childEnds, rd)
			r.stdinW = wr
			cmd.Stdin = rd
		}
		// cmd.Stdin nil: exec opens /dev/null.

		rd, wr, err := pipe()
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

		if rd, wr, err = pipe(); err != nil {
			return r, err
		}
		r.childEnds = append(r.childEnds, wr)
		r.stderr = append(r.stderr, rd)
		cmd.Stderr = wr
	}
	return r, nil
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
		go s.run(r.started, r.exited)
	}
	for range r.stages {
		<-r.started
	}
	closeAll(r.childEnds)
	var err error
	for i, s := range r.stages {
		if s.startErr != nil {
			// Name the file as resolved, not the descriptor it ran through.
			if pe, ok := errors.AsType[*os.PathError](s.startErr); ok && s.shown != "" {
				pe.Path = s.shown
			}
			err = fmt.Errorf("stage %d: %w", i+1, s.startErr)
			break
		}
	}
	if err == nil {
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

// run starts the stage and reports on started; if the start succeeded, it
// waits for the stage to exit, kills its group, reaps it and reports on
// exited.
func (s *stage) run(started, exited chan<- struct{}) {
	// With Pdeathsig, the child is killed when the thread that started it
	// exits; keep that thread (and so the child) alive until the reap.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	s.begin = time.Now()
	reaper.starting.RLock()
	s.startErr = s.start()
	if s.startErr != nil {
		reaper.starting.RUnlock()
		started <- struct{}{}
		return
	}
	s.pid = s.cmd.Process.Pid
	reaper.mu.Lock()
	reaper.stages[s.pid] = true
	reaper.mu.Unlock()
	reaper.starting.RUnlock()
	started <- struct{}{}

	// Wait for the leader to exit without reaping it: while it is a zombie
	// its pid, which is also its group's id, cannot be reused, so its group
	// can be killed safely.
	var info unix.Siginfo
	var err error
	for {
		err = unix.Waitid(unix.P_PID, s.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err != unix.EINTR {
			break
		}
	}
	s.end = time.Now()
	s.mu.Lock()
	if err == nil {
		_ = unix.Kill(-s.pid, unix.SIGKILL)
	}
	s.reaped = true
	s.mu.Unlock()
	// A non-zero exit is an *exec.ExitError; the status is read from
	// ProcessState below.
	_ = s.cmd.Wait()
	reaper.mu.Lock()
	delete(reaper.stages, s.pid)
	reaper.mu.Unlock()
	exited <- struct{}{}
}

// start starts the stage's process. A pinned file is executed, and a held
// working directory entered, through a descriptor (/proc/self/fd/N).
//
// An interpreted file's descriptor goes to the child as its descriptor 3
// (ExtraFiles), which exec's child side puts in place with the stage's
// stdin, stdout and stderr, and which the interpreter opens again by the
// name the kernel gives it, /proc/self/fd/3.
//
// An ELF file's descriptor, and the directory's, stay close-on-exec: they
// are duplicated onto numbers above what the child's side of exec may
// overwrite. Before it moves the stage's files into place, the child dup3s
// its own descriptors onto the numbers just above the highest of them,
// which would replace a held descriptor there with a pipe (exec then
// fails with EACCES).
func (s *stage) start() error {
	if s.pin == nil && s.dir == nil {
		return s.cmd.Start()
	}
	if s.cmd.Stdin == nil {
		// Opened here rather than by exec, so its number is known.
		null, err := os.Open(os.DevNull)
		if err != nil {
			return err
		}
		defer null.Close()
		s.cmd.Stdin = null
	}
	if s.pin != nil && s.pin.interpreted {
		s.cmd.ExtraFiles = []*os.File{s.pin.f}
		s.cmd.Path = "/proc/self/fd/3"
	}
	high := 0
	for _, v := range []any{s.cmd.Stdin, s.cmd.Stdout, s.cmd.Stderr} {
		f, ok := v.(*os.File)
		if !ok {
			return errors.New("a pinned stage needs files for stdin, stdout and stderr")
		}
		high = max(high, int(f.Fd()))
	}
	for _, f := range s.cmd.ExtraFiles {
		high = max(high, int(f.Fd()))
	}
	// The child moves at most its error pipe and four descriptors up.
	above := func(f *os.File, what string) (string, func(), error) {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, high+8)
		if err != nil {
			return "", nil, fmt.Errorf("duplicate %s: %w", what, err)
		}
		return "/proc/self/fd/" + strconv.Itoa(fd), func() { unix.Close(fd) }, nil
	}
	if s.pin != nil && !s.pin.interpreted {
		path, done, err := above(s.pin.f, s.shown)
		if err != nil {
			return err
		}
		defer done()
		s.cmd.Path = path
	}
	if s.dir != nil {
		dir, done, err := above(s.dir, s.cmd.Dir)
		if err != nil {
			return err
		}
		defer done()
		s.cmd.Dir = dir
	}
	err := s.cmd.Start()
	runtime.KeepAlive(s.pin)
	runtime.KeepAlive(s.dir)
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

// signal sends sig to the stage's process group, unless the stage did not
// start or its leader has been reaped.
func (s *stage) signal(sig unix.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pid > 0 && !s.reaped {
		_ = unix.Kill(-s.pid, sig)
	}
}

// result reads how the stage ended; call it once the stage is reaped.
func (s *stage) result() StageResult {
	res := StageResult{ExitCode: -1, Stderr: s.stderr, Duration: s.end.Sub(s.begin)}
	ps := s.cmd.ProcessState
	if ps == nil {
		return res
	}
	ws, ok := ps.Sys().(syscall.WaitStatus)
	switch {
	case !ok:
		res.ExitCode = ps.ExitCode()
	case ws.Signaled():
		res.ExitCode = 128 + int(ws.Signal())
		res.Signal = signalName(ws.Signal())
	default:
		res.ExitCode = ws.ExitStatus()
	}
	return res
}

// signalName names sig as "SIGKILL", or "signal N" when it has no name.
func signalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return fmt.Sprintf("signal %d", int(sig))
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
	streams.Go(func() { drain(r.stdout, &r.out, r.limit) })
	for i, s := range r.stages {
		streams.Go(func() { drain(r.stderr[i], &s.stderr, r.limit) })
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
			for _, s := range r.stages {
				s.signal(unix.SIGKILL)
			}
		}
	}
	if kill != nil {
		kill.Stop()
	}
	// Every stage's group is dead; what is left of the run left its group.
	sweep(r.tag)

	// Every group has been killed; output still pending can only come from
	// a process that left its group. Stop waiting for it after drainWait.
	// The streams are waited for here, not in another goroutine: one
	// wake-up less on every run's path to its result.
	late := time.AfterFunc(drainWait, func() {
		now := time.Now()
		for _, f := range r.parentEnds() {
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

// drain reads f to its end into c, keeping the first limit bytes. While
// under the limit it reads straight into c.Data, so kept output is copied
// once, from the kernel. Past the limit it drops the rest without copying
// it: splice(2) moves it from the pipe to /dev/null (or, where that fails,
// it is read into a scratch buffer). When f's deadline passes it takes
// what is left in the pipe and returns.
func drain(f *os.File, c *Capture, limit int) {
	var scratch []byte // allocated only if splice cannot be used
	spliceOK := true
	for {
		var buf []byte
		switch {
		case len(c.Data) < limit:
			c.grow(len(c.Data)+1, limit)
			buf = c.Data[len(c.Data):cap(c.Data)]
		case spliceOK:
			err := c.discard(f, limit)
			if errors.Is(err, errNoSplice) {
				spliceOK = false
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				drainBuffered(f, c, limit, make([]byte, discardBuf))
			}
			return
		default:
			if scratch == nil {
				scratch = make([]byte, discardBuf)
			}
			buf = scratch
		}
		n, err := f.Read(buf)
		if len(c.Data) < limit {
			c.Data = c.Data[:len(c.Data)+n]
		}
		c.count(n, limit)
		if err == nil {
			continue
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if scratch == nil {
				scratch = make([]byte, discardBuf)
			}
			drainBuffered(f, c, limit, scratch)
		}
		return
	}
}

// errNoSplice: discard could not splice, and read nothing.
var errNoSplice = errors.New("splice to /dev/null not possible")

// discard moves what is written to the pipe f to /dev/null with
// splice(2), counting it, until the writers close it (nil) or f's read
// deadline passes (os.ErrDeadlineExceeded). The bytes never reach this
// process. It returns errNoSplice, having read nothing, when splice cannot
// be used here.
func (c *Capture) discard(f *os.File, limit int) error {
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return errNoSplice
	}
	defer null.Close()
	nfd := int(null.Fd())
	rc, err := f.SyscallConn()
	if err != nil {
		return errNoSplice
	}
	spliced := false
	for {
		var n int64
		var serr error
		err := rc.Read(func(fd uintptr) bool {
			n, serr = unix.Splice(int(fd), nil, nfd, nil, 1<<20, unix.SPLICE_F_MOVE|unix.SPLICE_F_NONBLOCK)
			return serr != unix.EAGAIN
		})
		switch {
		case err != nil:
			return err
		case serr == unix.EINTR:
			continue
		case serr != nil && !spliced:
			return errNoSplice
		case serr != nil:
			return serr
		case n == 0:
			return nil // end of file
		}
		spliced = true
		c.count(int(n), limit)
	}
}

// Capture buffer sizes: the first allocation, the growth factor, and the
// scratch buffer output past the cap is read into. A quiet stream costs
// captureStart bytes; a stream that reaches the cap has allocated about
// 4/3 of it in all, and holds at most 5/4 of it while growing the last
// time, which bounds a capturing run's memory (docs/performance.md).
const (
	captureStart = 4 << 10
	captureGrow  = 4
	discardBuf   = 64 << 10
)

// drainBuffered reads what f's pipe holds without waiting for more: Read
// returns nothing once the deadline has passed, even when data is there.
func drainBuffered(f *os.File, c *Capture, limit int, buf []byte) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		// Read at most one pipe's worth, so a writer cannot keep us here.
		left, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
		if err != nil {
			return
		}
		for left > 0 {
			n, err := unix.Read(int(fd), buf[:min(left, len(buf))])
			if err == unix.EINTR {
				continue
			}
			if n <= 0 {
				return
			}
			c.write(buf[:n], limit)
			left -= n
		}
	})
}

// write records p as written to the stream, keeping the first limit bytes.
func (c *Capture) write(p []byte, limit int) {
	if keep := min(len(p), limit-len(c.Data)); keep > 0 {
		c.grow(len(c.Data)+keep, limit)
		c.Data = append(c.Data, p[:keep]...)
	}
	c.count(len(p), limit)
}

// count records n more bytes written to the stream.
func (c *Capture) count(n, limit int) {
	c.Total += int64(n)
	if c.Total > int64(limit) {
		c.Truncated = true
	}
}

// grow makes Data's capacity at least need bytes (need is at most limit):
// captureGrow times the current capacity, at least captureStart, never
// beyond limit.
func (c *Capture) grow(need, limit int) {
	if need <= cap(c.Data) {
		return
	}
	size := min(max(captureGrow*cap(c.Data), captureStart, need), limit)
	grown := make([]byte, len(c.Data), size)
	copy(grown, c.Data)
	c.Data = grown
}
