package pipeline

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rootgate/rootgate/internal/rootpath"
	"golang.org/x/sys/unix"
)

// SearchPath is the only path a bare executable name is looked up in. It is
// also the PATH of every run (see [Env]); the daemon's own PATH and the
// request's are never used.
const SearchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// SafeSearchPath is [SearchPath] without the directories that someone
// other than root could put a file in, or put another directory in place
// of: a directory not owned by root or writable by its group or others
// (sticky or not: a new name is all it takes), or one whose path leads
// to it through an entry someone else may change ([rootpath.File]). A
// directory that does not exist is left out too (nothing is found
// there). leftOut says which directories were left out and why.
//
// A run as root (or as another account) that runs a command by name finds
// it in its PATH: a directory there that a requester can write to would
// run the requester's file with the run's identity, whatever the person
// approved (a maintainer script's `systemctl`, an `#!/usr/bin/env`
// line). Such a directory is typically /usr/local/bin handed over to a
// user for `npm -g`.
//
// The answer is kept for [safeSearchPathFor]: checking takes about 70
// system calls (BenchmarkSafeSearchPath), and directories' owners and
// modes seldom change.
func SafeSearchPath() (path string, leftOut []LeftOut) {
	safePath.mu.Lock()
	defer safePath.mu.Unlock()
	if now := time.Now(); safePath.at.IsZero() || now.Sub(safePath.at) >= safeSearchPathFor {
		safePath.path, safePath.leftOut = safeSearchPath()
		safePath.at = now
	}
	return safePath.path, safePath.leftOut
}

// LeftOut is a directory of [SearchPath] that [SafeSearchPath] left out,
// and why (a sentence about Dir).
type LeftOut struct {
	Dir, Why string
}

// safeSearchPathFor is how long [SafeSearchPath] keeps its answer.
const safeSearchPathFor = time.Second

// safePath is [SafeSearchPath]'s answer, and when it was found.
var safePath struct {
	mu      sync.Mutex
	at      time.Time
	path    string
	leftOut []LeftOut
}

// safeSearchPath finds [SafeSearchPath]'s answer.
func safeSearchPath() (path string, leftOut []LeftOut) {
	var kept []string
	for _, dir := range filepath.SplitList(SearchPath) {
		if err := rootsAlone(dir); err != nil {
			leftOut = append(leftOut, LeftOut{Dir: dir, Why: err.Error()})
			continue
		}
		kept = append(kept, dir)
	}
	return strings.Join(kept, ":"), leftOut
}

// rootsAlone says why someone other than root could change what the
// directory dir holds: see [SafeSearchPath].
func rootsAlone(dir string) error {
	real, st, err := rootpath.Walk(dir)
	switch {
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s: not a directory", rootpath.Where(dir, real))
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others", rootpath.Where(dir, real))
	}
	return nil
}

// RootsAlone is [rootpath.File] for path, the path p was pinned from: the
// walk must also end at the pinned file itself, so what is checked is
// what runs.
func (p *Pinned) RootsAlone(path string) error {
	return rootpath.Same(path, uint64(p.st.Dev), uint64(p.st.Ino))
}

// ErrNotFound is wrapped by the errors of [Resolve] when argv[0] names
// nothing that can be executed.
var ErrNotFound = errors.New("executable not found")

// ErrMagicLink is wrapped by the errors of [Resolve], [Pin] and [OpenDir]
// when a path leads through a /proc magic link (/proc/PID/cwd, root, exe,
// fd/N): those name a file as seen by the process that follows them, so
// the daemon and the run it starts would see different files. The kernel
// reports a symlink loop the same way, so the error names both.
var ErrMagicLink = errors.New("a symlink loop, or a path through a /proc magic link, which is refused")

// Executable is a resolved argv[0].
type Executable struct {
	Path   string // absolute path that will be executed
	Target string // the real path of the file Path names, when it differs from Path, else ""
}

// Resolve resolves argv0 as the kernel will find it when run in directory
// cwd:
//
//   - a name containing a '/' is used as is when absolute, or taken relative
//     to cwd, which must then be absolute;
//   - a bare name is looked up in [SearchPath] only, never in $PATH; entries
//     that are not executable are skipped, as a shell does.
//
// The result must be a regular file (after following symlinks) with at
// least one execute bit set. Whether the run-as user may execute it is
// found out when the run starts. Paths are followed with the calling
// thread's file system identity (see [AsUser]) and never through a /proc
// magic link.
//
// When nothing executable was found the error wraps [ErrNotFound]; its text
// reads `executable not found: "NAME"`, followed by the reason when argv0
// held a '/'. A path the caller may not follow (fs.ErrPermission) or one
// through a magic link ([ErrMagicLink]) is an error of its own, reading
// `resolve "NAME": REASON`. Any other error means argv0 could not be
// checked.
func Resolve(argv0, cwd string) (Executable, error) {
	p, fd, _, err := find(argv0, cwd, SearchPath)
	if err != nil {
		return Executable{}, err
	}
	defer unix.Close(fd)
	return described(p, fd)
}

// ResolvePinned is [Resolve] and [Pin] in one: the file it finds is the
// file it pins, opened once, so nothing can be swapped in between. Its
// errors are Resolve's, and Pin's once the file is found.
func ResolvePinned(argv0, cwd string) (Executable, *Pinned, error) {
	return ResolvePinnedIn(argv0, cwd, SearchPath)
}

// ResolvePinnedIn is [ResolvePinned] with a bare name looked up in the
// directories of search (colon-separated) instead of [SearchPath]: a part
// of it, as [SafeSearchPath] leaves.
func ResolvePinnedIn(argv0, cwd, search string) (Executable, *Pinned, error) {
	p, fd, st, err := find(argv0, cwd, search)
	if err != nil {
		return Executable{}, nil, err
	}
	pin, err := pinOpened(p, fd, st)
	if err != nil {
		return Executable{}, nil, err
	}
	e := Executable{Path: p}
	if pin.Real != p {
		e.Target = pin.Real
	}
	return e, pin, nil
}

// find finds argv0 as [Resolve] describes, a bare name in the directories
// of search, and returns its path, the file open (O_PATH) and its status.
func find(argv0, cwd, search string) (string, int, unix.Stat_t, error) {
	if !strings.Contains(argv0, "/") {
		if argv0 != "" {
			for _, dir := range filepath.SplitList(search) {
				p := dir + "/" + argv0
				if fd, st, err := openExecutable(p); err == nil {
					return p, fd, st, nil
				}
			}
		}
		return "", -1, unix.Stat_t{}, fmt.Errorf("%w: %q", ErrNotFound, argv0)
	}
	p := argv0
	if !filepath.IsAbs(p) {
		if !filepath.IsAbs(cwd) {
			return "", -1, unix.Stat_t{}, fmt.Errorf("resolve %q: cwd %q is not absolute", argv0, cwd)
		}
		p = joinRelative(cwd, argv0)
	}
	fd, st, err := openExecutable(p)
	if err != nil {
		if errors.Is(err, ErrMagicLink) || errors.Is(err, fs.ErrPermission) {
			return "", -1, unix.Stat_t{}, fmt.Errorf("resolve %q: %w", argv0, err)
		}
		return "", -1, unix.Stat_t{}, fmt.Errorf("%w: %q: %v", ErrNotFound, argv0, err)
	}
	return p, fd, st, nil
}

// joinRelative joins the relative name rel to the absolute directory dir.
// The result is cleaned unless rel holds a ".." element: removing ".."
// lexically can name another file than the kernel would when the element
// before it is a symlink, so then the path is kept as written.
func joinRelative(dir, rel string) string {
	if slices.Contains(strings.Split(rel, "/"), "..") {
		return strings.TrimSuffix(dir, "/") + "/" + rel
	}
	return filepath.Join(dir, rel)
}

// openPath opens p for [unix.O_PATH] (following symlinks, but never
// through a /proc magic link), plus extra flags. The error is the errno,
// or wraps [ErrMagicLink].
func openPath(p string, extra uint64) (int, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC | extra, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	for {
		fd, err := unix.Openat2(unix.AT_FDCWD, p, &how)
		switch err {
		case nil:
			return fd, nil
		case unix.EINTR, unix.EAGAIN:
			continue
		case unix.ELOOP:
			return -1, ErrMagicLink
		}
		return -1, err
	}
}

// realPath is the path of the open file fd as the kernel names it: its
// real path, every symlink resolved.
func realPath(fd int) (string, error) {
	return os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
}

// openExecutable opens p (O_PATH) if it is a regular file with an execute
// bit, and says why not otherwise.
func openExecutable(p string) (int, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := openPath(p, 0)
	if err != nil {
		return -1, st, err
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	switch {
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		err = errors.New("is a directory")
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		err = errors.New("not a regular file")
	case st.Mode&0o111 == 0:
		err = errors.New("not executable")
	}
	if err != nil {
		unix.Close(fd)
		return -1, st, err
	}
	return fd, st, nil
}

// described describes the checked path p, open as fd, filling in its real
// path.
func described(p string, fd int) (Executable, error) {
	real, err := realPath(fd)
	if err != nil {
		return Executable{}, fmt.Errorf("resolve %s: %w", p, err)
	}
	e := Executable{Path: p}
	if real != p {
		e.Target = real
	}
	return e, nil
}
