package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// SearchPath is the only path a bare executable name is looked up in. It is
// also the PATH of every run (see [Env]); the daemon's own PATH and the
// request's are never used.
const SearchPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ErrNotFound is wrapped by the errors of [Resolve] when argv[0] names
// nothing that can be executed.
var ErrNotFound = errors.New("executable not found")

// Executable is a resolved argv[0].
type Executable struct {
	Path   string // absolute path that will be executed
	Target string // if Path is a symlink: its final target (filepath.EvalSymlinks), else ""
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
// found out when the run starts.
//
// When nothing executable was found the error wraps [ErrNotFound]; its text
// reads `executable not found: "NAME"`, followed by the reason when argv0
// held a '/'. Any other error means argv0 could not be checked.
func Resolve(argv0, cwd string) (Executable, error) {
	if !strings.Contains(argv0, "/") {
		if argv0 != "" {
			for _, dir := range filepath.SplitList(SearchPath) {
				p := dir + "/" + argv0
				if checkExecutable(p) == nil {
					return executable(p)
				}
			}
		}
		return Executable{}, fmt.Errorf("%w: %q", ErrNotFound, argv0)
	}
	p := argv0
	if !filepath.IsAbs(p) {
		if !filepath.IsAbs(cwd) {
			return Executable{}, fmt.Errorf("resolve %q: cwd %q is not absolute", argv0, cwd)
		}
		p = joinRelative(cwd, argv0)
	}
	if err := checkExecutable(p); err != nil {
		return Executable{}, fmt.Errorf("%w: %q: %v", ErrNotFound, argv0, err)
	}
	return executable(p)
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

// checkExecutable reports why p is not a regular file with an execute bit.
func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		if pe, ok := errors.AsType[*os.PathError](err); ok {
			return pe.Err
		}
		return err
	}
	switch {
	case fi.IsDir():
		return errors.New("is a directory")
	case !fi.Mode().IsRegular():
		return errors.New("not a regular file")
	case fi.Mode().Perm()&0o111 == 0:
		return errors.New("not executable")
	}
	return nil
}

// executable describes the checked path p, filling in its symlink target.
func executable(p string) (Executable, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return Executable{}, fmt.Errorf("resolve %s: %w", p, err)
	}
	e := Executable{Path: p}
	if fi.Mode()&os.ModeSymlink != 0 {
		if e.Target, err = filepath.EvalSymlinks(p); err != nil {
			return Executable{}, fmt.Errorf("resolve %s: %w", p, err)
		}
	}
	return e, nil
}
