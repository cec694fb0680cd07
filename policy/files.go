package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/rootgate/rootgate/internal/rootpath"
)

// The policy as the daemon reads it: the main file, then the drop-ins in
// its directory [Dir] (docs/policy.md, "Drop-in files").

// DefaultFile is the policy file rootgated reads without --policy.
const DefaultFile = "/etc/rootgate/policy"

// DropInSuffix ends the name of every drop-in file that is read; other
// names in the directory (editor backups, package manager leftovers) are
// skipped, and so are names starting with ".".
const DropInSuffix = ".policy"

// Dir returns the drop-in directory of the policy file at path:
// path with ".d" appended (/etc/rootgate/policy.d for /etc/rootgate/policy).
func Dir(path string) string { return path + ".d" }

// LoadOptions says how [LoadFiles] reads.
type LoadOptions struct {
	// Trusted requires each file read, and the drop-in directory, to be
	// owned by root and writable by no group or other: the policy decides
	// what runs as root, and a file another uid may write is a way for
	// that uid to allow itself anything. So must be the path to each
	// ([rootpath.File]): every entry on the way root's, every
	// directory it is looked up in writable by root alone or sticky,
	// links followed as the kernel follows them. Otherwise a uid that owns
	// a directory (or a link) on the way could put another root file in
	// the policy's place, or take the policy, deny rules and all, away.
	// For a missing main file, so must be the path to the nearest
	// directory above it that exists.
	Trusted bool
}

// LoadFiles reads the policy file at path and then each drop-in of
// [Dir](path) whose name ends in [DropInSuffix] and does not start
// with ".", in lexical (byte) order, and returns them as one [Policy]: the
// main file's rules first, then each drop-in's. The order decides
// nothing but which of several rules of the same action is reported:
// the strictest rule that matches a stage decides it ([Policy.Evaluate]).
// Each [Rule] keeps its file and line. A missing main file or directory
// adds no rules. An empty path names no file (rootgated --policy ""): the
// policy has no rules, and nothing is read, whatever the working
// directory holds.
//
// The first file that does not parse stops the load with its
// [*ParseError]; a file or directory refused by opts with a
// [*FileError].
func LoadFiles(path string, opts LoadOptions) (*Policy, error) {
	if path == "" {
		return &Policy{}, nil
	}
	p, err := loadPolicyFile(path, opts, true)
	if err != nil {
		return nil, err
	}
	dir := Dir(path)
	d, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil
	}
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer d.Close()
	fi, err := d.Stat()
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if !fi.IsDir() {
		return nil, &FileError{Name: dir, Why: "not a directory"}
	}
	if err := checkTrusted(dir, fi, opts); err != nil {
		return nil, err
	}
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	slices.Sort(names)
	for _, name := range names {
		if strings.HasPrefix(name, ".") || !strings.HasSuffix(name, DropInSuffix) {
			continue
		}
		q, err := loadPolicyFile(filepath.Join(dir, name), opts, false)
		if err != nil {
			return nil, err
		}
		p.Rules = append(p.Rules, q.Rules...)
		p.files = append(p.files, q.name)
	}
	return p, nil
}

// loadPolicyFile reads one file; missingOK makes a missing file empty.
// The file is checked through the descriptor it is read from, so what is
// checked is what is read.
func loadPolicyFile(path string, opts LoadOptions, missingOK bool) (*Policy, error) {
	f, err := os.Open(path)
	if missingOK && errors.Is(err, fs.ErrNotExist) {
		if err := checkMissing(path, opts); err != nil {
			return nil, err
		}
		return &Policy{name: path}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &FileError{Name: path, Why: "not a regular file"}
	}
	if err := checkTrusted(path, fi, opts); err != nil {
		return nil, err
	}
	p, err := Parse(path, f)
	if err != nil {
		return nil, err
	}
	p.files = []string{path}
	return p, nil
}

// checkTrusted applies opts.Trusted to the file or directory name, open
// with status fi: it is root's and writable by root alone, and so is the
// path that leads to it, a walk that must end at that very file.
func checkTrusted(name string, fi fs.FileInfo, opts LoadOptions) error {
	if !opts.Trusted {
		return nil
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return &FileError{Name: name, Why: "cannot tell its owner"}
	}
	if st.Uid != 0 {
		return &FileError{Name: name, Why: fmt.Sprintf("owned by uid %d, not root", st.Uid)}
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return &FileError{Name: name, Why: fmt.Sprintf("writable by group or others (mode %04o)", fi.Mode().Perm())}
	}
	abs, err := rootpath.Abs(name)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	if err := rootpath.Same(abs, uint64(st.Dev), uint64(st.Ino)); err != nil {
		return &FileError{Name: name, Why: strings.TrimPrefix(err.Error(), abs+": ")}
	}
	return nil
}

// checkMissing applies opts.Trusted to a missing main file: the nearest
// entry above it on its path as written that exists must be reached by
// root's path alone, in a directory writable by root alone or sticky,
// or someone else could have removed the file.
func checkMissing(name string, opts LoadOptions) error {
	if !opts.Trusted {
		return nil
	}
	abs, err := rootpath.Abs(name)
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	for p := abs; ; {
		err := rootpath.Entry(p)
		if err == nil {
			return nil
		}
		trimmed := strings.TrimRight(p, "/")
		i := strings.LastIndexByte(trimmed, '/')
		if !errors.Is(err, fs.ErrNotExist) || i <= 0 {
			return &FileError{Name: name, Why: "missing, and " + strings.TrimPrefix(err.Error(), p+": ")}
		}
		p = trimmed[:i] // the entry above, as written
	}
}

// FileError reports a policy file or drop-in directory that is not
// read: "policy NAME: WHY".
type FileError struct {
	Name string
	Why  string
}

func (e *FileError) Error() string { return fmt.Sprintf("policy %s: %s", e.Name, e.Why) }

// Files returns the files p was read from, in the order read: for
// [LoadFiles] the main file (when it exists) and then each drop-in.
func (p *Policy) Files() []string {
	if p == nil {
		return nil
	}
	return p.files
}
