package pipeline

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stage is one process of a run.
type stage struct {
	cmd      *exec.Cmd
	shown    string   // the resolved path, when cmd.Path is a descriptor's
	pin      *Pinned  // the file executed through its descriptor, if any
	dir      *os.File // the working directory entered through its descriptor, if any
	startErr error
	gated    bool // startErr is the gate's
	pid      int
	begin    time.Time
	end      time.Time
	stderr   Capture

	// unshared: the stage's thread left the process's mount namespace
	// (fromMount), so it must end with the goroutine, never serve another.
	unshared bool
	// ownDir: dir was opened for this stage alone (in its own mount
	// namespace), to close once it started.
	ownDir bool

	mu     sync.Mutex // guards reaped; held while signalling the group
	reaped bool       // the leader is reaped (or about to be): its pid may be reused
}

// run waits for gate, starts the stage and reports on started (a gate's
// error is its start error); if the start succeeded, it
// waits for the stage to exit, kills its group, reaps it and reports on
// exited.
func (s *stage) run(gate func() error, started, exited chan<- struct{}) {
	// Waited for before the thread is locked: a locked goroutine that
	// blocks hands its processor over, and is handed one back, through
	// another thread each time.
	if s.startErr = gate(); s.startErr != nil {
		s.gated = true
		started <- struct{}{}
		return
	}
	// With Pdeathsig, the child is killed when the thread that started it
	// exits; keep that thread (and so the child) alive until the reap.
	runtime.LockOSThread()
	defer func() {
		if !s.unshared {
			runtime.UnlockOSThread()
		}
	}()

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
// working directory entered, through a descriptor (/proc/self/fd/N), or by
// its path, as its Pinned's mode says:
//
//   - byDescriptor: an ELF image runs through its held descriptor, or
//     through its captured Content; one not captured that someone other
//     than root and the run's user may write runs from a sealed copy made
//     here (Pinned.othersMayWrite): the kernel reads it at exec, after the
//     last check.
//   - byPath: a script runs by the name it was asked by (execName).
//   - fromMount: a captured script runs by that name too, in a mount
//     namespace of the stage's own where the name leads to its Content;
//     the interpreter is executed directly and traced until it opened it
//     (mountContent, traceScriptOpen).
//   - fromDescriptor3: the Content (or, uncaptured, a sealed copy made
//     here) goes to the child as its descriptor 3 (ExtraFiles): exec's
//     child side puts it in place with the stage's stdin, stdout and
//     stderr, and the interpreter opens it again by the name the kernel
//     gives it, /proc/self/fd/3.
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
	defer func() {
		if s.ownDir { // opened by mountContent, started or not
			s.dir.Close()
		}
	}()
	if s.cmd.Stdin == nil {
		// Opened here rather than by exec, so its number is known.
		null, err := openDevNull()
		if err != nil {
			return err
		}
		defer null.Close()
		s.cmd.Stdin = null
	}
	name := s.execName()
	mounted, copied, err := s.placeScript(name)
	if err != nil {
		return err
	}
	if copied != nil {
		defer copied.Close()
	}
	high, err := s.highestFd()
	if err != nil {
		return err
	}
	if s.pin != nil && s.pin.mode == byDescriptor {
		path, release, err := s.imageAbove(high)
		if err != nil {
			return err
		}
		defer release()
		s.cmd.Path = path
	}
	if s.dir != nil {
		dir, done, err := dupAbove(s.dir, s.cmd.Dir, high)
		if err != nil {
			return err
		}
		defer done()
		s.cmd.Dir = dir
	}
	err = s.cmd.Start()
	runtime.KeepAlive(s.pin)
	runtime.KeepAlive(s.dir)
	if err != nil || mounted == nil {
		return err
	}
	if err := traceScriptOpen(s.cmd.Process.Pid, name, mounted.Dev, mounted.Ino); err != nil {
		_ = s.cmd.Wait()
		return fmt.Errorf("%s: %w", s.shown, err)
	}
	return nil
}

// openDevNull opens /dev/null for reading, as a blocking file: exec hands
// it over as it is.
func openDevNull() (*os.File, error) {
	fd, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: os.DevNull, Err: err}
	}
	return os.NewFile(uintptr(fd), os.DevNull), nil
}

// placeScript sets how a script, run by name, is executed, as its
// Pinned's mode says (byPath, fromMount, fromDescriptor3; nothing for
// another stage). It returns the status of the content it mounted over
// the name (fromMount), and the sealed copy it made to run as descriptor
// 3, if it made one, which the caller closes once the stage started.
func (s *stage) placeScript(name string) (mounted *unix.Stat_t, copied *os.File, err error) {
	switch {
	case s.pin == nil:
	case s.pin.mode == byPath:
		s.cmd.Path = name
	case s.pin.mode == fromMount && s.unshare() == nil:
		if mounted, err = s.mountContent(name); err != nil {
			return nil, nil, err
		}
	case s.pin.mode == fromMount, s.pin.mode == fromDescriptor3:
		// fromMount where no mount namespace may be made (a container
		// without CAP_SYS_ADMIN): the capture runs as /proc/self/fd/3.
		script := s.pin.content.file()
		if script == nil {
			if copied, err = s.pin.sealedCopy("rootgate-script", maxScript); err != nil {
				return nil, nil, err
			}
			script = copied
		}
		s.cmd.ExtraFiles = []*os.File{script}
		s.cmd.Path = "/proc/self/fd/3"
	}
	return mounted, copied, nil
}

// highestFd is the highest descriptor the child is given: its stdin,
// stdout and stderr, which a pinned stage must have as files, and its
// ExtraFiles.
func (s *stage) highestFd() (int, error) {
	high := 0
	for _, v := range []any{s.cmd.Stdin, s.cmd.Stdout, s.cmd.Stderr} {
		f, ok := v.(*os.File)
		if !ok {
			return 0, errors.New("a pinned stage needs files for stdin, stdout and stderr")
		}
		high = max(high, int(f.Fd()))
	}
	for _, f := range s.cmd.ExtraFiles {
		high = max(high, int(f.Fd()))
	}
	return high, nil
}

// imageAbove is the /proc/self/fd name of the ELF image a byDescriptor
// stage is executed through, duplicated above high (dupAbove): its held
// descriptor, its captured Content, or, when someone other than root and
// the run's user may write the file, a sealed copy made here. release
// closes what it opened, once the stage started.
func (s *stage) imageAbove(high int) (path string, release func(), err error) {
	image := s.pin.f
	var copied *os.File
	switch {
	case s.pin.content != nil:
		image = s.pin.content.f
	case s.pin.othersMayWrite(s.runUID()):
		if copied, err = s.pin.sealedCopy("rootgate-image", maxImage); err != nil {
			return "", nil, err
		}
		image = copied
	}
	path, done, err := dupAbove(image, s.shown, high)
	if err != nil {
		if copied != nil {
			copied.Close()
		}
		return "", nil, err
	}
	return path, func() {
		done()
		if copied != nil {
			copied.Close()
		}
	}, nil
}

// dupAbove duplicates f (what: its name, for an error), close-on-exec,
// onto a number above what the child's side of exec may overwrite, high
// being the highest it is given: the child moves at most its error pipe
// and four descriptors up. It returns the duplicate's /proc/self/fd name
// and its close.
func dupAbove(f *os.File, what string, high int) (string, func(), error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, high+8)
	if errors.Is(err, unix.EINVAL) {
		// high+8 is at or past the descriptor limit: the daemon is
		// out of descriptors, as with EMFILE, which the caller
		// takes for its own lack, not the request's fault.
		err = unix.EMFILE
	}
	if err != nil {
		return "", nil, fmt.Errorf("duplicate %s: %w", what, err)
	}
	return "/proc/self/fd/" + strconv.Itoa(fd), func() { unix.Close(fd) }, nil
}

// execName is the name a script is run by: the one the request gave when
// it holds a '/' (a relative one is looked up in the working directory,
// as sudo runs it), else the path it was found at. The kernel hands it to
// the interpreter, which is how a script knows its own name ($0) and
// finds the files beside it.
func (s *stage) execName() string {
	if strings.Contains(s.cmd.Args[0], "/") {
		return s.cmd.Args[0]
	}
	return s.shown
}

// unshare gives the stage's thread a mount namespace of its own; the
// thread then ends with the stage's goroutine.
func (s *stage) unshare() error {
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		return err
	}
	s.unshared = true
	return nil
}

// mountContent, in the stage's own mount namespace (unshare), makes no
// mount made in it leave it, mounts the pinned script's Content
// there read-only over the file its name leads to (from the working
// directory), and sets the stage to run its interpreter directly, traced
// from its start (see traceScriptOpen), with the argv the kernel would
// have built from the #! line. It returns the mounted file's status.
func (s *stage) mountContent(name string) (*unix.Stat_t, error) {
	fail := func(err error) (*unix.Stat_t, error) {
		return nil, fmt.Errorf("%s: mount its captured content: %w", s.shown, err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fail(err)
	}
	tree, err := s.pin.content.detachedMount()
	if err != nil {
		return fail(err)
	}
	defer unix.Close(tree)
	at := unix.AT_FDCWD
	if s.dir != nil {
		// The held directory is reached through the daemon's own mount
		// namespace, where lookups from it would not see the mount: it
		// is opened again here, by its path, and must be the same.
		dir, err := sameDirHere(s.dir, s.cmd.Dir)
		if err != nil {
			return nil, err
		}
		s.dir = dir
		s.ownDir = true
		if !filepath.IsAbs(name) {
			at = int(dir.Fd())
		}
	}
	if err := unix.MoveMount(tree, "", at, name, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
		if err == unix.ENOENT {
			// The file the name led to was renamed over, or removed,
			// between the lookup and the mount.
			return nil, fmt.Errorf("%s %w: its name led to another file while its content was mounted", strconv.Quote(name), ErrChanged)
		}
		return fail(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(tree, &st); err != nil {
		return fail(err)
	}
	argv := []string{s.pin.interp}
	if s.pin.interpArg != "" {
		argv = append(argv, s.pin.interpArg)
	}
	s.cmd.Args = append(append(argv, name), s.cmd.Args[1:]...)
	s.cmd.Path = s.pin.interp
	s.cmd.SysProcAttr.Ptrace = true
	return &st, nil
}

// sameDirHere opens the directory at path in the calling thread's mount
// namespace, and checks that it is the directory held: the same device
// and inode. A directory renamed since it was opened fails the check.
func sameDirHere(held *os.File, path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("%s %w: %w", strconv.Quote(path), ErrChanged, err)
	}
	var here, there unix.Stat_t
	if err := unix.Fstat(fd, &here); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if err := unix.Fstat(int(held.Fd()), &there); err != nil || !sameFile(&here, &there) {
		unix.Close(fd)
		return nil, fmt.Errorf("%s %w", strconv.Quote(path), ErrChanged)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// runUID is the user the stage runs as: its credential's, or this
// process's.
func (s *stage) runUID() uint32 {
	if a := s.cmd.SysProcAttr; a != nil && a.Credential != nil {
		return a.Credential.Uid
	}
	return uint32(os.Geteuid())
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
