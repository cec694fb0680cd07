package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Runs is where each of rootgated's runs gets a cgroup v2 of its own: a
// directory named for its request in Parent, which holds nothing else.
// Make it with [SetupRuns]; a nil *Runs means runs are contained the
// fallback way (sessions, process groups, the subreaper and the
// environment tag: docs/security.md).
type Runs struct {
	// Parent is the cgroup the runs' cgroups are made in.
	Parent string
	// Memory and Tasks say whether a memory (memory.max) or a task
	// (pids.max) limit can be enforced: nil when it can, else why not.
	Memory, Tasks error
	// Limits apply to every run (rootgated's --run-memory-max and
	// --run-tasks-max).
	Limits Limits

	lock *os.File // Parent, held with an exclusive flock
	// leaf is the daemon's own cgroup when it moved itself into one
	// (OWN/daemon, under a unit with Delegate=yes); "" otherwise.
	leaf string
}

// cgroupMark is the extended attribute (value "1") that marks a cgroup
// as one rootgated made: each run's, as soon as it is made, and the
// probe's. At start the daemon kills and removes only marked cgroups of
// its parent, and a parent holding others is a configuration error (see
// [Runs.Foreign]). Only a cgroup's owner (or CAP_FOWNER) can set a
// user.* attribute on it, and the cgroups rootgated makes are root's;
// unlike trusted.*, which needs CAP_SYS_ADMIN in the initial user
// namespace, it can be set by root in a container (Linux 5.7 and later:
// older kernels lack cgroup.kill anyway).
const cgroupMark = "user.rootgate.run"

// Modes of [SetupRuns].
const (
	Auto = "auto"
	None = "none"
)

// errNotDelegated: the daemon's own cgroup is not the tree's root and was
// not delegated to it, so it must not make cgroups there.
var errNotDelegated = errors.New("not delegated to rootgated (Delegate=yes in its unit)")

// SetupRuns works out where runs' cgroups go; spec is [Auto], [None]
// or a directory of a cgroup2 file system.
//
// Auto: when the daemon is in the cgroup v2 tree's root (no service
// manager put it anywhere), runs go in ROOT/rootgate. When it is in a
// cgroup delegated to it (a systemd unit with Delegate=yes: systemd
// marks it with the trusted.delegate attribute), the daemon first moves
// itself into the leaf OWN/daemon, as cgroup v2 lets only leaves hold
// processes once controllers are enabled below, and runs go in OWN/runs.
// Anywhere else it makes no cgroup. A directory named: runs go in it
// (made when missing); the daemon stays where it is.
//
// The memory and pids controllers are enabled for the runs where the
// tree offers them. Parent is held locked, so that two daemons never
// share it (each kills the other's leftovers at start). The error says
// why runs cannot have cgroups there: for auto the caller falls back,
// for a directory named it stops. SetupRuns looks at no cgroup in
// Parent but its own probe: [Runs.Foreign] lists the others.
func SetupRuns(spec string) (*Runs, error) {
	if spec == None {
		return nil, errors.New("turned off (--cgroup none)")
	}
	var parent, leaf string
	var chain []string // cgroups whose subtree_control must enable a controller, top first
	if spec == Auto || spec == "" {
		own, root, err := Own()
		if err != nil {
			return nil, err
		}
		switch {
		case root:
			parent = filepath.Join(own, "rootgate")
			chain = []string{own, parent}
		case delegated(own):
			if err := enterLeaf(own); err != nil {
				return nil, err
			}
			leaf = filepath.Join(own, "daemon")
			parent = filepath.Join(own, "runs")
			chain = []string{own, parent}
		default:
			return nil, fmt.Errorf("%s: %w", own, errNotDelegated)
		}
	} else {
		if !filepath.IsAbs(spec) {
			return nil, fmt.Errorf("%s: not an absolute path", spec)
		}
		parent = filepath.Clean(spec)
		chain = []string{parent}
	}
	if err := os.Mkdir(parent, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return nil, fmt.Errorf("%s: %w", parent, err)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(parent, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", parent, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("%s: not in a cgroup2 file system", parent)
	}
	if err := unix.Access(filepath.Join(parent, "cgroup.procs"), unix.W_OK); err != nil {
		return nil, fmt.Errorf("%s: not writable: %w", parent, err)
	}
	lock, err := os.Open(parent)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", parent, err)
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("%s: in use by another rootgated", parent)
	}
	if err := probe(parent); err != nil {
		lock.Close()
		return nil, err
	}
	c := &Runs{Parent: parent, lock: lock, leaf: leaf}
	c.Memory = enable(chain, "memory")
	c.Tasks = enable(chain, "pids")
	return c, nil
}

// probe makes, marks and removes a cgroup in parent, to see that the
// kernel has cgroup.kill (Linux 5.14; CLONE_INTO_CGROUP came in 5.7) and
// that cgroups can be marked there. Its name starts with a '.', which no
// run's cgroup name does. One left by a daemon killed while probing is
// taken over if it is marked; an unmarked one is not rootgated's.
func probe(parent string) error {
	dir := filepath.Join(parent, ".probe")
	if err := os.Mkdir(dir, 0o755); errors.Is(err, fs.ErrExist) {
		if !marked(dir) {
			return fmt.Errorf("%s: a cgroup rootgated did not make is in the way", dir)
		}
	} else if err != nil {
		return fmt.Errorf("%s: cannot make a cgroup there: %w", parent, err)
	}
	err := mark(dir)
	if err == nil {
		if _, serr := os.Stat(filepath.Join(dir, "cgroup.kill")); serr != nil {
			err = errors.New("the kernel's cgroup v2 has no cgroup.kill (Linux 5.14 or later)")
		}
	}
	if rerr := unix.Rmdir(dir); rerr != nil && err == nil {
		return fmt.Errorf("%s: %w", dir, rerr)
	}
	return err
}

// mark marks the cgroup at dir as rootgated's (cgroupMark).
func mark(dir string) error {
	if err := unix.Setxattr(dir, cgroupMark, []byte("1"), 0); err != nil {
		return fmt.Errorf("%s: cannot mark the cgroup as rootgated's (%s): %w", dir, cgroupMark, err)
	}
	return nil
}

// marked reports whether the cgroup at dir carries rootgated's mark.
func marked(dir string) bool {
	var buf [8]byte
	n, err := unix.Getxattr(dir, cgroupMark, buf[:])
	return err == nil && string(buf[:n]) == "1"
}

// Foreign lists the cgroups in Parent that rootgated did not make (they
// lack its mark), by path: another service's, or an operator's who named
// a --cgroup directory that was not empty. The daemon never kills nor
// removes them; rootgated refuses to start next to them unless told
// to share the directory.
func (c *Runs) Foreign() ([]string, error) {
	entries, err := os.ReadDir(c.Parent)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, e := range entries {
		if p := filepath.Join(c.Parent, e.Name()); e.IsDir() && !marked(p) {
			paths = append(paths, p)
		}
	}
	return paths, nil
}

// Close releases the lock on Parent.
func (c *Runs) Close() error {
	if c == nil || c.lock == nil {
		return nil
	}
	return c.lock.Close()
}

// BoundOwnMemory gives the daemon's own leaf cgroup a memory.max of
// limit bytes: the MemoryMax= of the daemon alone, as a MemoryMax= on its
// unit (Delegate=yes) would also cap every run's cgroup below it. It
// reports where, or why not: the daemon has no leaf of its own (started
// by hand, or --cgroup named a directory), or the unit's cgroup has no
// memory controller.
func (c *Runs) BoundOwnMemory(limit int64) (string, error) {
	switch {
	case c.leaf == "":
		return "", errors.New("the daemon has no cgroup of its own (it has one under rootgate.service, Delegate=yes)")
	case c.Memory != nil:
		return "", c.Memory
	}
	f := filepath.Join(c.leaf, "memory.max")
	if err := os.WriteFile(f, []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		return "", err
	}
	return f, nil
}

// delegated reports whether systemd delegated the cgroup at dir
// (trusted.delegate, set for units with Delegate=yes).
func delegated(dir string) bool {
	buf := make([]byte, 8)
	n, err := unix.Getxattr(dir, "trusted.delegate", buf)
	return err == nil && string(buf[:n]) == "1"
}

// enterLeaf moves the daemon (every thread) into own/daemon.
func enterLeaf(own string) error {
	leaf := filepath.Join(own, "daemon")
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w", leaf, err)
	}
	if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
		return fmt.Errorf("move the daemon into %s: %w", leaf, err)
	}
	return nil
}

// enable enables controller name in the subtree_control of every cgroup
// of chain, top first, and reports why it could not.
func enable(chain []string, name string) error {
	for _, dir := range chain {
		have, err := Controllers(dir)
		if err != nil {
			return err
		}
		if !slices.Contains(have, name) {
			return fmt.Errorf("no %s controller in the cgroup v2 tree at %s", name, dir)
		}
		sub, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
		if err == nil && slices.Contains(strings.Fields(string(sub)), name) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+name), 0); err != nil {
			return fmt.Errorf("enable %s in %s: %w", name, dir, err)
		}
	}
	return nil
}

// Summary is the daemon's start-up line about containment, e.g.
// "cgroup: /sys/fs/cgroup/unified/rootgate: runs contained; limits:
// memory no (no memory controller ...), tasks yes".
func (c *Runs) Summary() string {
	yes := func(err error) string {
		if err == nil {
			return "yes"
		}
		return "no (" + err.Error() + ")"
	}
	return "cgroup: " + c.Parent + ": runs contained; limits: memory " + yes(c.Memory) + ", tasks " + yes(c.Tasks)
}

// errNoCgroup: why no limit can be enforced when runs have no cgroup.
var errNoCgroup = errors.New("runs have no cgroup")

// Check reports the limits of l that cannot be enforced here, and why;
// c may be nil (no cgroups).
func (c *Runs) Check(l Limits) error {
	memErr, tasksErr := errNoCgroup, errNoCgroup
	if c != nil {
		memErr, tasksErr = c.Memory, c.Tasks
	}
	var why []string
	if l.Memory > 0 && memErr != nil {
		why = append(why, "memory ("+memErr.Error()+")")
	}
	if l.Tasks > 0 && tasksErr != nil {
		why = append(why, "tasks ("+tasksErr.Error()+")")
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("limits cannot be enforced here: %s", strings.Join(why, ", "))
}

// maxRunName bounds a run cgroup's name, below NAME_MAX (255) with
// room for "~N".
const maxRunName = 240

// RunName is a request id as a cgroup's name: every byte but ASCII
// letters, digits, '-' and '_' (and '.' not first) written %XX, so that
// any id makes a valid directory name that RunID reads back; an id whose
// name would pass maxRunName bytes is cut there (RunID then gives the
// id's start).
func RunName(id string) string {
	var b strings.Builder
	for i := 0; i < len(id); i++ {
		ch := id[i]
		var s string
		switch {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9', ch == '-', ch == '_', ch == '.' && i > 0:
			s = string(rune(ch))
		default:
			s = fmt.Sprintf("%%%02X", ch)
		}
		if b.Len()+len(s) > maxRunName {
			break
		}
		b.WriteString(s)
	}
	return b.String()
}

// RunID is the request id a run's cgroup is named for, without the "~N"
// that tells apart two runs of the same id.
func RunID(name string) string {
	name, _, _ = strings.Cut(name, "~")
	if id, err := url.PathUnescape(name); err == nil {
		return id
	}
	return name
}

// NewRun makes the cgroup of the run of request id, with limits l.
func (c *Runs) NewRun(id string, l Limits) (*Cgroup, error) {
	base := RunName(id)
	for n := 1; ; n++ {
		name := base
		if n > 1 {
			name += "~" + strconv.Itoa(n)
		}
		cg, err := New(c.Parent, name, l)
		if errors.Is(err, fs.ErrExist) && n < 100 {
			continue
		}
		if err != nil {
			return nil, err
		}
		// Marked before any process enters it: a daemon killed from here
		// on leaves a cgroup the next one knows for its own.
		if err := mark(cg.Path); err != nil {
			if rerr := cg.Remove(); rerr != nil {
				err = errors.Join(err, rerr)
			}
			return nil, err
		}
		return cg, nil
	}
}

// Leftovers lists the runs' cgroups in Parent: at start, those a daemon
// that did not stop cleanly left. A cgroup without rootgated's mark is
// none of them, whatever its name.
func (c *Runs) Leftovers() ([]string, error) {
	entries, err := os.ReadDir(c.Parent)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && marked(filepath.Join(c.Parent, e.Name())) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}
