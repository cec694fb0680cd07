package passkey

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/rootgate/rootgate/internal/rootpath"
	"golang.org/x/sys/unix"
)

// maxFile is the largest passkeys file read: a few hundred passkeys.
const maxFile = 4 << 20

// stamp tells one version of the passkeys file from another: the file
// (device, inode) and what changes with its content (size, modification
// and status change times). A file replaced by a rename is another
// inode; one written in place has other times.
type stamp struct {
	missing      bool
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func stampOf(st *unix.Stat_t) stamp {
	return stamp{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// Load reads the file at path; a missing file is an empty one. The file
// must be a regular file, root's, with no group or other access, not a
// symbolic link, and reached through entries only root can change: each
// root's, each directory one is looked up in writable by root alone or
// sticky ([rootpath.Same]). For a missing file, the directory it would
// be made in is held to the same ([rootpath.Entry]).
func Load(path string) (*File, error) {
	f, _, err := load(path)
	return f, err
}

func load(path string) (*File, stamp, error) {
	abs, err := rootpath.Abs(path)
	if err != nil {
		return nil, stamp{}, fmt.Errorf("passkeys %s: %w", path, err)
	}
	fd, err := unix.Open(abs, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		if err := missingUnder(abs); err != nil {
			return nil, stamp{}, fmt.Errorf("passkeys %s: missing, and %s", path, strings.TrimPrefix(err.Error(), abs+": "))
		}
		return &File{Version: FileVersion}, stamp{missing: true}, nil
	}
	if err != nil {
		return nil, stamp{}, fmt.Errorf("passkeys %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, stamp{}, fmt.Errorf("passkeys %s: %w", path, err)
	}
	if err := rootOnly(abs, &st); err != nil {
		return nil, stamp{}, fmt.Errorf("passkeys %s: %s", path, strings.TrimPrefix(err.Error(), abs+": "))
	}
	// The stamp is taken before the read: a change during it gives the
	// file another stamp, and the next use reads it again.
	at := stampOf(&st)
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	switch {
	case err != nil:
		return nil, stamp{}, fmt.Errorf("passkeys %s: %w", path, err)
	case len(b) > maxFile:
		return nil, stamp{}, fmt.Errorf("passkeys %s: over %d bytes", path, maxFile)
	}
	pf, err := Parse(b)
	if err != nil {
		return nil, stamp{}, fmt.Errorf("passkeys %s: %w", path, err)
	}
	return pf, at, nil
}

// rootOnly checks the open file at abs, with status st: root's alone,
// and only root can change what abs leads to.
func rootOnly(abs string, st *unix.Stat_t) error {
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return errors.New("not a regular file")
	case st.Uid != 0:
		return fmt.Errorf("owned by uid %d, not by root", st.Uid)
	case st.Mode&0o077 != 0:
		return fmt.Errorf("mode %04o: group or others may access it (it must be 0600)", st.Mode&0o7777)
	}
	return rootpath.Same(abs, st.Dev, st.Ino)
}

// missingUnder checks where the missing file abs would be made: the
// nearest entry above it that exists must be in a directory only root
// can change, or someone else could put a file of theirs there.
func missingUnder(abs string) error {
	for p := abs; ; {
		err := rootpath.Entry(p)
		trimmed := strings.TrimRight(p, "/")
		i := strings.LastIndexByte(trimmed, '/')
		if err == nil || !errors.Is(err, fs.ErrNotExist) || i <= 0 {
			return err
		}
		p = trimmed[:i]
	}
}

// Parse reads a passkeys file's content (as [File.Save] or `rootgate
// passkeys export` writes it).
func Parse(b []byte) (*File, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("bad passkeys file: %w", err)
	}
	if f.Version != FileVersion {
		return nil, fmt.Errorf("bad passkeys file: version %d, want %d", f.Version, FileVersion)
	}
	for _, o := range f.Origins {
		if _, err := RPIDOf(o); err != nil {
			return nil, fmt.Errorf("bad passkeys file: %w", err)
		}
	}
	for _, e := range f.Passkeys {
		if e.ID != base64.RawURLEncoding.EncodeToString(e.Credential.ID) || len(e.Credential.PublicKey) == 0 {
			return nil, fmt.Errorf("bad passkeys file: passkey %q: id and credential disagree", e.ID)
		}
	}
	if len(f.Passkeys) > 0 && f.RPID == "" {
		return nil, errors.New("bad passkeys file: passkeys without an rp_id")
	}
	return &f, nil
}

// Save writes f to path, durably: a new file of a name of its own
// (".NAME.RANDOM", made with O_EXCL, never through a symbolic link),
// mode 0600, synced, renamed over path, and the directory synced. A
// symbolic link at path is replaced, never followed. The directory must
// be one only root can change ([rootpath.Entry]).
func (f *File) Save(path string) error {
	_, err := f.save(path)
	return err
}

// save is Save; it returns the new file's stamp.
func (f *File) save(path string) (stamp, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return stamp{}, err
	}
	abs, err := rootpath.Abs(path)
	if err != nil {
		return stamp{}, fmt.Errorf("passkeys %s: %w", path, err)
	}
	if err := rootpath.Entry(abs); err != nil {
		return stamp{}, fmt.Errorf("passkeys %s: %s", path, strings.TrimPrefix(err.Error(), abs+": "))
	}
	i := strings.LastIndexByte(abs, '/')
	dir, name := abs[:i+1], abs[i+1:]
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return stamp{}, fmt.Errorf("passkeys %s: %w", path, err)
	}
	defer unix.Close(dfd)
	at, err := writeNew(dfd, name, append(b, '\n'))
	if err != nil {
		return stamp{}, fmt.Errorf("passkeys %s: %w", path, err)
	}
	return at, nil
}

// writeNew replaces name in the directory dfd with data, as Save says.
func writeNew(dfd int, name string, data []byte) (stamp, error) {
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return stamp{}, err
	}
	tmp := "." + name + "." + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return stamp{}, err
	}
	out := os.NewFile(uintptr(fd), tmp)
	defer out.Close()
	_, err = out.Write(data)
	if err == nil {
		err = out.Sync()
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return stamp{}, err
	}
	// The stamp after the rename, which changes the status change time.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return stamp{}, err
	}
	return stampOf(&st), unix.Fsync(dfd)
}

// clone is a copy of f that the caller may change without changing f.
func (f *File) clone() *File {
	g := *f
	g.Origins = slices.Clone(f.Origins)
	g.Passkeys = slices.Clone(f.Passkeys)
	return &g
}

// Keeper is rootgated's passkeys file at Path. It keeps the file as last
// read or saved, and reads it again only when the file at Path is
// another or was changed (its stamp: device, inode, size, times), so a
// change by root's hand or configuration management is seen at its next
// use; every use walks Path again ([rootpath.Walk]), so a directory on
// the way that someone other than root could change is refused at once.
// Changes are made one caller at a time, and saved ([File.Save]) before
// they count.
type Keeper struct {
	Path string

	mu    sync.Mutex
	file  *File // nil before the first use
	at    stamp
	reads int // how many times the file was read: tests look
}

// current is the file as it is now (k.mu held): the one kept, unless the
// file at Path changed since.
func (k *Keeper) current() (*File, error) {
	if k.file != nil && k.unchanged() {
		return k.file, nil
	}
	f, at, err := load(k.Path)
	if err != nil {
		return nil, err
	}
	k.reads++
	k.file, k.at = f, at
	return f, nil
}

// unchanged says whether Path still leads, through entries only root can
// change, to the file kept (or still to none).
func (k *Keeper) unchanged() bool {
	abs, err := rootpath.Abs(k.Path)
	if err != nil {
		return false
	}
	_, st, err := rootpath.Walk(abs)
	if k.at.missing {
		return errors.Is(err, fs.ErrNotExist) && missingUnder(abs) == nil
	}
	return err == nil && stampOf(&st) == k.at
}

// Load returns the file, for the caller to read or change (changes are
// not saved: [Keeper.Update] saves).
func (k *Keeper) Load() (*File, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, err := k.current()
	if err != nil {
		return nil, err
	}
	return f.clone(), nil
}

// Verify checks a as [File.Verify] does, and saves the passkey's new
// signature counter: an assertion whose counter could not be saved is
// refused, so the counter on disk is always past every assertion taken.
func (k *Keeper) Verify(a *Assertion, challenge []byte) (*Enrolled, error) {
	var e *Enrolled
	err := k.Update(func(f *File) error {
		var err error
		if e, err = f.Verify(a, challenge); err != nil {
			return err
		}
		*f.Find(e.ID) = *e
		return nil
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// Update lets fn change a copy of the file, and saves it unless fn fails;
// the change counts (later uses see it) once saved.
func (k *Keeper) Update(fn func(*File) error) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	f, err := k.current()
	if err != nil {
		return err
	}
	g := f.clone()
	if err := fn(g); err != nil {
		return err
	}
	at, err := g.save(k.Path)
	if err != nil {
		// The file may or may not have been replaced: read it next time.
		k.file = nil
		return err
	}
	k.file, k.at = g, at
	return nil
}
