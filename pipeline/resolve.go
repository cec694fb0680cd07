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

	"golang.org/x/sys/unix"
)

// SearchPath is the only path a bare executable name is looked up in. It is
// also the PATH of every run (see [Env]); the daemon's own PATH and the
// request's are never used.
const SearchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

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
	p, fd, _, err := find(argv0, cwd)
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
	p, fd, st, err := find(argv0, cwd)
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

// find finds argv0 as [Resolve] describes, and returns its path, the file
// open (O_PATH) and its status.
func find(argv0, cwd string) (string, int, unix.Stat_t, error) {
	if !strings.Contains(argv0, "/") {
		if argv0 != "" {
			for _, dir := range filepath.SplitList(SearchPath) {
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
