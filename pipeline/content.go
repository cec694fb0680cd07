package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"github.com/rootgate/rootgate/internal/rootpath"
	"golang.org/x/sys/unix"
)

// Content is an executable file's bytes as they were read when its run was
// planned, before anyone was asked: a sealed in-memory file (memfd with
// every seal) that no one can change, and its SHA-256. A run executes the
// content, never the file it came from, so that nothing done to the file
// afterwards (a write, a write through a shared mapping, which changes
// neither its size nor its times, a rename, a mount) changes a byte of
// what runs. See [Pinned.Capture].
type Content struct {
	f    *os.File
	size int64
	sum  [sha256.Size]byte
}

// SHA256 is the content's SHA-256, in lowercase hex.
func (c *Content) SHA256() string { return hex.EncodeToString(c.sum[:]) }

// Size is the content's length in bytes.
func (c *Content) Size() int64 { return c.size }

// Head returns the content's first n bytes at most, and whether that is
// all of it.
func (c *Content) Head(n int) ([]byte, bool) {
	b := make([]byte, min(int64(n), c.size))
	if _, err := c.f.ReadAt(b, 0); err != nil && err != io.EOF {
		return nil, false
	}
	return b, int64(len(b)) == c.size
}

// Close releases the in-memory copy.
func (c *Content) Close() error { return c.f.Close() }

// execMode is how a stage's pinned file is executed.
type execMode int

const (
	// byDescriptor: an ELF image, executed through the held descriptor
	// (or through its Content when captured).
	byDescriptor execMode = iota
	// byPath: a script only root can change, or one the run's user may
	// change anyway, executed by its path as sudo would, so that the
	// interpreter is given its own name ($0) and finds the files beside
	// it. The last check before the run makes sure the path still names
	// the pinned file.
	byPath
	// fromMount: a captured script whose interpreter is an ELF image
	// only root can change. The stage runs in a mount namespace of its
	// own in which the Content is mounted read-only over the script's
	// path, and the interpreter is executed directly, with the argv the
	// kernel would build, and traced until it has opened the script:
	// the file it opened must be that mount (see traceScriptOpen).
	fromMount
	// fromDescriptor3: a captured file whose interpreter chain the
	// daemon does not follow itself (an interpreter that is a script,
	// or one others than root may change, or a binfmt_misc format), or
	// where tracing is not supported: the Content goes to the stage as
	// its descriptor 3 and runs as /proc/self/fd/3, under that name.
	fromDescriptor3
)

// maxCapture bounds what one request may capture, all stages together:
// the captures are made before anyone is asked, and held while a person
// decides.
const maxCapture = 64 << 20

// Capture decides how the pinned file will run, and captures its bytes
// when the run must execute exactly what was planned: when someone other
// than root could change the file, or which file its path leads to
// ([Pinned.RootsAlone]), or an interpreter the kernel would run for it.
// own says the run has the requester's own identity, which could change
// the file in any case: then nothing is captured. budget is what is left
// of the request's capture allowance ([MaxCapture]); Capture returns what
// it used. reserve, when not nil, is asked for the bytes a capture will
// hold at most before it is made, and its error is Capture's: the caller
// bounds what all its requests' captures hold at once.
//
// It reads with the calling thread's file system identity (see [AsUser]).
// A file that identity may execute but not read is not captured; when
// the file is not root's alone, it is then [Pinned.Uncaptured], and
// [Pinned.CaptureUnread] may read it with another identity.
func (p *Pinned) Capture(own bool, budget int64, reserve func(n int64) error) (used int64, err error) {
	p.mode = byDescriptor
	if p.interpreted {
		p.mode = byPath
	}
	p.uncaptured = false
	if own {
		return 0, nil
	}
	rootsAlone := p.RootsAlone(p.Path) == nil
	if rootsAlone && p.Interpreters(func(ip string) error { return rootpath.File(ip) }) == nil {
		return 0, nil
	}
	used, err = p.captureWithin(budget, reserve)
	if errors.Is(err, fs.ErrPermission) {
		// Execute-only for this identity: no interpreter it runs could
		// read it either, and the kernel maps an image whatever its
		// mode; it runs as pinned, with the checks made of it. Nothing
		// binds what it holds then to what was planned, unless the file
		// is root's alone (captured for its interpreter's sake only).
		p.uncaptured = !rootsAlone
		return 0, nil
	}
	return used, err
}

// Uncaptured reports whether [Pinned.Capture] had to capture the file,
// someone other than root being able to change it or which file its path
// leads to, but could not read it: what runs is then what the file holds
// when the run starts, whoever put it there.
func (p *Pinned) Uncaptured() bool { return p.uncaptured }

// CaptureUnread captures a file [Pinned.Capture] had to capture but could
// not read ([Pinned.Uncaptured]), reading it now with the calling thread's
// file system identity, as Capture would have; it does nothing for any
// other file. The file stays uncaptured if this identity may not read it
// either. budget and reserve are as for Capture.
func (p *Pinned) CaptureUnread(budget int64, reserve func(n int64) error) (used int64, err error) {
	if !p.uncaptured {
		return 0, nil
	}
	used, err = p.captureWithin(budget, reserve)
	switch {
	case errors.Is(err, fs.ErrPermission):
		return 0, nil
	case err == nil:
		p.uncaptured = false
	}
	return used, err
}

// captureWithin captures the pinned file's content, at most budget bytes
// and at most the most a file of its kind may capture, reserving them
// first (reserve), and sets how the content runs. An error wrapping
// [fs.ErrPermission] says the calling thread's identity may not read the
// file.
func (p *Pinned) captureWithin(budget int64, reserve func(n int64) error) (int64, error) {
	limit := int64(maxImage)
	if p.interpreted {
		limit = maxScript
	}
	if budget < limit {
		limit = budget
	}
	// At most the file as pinned: what it holds past that was written
	// since, and the capture says the file changed.
	allowed := limit
	limit = min(limit, max(p.st.Size, 0))
	if reserve != nil {
		if err := reserve(limit); err != nil {
			return 0, err
		}
	}
	c, err := p.capture(limit)
	if errors.Is(err, ErrTooBig) && limit < allowed {
		return 0, fmt.Errorf("%s %w", strconv.Quote(p.Path), ErrChanged)
	}
	if err != nil {
		return 0, err
	}
	p.content = c
	if err := p.contentMode(); err != nil {
		return c.size, err
	}
	return c.size, nil
}

// contentMode sets how the captured content runs: an ELF image through
// its descriptor, a script from a mount of it over its name (fromMount)
// or as descriptor 3. A file pinned with an identity that could not read
// it (execOnly) is known for an image or a script by its content.
func (p *Pinned) contentMode() error {
	c := p.content
	var head [binprmBufSize]byte
	if _, err := c.f.ReadAt(head[:], 0); err != nil && err != io.EOF {
		return fmt.Errorf("%s: %w", p.Path, err)
	}
	if p.execOnly {
		p.interpreted = !isELF(head)
		if p.interpreted && c.size > maxScript {
			return fmt.Errorf("%s %w: over %d MiB", strconv.Quote(p.Path), ErrTooBig, maxScript>>20)
		}
	}
	p.mode = byDescriptor
	if !p.interpreted {
		return nil
	}
	p.mode = fromDescriptor3
	if ip, arg := shebang(head); ip != "" && tracing && rootpath.File(ip) == nil && elfFile(ip) {
		p.mode, p.interp, p.interpArg = fromMount, ip, arg
	}
	return nil
}

// MaxCapture is how many bytes the executables of one request may
// capture together ([Pinned.Capture]).
const MaxCapture = maxCapture

// elfFile reports whether path names a regular file with an ELF header.
func elfFile(path string) bool {
	f, err := openRegular(path)
	if err != nil {
		return false
	}
	defer f.Close()
	head, err := readHead(f)
	return err == nil && isELF(head)
}

// Content is the file's bytes as captured by [Pinned.Capture], or nil when
// none were: the file is root's alone, or the run's own.
func (p *Pinned) Content() *Content { return p.content }

// capture copies the pinned file into a sealed memfd through the held
// descriptor, hashing it on the way: at most limit bytes, or an error.
func (p *Pinned) capture(limit int64) (*Content, error) {
	src, err := os.Open(p.fdPath())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Path, err)
	}
	defer src.Close()
	h := sha256.New()
	dst, n, err := sealedMemfd(src, "rootgate-captured", limit, h)
	if err != nil {
		if errors.Is(err, ErrTooBig) {
			return nil, fmt.Errorf("%s %w", strconv.Quote(p.Path), err)
		}
		return nil, fmt.Errorf("%s: capture: %w", p.Path, err)
	}
	c := &Content{f: dst, size: n}
	h.Sum(c.sum[:0])
	return c, nil
}

// ErrTooBig is wrapped by the error of [Pinned.Capture] when a file to
// capture is larger than a run may capture.
var ErrTooBig = errors.New("too big to capture")

// file is the content's sealed file, nil for a nil Content.
func (c *Content) file() *os.File {
	if c == nil {
		return nil
	}
	return c.f
}

// detachedMount copies the content into a file of a new tmpfs of its own,
// mounted nowhere, and returns a detached mount of that one file, read-only,
// for the caller to attach (move_mount) and close. A memfd cannot be bound
// itself; this copy is made in the stage's own mount namespace, where no
// other process can reach the tmpfs.
func (c *Content) detachedMount() (int, error) {
	fsfd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	if err := unix.FsconfigSetString(fsfd, "mode", "0755"); err != nil {
		return -1, fmt.Errorf("fsconfig: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("fsconfig: %w", err)
	}
	mnt, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return -1, fmt.Errorf("fsmount: %w", err)
	}
	defer unix.Close(mnt)
	fd, err := unix.Openat(mnt, "content", unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o555)
	if err != nil {
		return -1, err
	}
	dst := os.NewFile(uintptr(fd), "content")
	_, err = io.Copy(dst, io.NewSectionReader(c.f, 0, c.size))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return -1, fmt.Errorf("copy: %w", err)
	}
	tree, err := unix.OpenTree(mnt, "content", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		unix.Close(tree)
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return tree, nil
}
