// Package progid tells which program of a list a file is by what the
// file is, not by the name it goes by: a hard link to a listed program,
// or a copy of one under another name, is that program.
//
// An [Index] finds the listed programs in a few directories (the search
// path's): the entries whose names the list holds, each followed to the
// file it leads to. A file is one of them when it is the same file
// (device and inode), or when its size is one's and its SHA-256 too. The
// common case costs a map look-up: a file is hashed only when its size
// is a listed file's, and a listed file only then too, once while it
// stays unchanged.
package progid

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// MaxEntries bounds how many listed files an Index keeps: the first found,
// in the order of its directories.
const MaxEntries = 4096

// RecheckEvery is how often an Index stats every listed file again, to
// see one changed in place (its directory unchanged). A directory is
// stat'ed at every use: a file added, removed or renamed there is seen at
// once.
const RecheckEvery = time.Second

// errChangedSize: a listed file changed size since it was found.
var errChangedSize = errors.New("changed size since it was found")

// File is a file to look for among the listed programs: its device,
// inode and size, and how to read its SHA-256 when its size is a listed
// file's.
type File struct {
	Dev, Ino uint64
	Size     int64
	// SHA256 returns the file's SHA-256 in lowercase hex. It is called
	// at most once, and only when Size is a listed file's.
	SHA256 func() (string, error)
}

// Index finds the files of the listed programs in its directories, and
// tells which of them a file is ([Index.Is]). Make one with [New]; it is
// safe for concurrent use. It reads with the calling thread's identity:
// the daemon's, root's.
type Index struct {
	dirs   []string
	listed func(name string) bool
	now    func() time.Time

	mu      sync.Mutex // guards the fields that follow
	scanned []dirState // one per dir, in order
	byID    map[fileID]*entry
	bySize  map[int64][]*entry
	checked time.Time          // when every entry was last stat'ed
	sums    map[stamp]string   // SHA-256 of listed files, by what they were when hashed
	hashing map[stamp]*sumWait // hashes being computed, by the file they are of
}

// fileID is a file's identity: its device and inode.
type fileID struct{ dev, ino uint64 }

// stamp is a file as stat saw it: a file with the same stamp is taken to
// hold the same bytes.
type stamp struct {
	id           fileID
	size         int64
	mtime, ctime unix.Timespec
}

func stampOf(st *unix.Stat_t) stamp {
	return stamp{fileID{st.Dev, st.Ino}, st.Size, st.Mtim, st.Ctim}
}

// dirState is a directory as last scanned.
type dirState struct {
	stamp   stamp // zero when it is missing or left out
	entries []*entry
}

// entry is one listed name found in a directory.
type entry struct {
	path string // the name's path in its directory
	st   stamp  // of the file it leads to
}

// sumWait is a hash being computed: done is closed once sum and err are
// set.
type sumWait struct {
	done chan struct{}
	sum  string
	err  error
}

// New returns an Index of the files in dirs whose names listed accepts.
// A directory whose owner is not root, or that its group or others may
// write, is left out: what it holds is not the system's programs, and
// whoever may write it could fill it for every request to scan.
func New(dirs []string, listed func(name string) bool) *Index {
	return &Index{dirs: dirs, listed: listed, now: time.Now, scanned: make([]dirState, len(dirs)),
		sums: map[stamp]string{}, hashing: map[stamp]*sumWait{}}
}

// Is returns the path of the listed program that f is, "" when it is
// none: by its device and inode, else by its size and SHA-256. An error
// reading f's hash or a listed file's is taken for no match there.
func (x *Index) Is(f File) string {
	x.mu.Lock()
	x.refreshLocked()
	if e, ok := x.byID[fileID{f.Dev, f.Ino}]; ok {
		x.mu.Unlock()
		return e.path
	}
	cands := x.bySize[f.Size]
	x.mu.Unlock()
	if len(cands) == 0 || f.SHA256 == nil {
		return ""
	}
	sum, err := f.SHA256()
	if err != nil {
		return ""
	}
	for _, e := range cands {
		if s, err := x.sum(e, f.Size); err == nil && s == sum {
			return e.path
		}
	}
	return ""
}

// Len is how many listed files the index holds now.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.refreshLocked()
	n := 0
	for _, d := range x.scanned {
		n += len(d.entries)
	}
	return n
}

// refreshLocked scans again each directory that changed since it was
// scanned, and, every RecheckEvery, stats each listed file again.
func (x *Index) refreshLocked() {
	changed := x.rescanLocked()
	if x.recheckLocked() {
		changed = true
	}
	if changed {
		x.reindexLocked()
	}
}

// rescanLocked scans again each directory whose stamp changed since it
// was scanned (every one on the first use), and reports whether any did.
func (x *Index) rescanLocked() bool {
	changed := x.byID == nil
	seen := map[fileID]bool{}
	total := 0
	for i, dir := range x.dirs {
		st := dirStamp(dir)
		if st != (stamp{}) && seen[st.id] {
			st = stamp{} // another path to a directory already scanned (/bin, /usr/bin)
		}
		seen[st.id] = true
		if st != x.scanned[i].stamp || x.byID == nil {
			x.scanned[i] = dirState{stamp: st}
			if st != (stamp{}) {
				x.scanned[i].entries = x.scan(dir, MaxEntries-total)
			}
			changed = true
		}
		total += len(x.scanned[i].entries)
	}
	return changed
}

// recheckLocked stats each listed file again when RecheckEvery has passed
// since the last time (or the clock went back), and reports whether any
// file changed.
func (x *Index) recheckLocked() bool {
	now := x.now()
	if now.Sub(x.checked) < RecheckEvery && !now.Before(x.checked) {
		return false
	}
	x.checked = now
	changed := false
	for _, d := range x.scanned {
		for _, e := range d.entries {
			var st unix.Stat_t
			if err := unix.Stat(e.path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
				st = unix.Stat_t{}
			}
			if s := stampOf(&st); s != e.st {
				e.st, changed = s, true
			}
		}
	}
	return changed
}

// reindexLocked makes byID and bySize again from the entries scanned,
// the first of a file found in two places winning, and forgets the
// hashes of files no longer as they were.
func (x *Index) reindexLocked() {
	x.byID, x.bySize = map[fileID]*entry{}, map[int64][]*entry{}
	live := map[stamp]bool{}
	for _, d := range x.scanned {
		for _, e := range d.entries {
			if e.st == (stamp{}) || x.byID[e.st.id] != nil {
				continue
			}
			x.byID[e.st.id] = e
			x.bySize[e.st.size] = append(x.bySize[e.st.size], e)
			live[e.st] = true
		}
	}
	for s := range x.sums {
		if !live[s] {
			delete(x.sums, s)
		}
	}
}

// dirStamp is dir's stamp, following links, or the zero stamp when it is
// missing, no directory, or not root's alone (New).
func dirStamp(dir string) stamp {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || st.Uid != 0 || st.Mode&0o022 != 0 {
		return stamp{}
	}
	return stampOf(&st)
}

// scan returns the listed entries of dir, at most limit: regular files
// with an execute bit, links followed.
func (x *Index) scan(dir string, limit int) []*entry {
	d, err := os.Open(dir)
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var out []*entry
	for _, name := range names {
		if len(out) >= limit {
			break
		}
		if !x.listed(name) {
			continue
		}
		path := dir + "/" + name
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o111 == 0 {
			continue
		}
		out = append(out, &entry{path: path, st: stampOf(&st)})
	}
	return out
}

// sum is the SHA-256 of e's file, kept while the file's stamp is the
// one it was hashed at; one hash of a file is computed at a time, the
// others waiting for it. The file is stat'ed first: one changed in place
// since it was found is hashed again, and, when its size is no longer
// size, is no match (errChangedSize) until the next recheck places it
// by its new size.
func (x *Index) sum(e *entry, size int64) (string, error) {
	var now unix.Stat_t
	if err := unix.Stat(e.path, &now); err != nil {
		return "", err
	}
	x.mu.Lock()
	if s := stampOf(&now); s != e.st {
		e.st = s
		x.checked = time.Time{} // the next use stats every file again
	}
	st := e.st
	if st.size != size {
		x.mu.Unlock()
		return "", errChangedSize
	}
	if s, ok := x.sums[st]; ok {
		x.mu.Unlock()
		return s, nil
	}
	if w, ok := x.hashing[st]; ok {
		x.mu.Unlock()
		<-w.done
		return w.sum, w.err
	}
	w := &sumWait{done: make(chan struct{})}
	x.hashing[st] = w
	x.mu.Unlock()

	w.sum, w.err = hashFile(e.path, st)

	x.mu.Lock()
	delete(x.hashing, st)
	if w.err == nil && e.st == st {
		x.sums[st] = w.sum
	}
	x.mu.Unlock()
	close(w.done)
	return w.sum, w.err
}

// openFile opens path to read, as a regular file only: without blocking
// on a FIFO or taking a terminal as its controlling one, as a path a
// requester names may be swapped for either between a stat and the open.
// It returns the file's status as opened.
func openFile(path string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, st, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, st, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, st, fmt.Errorf("%s: not a regular file", path)
	}
	return f, st, nil
}

// sum is the SHA-256 of f, read to at most size+1 bytes, and how many
// bytes it read.
func sum(f *os.File, size int64) (string, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, size+1))
	if err != nil {
		return "", n, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// hashFile is the SHA-256 of the file at path, which must be the file
// st was of, unchanged while it was read.
func hashFile(path string, st stamp) (string, error) {
	f, before, err := openFile(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if stampOf(&before) != st {
		return "", fmt.Errorf("%s: changed since it was found", path)
	}
	h, n, err := sum(f, st.size)
	if err != nil {
		return "", err
	}
	var after unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &after); err != nil {
		return "", err
	}
	if n != st.size || stampOf(&after) != st {
		return "", fmt.Errorf("%s: changed while it was read", path)
	}
	return h, nil
}

// PathFile is the file at path, links followed, as a [File]: stat'ed
// now, and read for its SHA-256 only if that is asked for, when it must
// still be the same file (device and inode). Both read with the calling
// thread's identity: the caller may wrap SHA256 to read with another.
func PathFile(path string) (File, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return File{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return File{}, fmt.Errorf("%s: not a regular file", path)
	}
	s := stampOf(&st)
	return File{Dev: st.Dev, Ino: st.Ino, Size: st.Size, SHA256: func() (string, error) {
		f, now, err := openFile(path)
		if err != nil {
			return "", err
		}
		defer f.Close()
		if stampOf(&now).id != s.id {
			return "", fmt.Errorf("%s: another file since it was found", path)
		}
		h, _, err := sum(f, s.size)
		return h, err
	}}, nil
}
