// Package rootpath says whether someone other than root could change
// what a path names, or the file it names, by walking the path as the
// kernel walks it. The daemon asks before it lets a policy rule run a
// file as root, and before it trusts a policy file or a directory it
// writes in.
package rootpath

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// File says why someone other than root could change which file the
// absolute path names, or that file: it is nil when every entry the
// kernel looks up on the way (each directory, each symbolic link, and
// the file) is root's, and every directory it looks one up in is
// writable by root alone, or has the sticky bit (where no one may remove
// or rename another's entry, so a root entry stays). The file itself is
// writable by root alone, sticky or not. Links are followed as the
// kernel follows them, ".." after a link included, so a link of root's
// that leads through a directory or a link of someone else's is caught,
// as is a link of someone else's in a sticky /tmp.
//
// A rule that allows a path as root means the file root put there: a
// path the requester can re-point (its own link to a root program) would
// choose what runs next time the rule allows it.
func File(path string) error {
	real, st, err := Walk(path)
	switch {
	case err != nil:
		return err
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others", Where(path, real))
	}
	return nil
}

// Same is [File] for a path whose file is already open, with device dev
// and inode ino: the walk must also end at that file, so what is checked
// is what is read or run.
func Same(path string, dev, ino uint64) error {
	real, st, err := Walk(path)
	switch {
	case err != nil:
		return err
	case uint64(st.Dev) != dev || uint64(st.Ino) != ino:
		return fmt.Errorf("%s no longer leads to the file found there", path)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by group or others", Where(path, real))
	}
	return nil
}

// Entry says why someone other than root could change which file the
// absolute path names, whether or not a file is there now: the directory
// it is in is walked as [File] walks a path, and must be writable by
// root alone or sticky (where no one may remove or rename root's entry;
// an entry someone else makes there is theirs, which the caller, reading
// it, sees). A path that ends in "." or ".." names no entry of its own,
// and is refused.
func Entry(path string) error {
	trimmed := strings.TrimRight(path, "/")
	i := strings.LastIndexByte(trimmed, '/')
	if !filepath.IsAbs(path) || i < 0 {
		if trimmed == "" && filepath.IsAbs(path) {
			return dirAlone(path, "/") // "/" itself
		}
		return fmt.Errorf("%s is a relative path", path)
	}
	dir, name := trimmed[:i], trimmed[i+1:]
	if name == "." || name == ".." {
		return fmt.Errorf("%s ends in %s: it names no entry of its own", path, name)
	}
	if dir == "" {
		dir = "/"
	}
	return dirAlone(path, dir)
}

// dirAlone walks dir, in an error about path, and requires a directory
// writable by root alone or sticky.
func dirAlone(path, dir string) error {
	real, st, err := walk(dir, path)
	switch {
	case err != nil:
		return err
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s: not a directory", Where(path, real))
	case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
		return fmt.Errorf("%s is writable by group or others", Where(path, real))
	}
	return nil
}

// Abs is path made absolute against the working directory without
// cleaning it: "x/../y" keeps its "..", which the kernel resolves after
// following x if x is a link, not by dropping x.
func Abs(path string) (string, error) {
	if filepath.IsAbs(path) {
		return path, nil
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	return wd + "/" + path, nil
}

// maxLinks is how many symbolic links the kernel follows in one lookup
// (MAXSYMLINKS) before it fails with ELOOP.
const maxLinks = 40

// Walk walks the absolute path entry by entry as [File] says, each entry
// root's, and returns the file it leads to (its real path) and that
// file's status: whether the file may be written by others, and what it
// must be, is the caller's to check. A symbolic link's target is walked
// in its place.
func Walk(path string) (real string, st unix.Stat_t, err error) {
	return walk(path, path)
}

// walk is Walk, its errors about named (path, or a path in the directory
// path).
func walk(path, named string) (real string, st unix.Stat_t, err error) {
	if !filepath.IsAbs(path) {
		return "", st, fmt.Errorf("%s is a relative path", named)
	}
	var dirSt unix.Stat_t
	dir, todo, links := "/", strings.Split(path[1:], "/"), 0
	if err := unix.Lstat(dir, &dirSt); err != nil {
		return "", st, fmt.Errorf("%s: /: %w", named, err)
	}
	if dirSt.Uid != 0 {
		return "", st, fmt.Errorf("%s: / is owned by uid %d, not by root", named, dirSt.Uid)
	}
	st = dirSt
	for len(todo) > 0 {
		name := todo[0]
		todo = todo[1:]
		switch name {
		case "", ".":
			continue
		case "..":
			// Its parent was walked on the way in.
			dir = filepath.Dir(dir)
			if err := unix.Lstat(dir, &dirSt); err != nil {
				return "", st, fmt.Errorf("%s: %s: %w", named, dir, err)
			}
			st = dirSt
			continue
		}
		// An entry of dir is looked up: whoever may add, remove or
		// rename its entries chooses what the name leads to.
		if dirSt.Mode&0o022 != 0 && dirSt.Mode&unix.S_ISVTX == 0 {
			return "", st, fmt.Errorf("%s is writable by group or others", Where(named, dir))
		}
		entry := filepath.Join(dir, name)
		if err := unix.Lstat(entry, &st); err != nil {
			return "", st, fmt.Errorf("%s: %w", Where(named, entry), err)
		}
		if st.Uid != 0 {
			return "", st, fmt.Errorf("%s is owned by uid %d, not by root", Where(named, entry), st.Uid)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFLNK {
			dir, dirSt = entry, st
			continue
		}
		if links++; links > maxLinks {
			return "", st, fmt.Errorf("%s: %w", named, unix.ELOOP)
		}
		target, err := os.Readlink(entry)
		if err != nil {
			return "", st, fmt.Errorf("%s: %w", named, err)
		}
		if filepath.IsAbs(target) {
			dir = "/"
			if err := unix.Lstat(dir, &dirSt); err != nil {
				return "", st, fmt.Errorf("%s: /: %w", named, err)
			}
		}
		todo = append(strings.Split(target, "/"), todo...)
		st = dirSt
	}
	return dir, st, nil
}

// Where names the file at on the way to path, in an error about path.
func Where(path, at string) string {
	if at == path {
		return path
	}
	return path + ": " + at
}
