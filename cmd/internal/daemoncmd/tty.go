package daemoncmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/daemon"
	"github.com/rootgate/rootgate/internal/peerid"
	"github.com/rootgate/rootgate/internal/rootpath"
	"github.com/rootgate/rootgate/pipeline"
	"golang.org/x/sys/unix"
)

// The daemon's own terminal (--tty). rootgated links no terminal UI: it
// runs rootgate's approver on that terminal as its child (rootgate approve
// with clientArg), attached over a socket pair as the approver the daemon
// vouches for, and hands it its log lines, which the child prints above
// its screen, as nothing else may write to the terminal while it draws.

// clientArg, after "approve", makes rootgate the approver of a rootgated
// --tty: its descriptor 3 is its end of the socket pair, 4 the daemon's
// log. cmd/rootgate's daemonTTYArg is the same word.
const clientArg = "--internal-daemon-tty"

// childWait bounds how long the daemon waits for its terminal's approver
// to end once told to, before it kills it.
const childWait = 5 * time.Second

// ttyApprover is the terminal rootgated --tty was started on and the
// approver to run there.
type ttyApprover struct {
	name     string // the terminal, e.g. "pts/3"
	operator string // who sits there: the sudo user under sudo
	// peer is the approver as the broker is to know it: the operator's
	// uid and the uids that could control the terminal.
	peer   remote.Peer
	client *os.File // the rootgate to run, open: it runs by this descriptor
}

// openTTY finds the daemon's controlling terminal, who could control it
// and the rootgate to run there ([approveClient]).
func openTTY() (*ttyApprover, error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, configErr(fmt.Errorf("--tty: no controlling terminal: %w", err))
	}
	tty.Close()
	t := &ttyApprover{name: approval.TerminalName(), operator: approval.OperatorName()}
	// Who could type into this terminal: the daemon's ancestry (sudo, a
	// tmux server, sshd), login uid, SUDO_UID and terminals, not only the
	// owner of sudo's inner pty.
	controllers, err := peerid.Controllers(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("--tty: cannot tell who controls this terminal: %w", err)
	}
	// /dev/tty's own inode is root's: the terminal's owner is that of the
	// device the standard descriptors name.
	owner := deviceOwner("/dev/" + t.name)
	if owner >= 0 {
		controllers = append(controllers, owner)
	}
	slices.Sort(controllers)
	controllers = slices.Compact(controllers)
	t.peer = remote.Peer{UID: operatorUID(t.operator, owner), User: t.operator, Controllers: controllers}
	if t.client, err = approveClient(); err != nil {
		return nil, configErr(err)
	}
	return t, nil
}

// approveClient opens the rootgate whose approver rootgated --tty runs,
// as root, on its terminal: rootgate next to rootgated's own executable,
// else in the fixed search path of runs ([pipeline.SearchPath]), never
// $PATH. A root daemon must not run a file that anyone could change who
// could not already change rootgated itself, so a file is taken only when
// only root can change it and the path to it ([rootpath.Same]), or, next
// to rootgated, when it is a regular file of rootgated's owner that no one
// else can write unless they can write rootgated too (a checkout built by
// its user and started with sudo ./bin/rootgated --tty: that user could
// change rootgated as well). A file next to rootgated that fails the
// check is refused, not passed over for one in the search path. It is
// opened, checked and run by its descriptor, so what was checked is what
// runs.
func approveClient() (*os.File, error) {
	// One next to rootgated is the one meant, or none is: a file there
	// that fails the check is refused, not passed over for another.
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--tty: cannot tell where rootgated is: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return nil, fmt.Errorf("--tty: %w", err)
	}
	candidates := []string{filepath.Join(filepath.Dir(self), "rootgate")}
	for _, dir := range filepath.SplitList(pipeline.SearchPath) {
		candidates = append(candidates, filepath.Join(dir, "rootgate"))
	}
	for i, p := range candidates {
		if _, err := os.Lstat(p); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		self := &st
		if i > 0 {
			self = nil
		}
		f, err := openClient(p, self)
		if err != nil {
			return nil, fmt.Errorf("--tty: will not run %s as root for the approver on this terminal: %w", p, err)
		}
		return f, nil
	}
	return nil, fmt.Errorf("--tty: no rootgate next to rootgated (%s) or in %s: rootgated runs rootgate approve on its terminal", filepath.Dir(self), pipeline.SearchPath)
}

// openClient opens path, a rootgate rootgated may run as root: one only
// root can change, or, with self (rootgated's own executable, in the same
// directory), one that only those who can write self can write.
func openClient(path string, self *unix.Stat_t) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, errors.New("it is a symbolic link")
	}
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
		f.Close()
		return nil, errors.New("it is not an executable file")
	}
	rootOnly := rootpath.Same(path, st.Dev, st.Ino)
	if rootOnly == nil {
		return f, nil
	}
	if self != nil && st.Uid == self.Uid && st.Mode&0o022&^self.Mode == 0 && (st.Mode&0o020 == 0 || st.Gid == self.Gid) {
		return f, nil
	}
	f.Close()
	if self != nil {
		return nil, fmt.Errorf("others than root and rootgated's owner (uid %d) can change it: %v", self.Uid, rootOnly)
	}
	return nil, fmt.Errorf("others than root can change it: %v", rootOnly)
}

// running is the approver child on the terminal.
type running struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when it has exited
	err    error         // its exit, once done is closed
	cancel context.CancelFunc
	served chan struct{} // closed when the daemon has stopped serving it
	log    *termLog
	once   sync.Once
}

// start runs the approver on the terminal and serves it with srv until
// stop; it returns once the approver is attached, so the requests that
// follow are put to it. log, when set, is the daemon's log on that
// terminal, which goes to the approver while it runs.
func (t *ttyApprover) start(srv *daemon.Server, log *termLog) (*running, error) {
	// t.client is the caller's to close (run), once the child has it.
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("--tty: socketpair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "approver"), os.NewFile(uintptr(fds[1]), "approver")
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("--tty: %w", err)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		theirs.Close()
		c.Close()
		return nil, fmt.Errorf("--tty: %w", err)
	}
	// The child runs the client through a descriptor of its own: its
	// descriptors 3 and 4 are the ExtraFiles, and the ones it moves them
	// through while it sets them up are the next few, so one at 16 or
	// above is still the client's when it executes it. (t.client's own
	// number may be 3 or 4: the child would execute the socket there.)
	exe, err := unix.FcntlInt(t.client.Fd(), unix.F_DUPFD_CLOEXEC, 16)
	if err != nil {
		theirs.Close()
		c.Close()
		pr.Close()
		pw.Close()
		return nil, fmt.Errorf("--tty: %w", err)
	}
	defer unix.Close(exe)
	cmd := &exec.Cmd{
		Path:  "/proc/self/fd/" + strconv.Itoa(exe),
		Args:  []string{"rootgate", "approve", clientArg},
		Env:   childEnv(os.Environ()),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		ExtraFiles: []*os.File{theirs, pr},
	}
	err = cmd.Start()
	// The child's ends are its alone: its exit closes them.
	theirs.Close()
	pr.Close()
	if err != nil {
		c.Close()
		pw.Close()
		return nil, fmt.Errorf("--tty: cannot start rootgate approve on this terminal: %w", err)
	}
	t.peer.PID = cmd.Process.Pid
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cmd: cmd, done: make(chan struct{}), cancel: cancel, served: make(chan struct{}), log: log}
	go func() {
		r.err = cmd.Wait()
		close(r.done)
	}()
	attached := make(chan struct{})
	go func() {
		defer close(r.served)
		_ = srv.ServeTerminal(ctx, c.(*net.UnixConn), t.peer, func() {
			// From here on the approver draws on the terminal: the log
			// goes to it, before the attach is logged.
			if log != nil {
				log.toChild(pw)
			} else {
				pw.Close()
			}
			close(attached)
		})
	}()
	select {
	case <-attached:
		return r, nil
	case <-r.served:
		select {
		case <-attached:
			// Attached, and already gone: the attach took pw (to the
			// log, or closed it).
			r.stop()
			return nil, fmt.Errorf("--tty: rootgate approve attached on this terminal and ended at once: %v", r.err)
		default:
		}
		if log != nil {
			log.toTerminal()
		}
		pw.Close()
		r.stop()
		return nil, fmt.Errorf("--tty: rootgate approve did not attach on this terminal: %v", r.err)
	}
}

// Done is closed when the approver has exited.
func (r *running) Done() <-chan struct{} { return r.done }

// stop ends the approver (its connection first: it then exits by itself),
// kills it if it has not exited within childWait, and gives the terminal
// back to the daemon's log.
func (r *running) stop() {
	r.once.Do(func() {
		r.cancel()
		<-r.served
		select {
		case <-r.done:
		case <-time.After(childWait):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if r.log != nil {
			r.log.toTerminal()
		}
	})
}

// childEnv is the approver's environment: the daemon's, without what
// systemd hands the daemon alone.
func childEnv(env []string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return k == "NOTIFY_SOCKET" || strings.HasPrefix(k, "LISTEN_") || strings.HasPrefix(k, "WATCHDOG_")
	})
}

// stderrIsTerminal reports whether the daemon's stderr is a terminal: its
// log is then written there, which the approver's screen must take over;
// otherwise (2>file, the journal) it goes where it went.
func stderrIsTerminal(stderr io.Writer) bool {
	f, ok := stderr.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// maxPendingLog bounds the log bytes the approver has not taken yet.
const maxPendingLog = 1 << 20

// termLog is where the daemon's log goes under --tty: the terminal
// itself, but to the approver while it runs there, which prints each line
// above its screen. It never blocks the daemon on the approver: bytes it
// has not taken yet are bounded, and whole writes past the bound are
// dropped and counted. It is safe for concurrent use.
type termLog struct {
	terminal io.Writer

	mu      sync.Mutex // guards the fields that follow
	child   *os.File   // the approver's log, or nil
	pending []byte
	dropped int
	wake    chan struct{}
	flushed chan struct{} // closed when the writer to child has ended
}

func (l *termLog) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.child == nil {
		return l.terminal.Write(b)
	}
	if len(l.pending)+len(b) > maxPendingLog {
		l.dropped += len(b)
		return len(b), nil
	}
	l.pending = append(l.pending, b...)
	select {
	case l.wake <- struct{}{}:
	default:
	}
	return len(b), nil
}

// toChild sends the log to w, the approver's end, from now on.
func (l *termLog) toChild(w *os.File) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.child, l.wake, l.flushed = w, make(chan struct{}, 1), make(chan struct{})
	go l.send(w, l.wake, l.flushed)
}

// send writes what is pending to w until w is closed.
func (l *termLog) send(w *os.File, wake <-chan struct{}, flushed chan<- struct{}) {
	defer close(flushed)
	for range wake {
		l.mu.Lock()
		b, dropped := l.pending, l.dropped
		l.pending, l.dropped = nil, 0
		l.mu.Unlock()
		if dropped > 0 {
			b = fmt.Appendf(b, "rootgated: %d bytes of log output dropped: the approver on this terminal did not take them\n", dropped)
		}
		if _, err := w.Write(b); err != nil {
			return
		}
	}
}

// toTerminal sends the log to the terminal again, with what the approver
// did not take.
func (l *termLog) toTerminal() {
	l.mu.Lock()
	child, wake, flushed := l.child, l.wake, l.flushed
	l.child = nil
	l.mu.Unlock()
	if child == nil {
		return
	}
	close(wake)
	child.Close() // the approver is gone: a write blocked on it ends
	<-flushed
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) > 0 {
		_, _ = l.terminal.Write(l.pending)
	}
	l.pending = nil
}

var _ io.Writer = (*termLog)(nil)

// deviceOwner is the owner of the file at path, or -1: for a terminal,
// a uid that could type into it, so one of its controllers.
func deviceOwner(path string) int {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return -1
	}
	return int(st.Uid)
}
