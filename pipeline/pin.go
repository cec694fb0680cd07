package pipeline

import (
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// Pinned is an executable held open since it was resolved, so that a run
// executes the file the approver was shown, not whatever has taken its
// path since. Make one with [Pin] right after [Resolve], hand it to
// [Cmd].Pinned, and Close it once the run is over.
//
// When the run starts, the path must still name the very same file
// (device and inode), and that file must be unchanged: same owner, group,
// mode, size, modification and change time (any write, chmod or chown
// changes the change time). Otherwise the run is refused. The file is then
// executed through the held descriptor (/proc/self/fd/N), never by its
// path, so nothing done to the path after the check can change what runs.
// An ELF binary cannot be written while it runs (ETXTBSY), but it can
// until the exec, after the check: one that someone other than root and
// the run's user may write runs from a sealed copy too. A script (#!)
// can, and its interpreter reads it as it goes, so an interpreted file
// runs from a sealed in-memory copy of the checked contents: the kernel
// hands the interpreter the name /proc/self/fd/3, which it opens to read
// the copy. That descriptor is the one descriptor besides 0, 1 and 2 that
// a stage inherits (see [Cmd]).
type Pinned struct {
	// Path is the path that was resolved and is shown to the approver.
	Path string
	// Real is the real path of the held file when it was pinned, every
	// symlink resolved: the file that runs.
	Real string
	f    *os.File // O_PATH descriptor of the file Path named at Pin
	st   unix.Stat_t
	// interpreted: the file is not ELF, so the kernel hands it to an
	// interpreter (#!, binfmt_misc) that opens it by the name it is given.
	interpreted bool
	// mode is how the run executes the file: set at Pin, and by Capture.
	mode execMode
	// content is the file's bytes captured by Capture; nil if none were.
	content *Content
	// execOnly: the identity that pinned the file could not read it, so
	// whether it is interpreted is a guess (an image) until its content
	// is captured with one that can.
	execOnly bool
	// uncaptured: Capture had to capture the file but could not read it
	// ([Pinned.Uncaptured]).
	uncaptured bool
	// interp and interpArg are the #! line's interpreter and argument,
	// for a file run fromMount.
	interp, interpArg string
}

// Pin opens the executable at path (following symlinks, as exec does, but
// never through a /proc magic link: see [ErrMagicLink]) and records what
// it is. The file must be a regular file with an execute bit. Path is
// followed, and the file's first bytes read, with the calling thread's
// file system identity (see [AsUser]); a file that identity may execute
// but not read is taken for a binary, since no interpreter could read it,
// until its content is captured with an identity that may read it
// ([Pinned.CaptureUnread]): then its content tells.
func Pin(path string) (*Pinned, error) {
	fd, st, err := openExecutable(path)
	if err != nil {
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	return pinOpened(path, fd, st)
}

// pinOpened pins the executable regular file open (O_PATH) as fd, found
// at path with status st. It takes fd over, closing it on error.
func pinOpened(path string, fd int, st unix.Stat_t) (*Pinned, error) {
	p := &Pinned{Path: path, f: os.NewFile(uintptr(fd), path), st: st}
	var err error
	if p.Real, err = realPath(fd); err != nil {
		p.f.Close()
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	// Reopen the pinned file (not the path) to read its magic number; a
	// regular file opens without side effects. A file too short to hold
	// the magic number is not ELF; any other failure is an error, not a
	// quiet guess.
	f, err := openRegular(p.fdPath())
	if errors.Is(err, fs.ErrPermission) {
		p.execOnly = true
		return p, nil // execute-only: a binary, or nothing that can run
	}
	if err != nil {
		p.f.Close()
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	defer f.Close()
	head, err := readHead(f)
	if err != nil {
		p.f.Close()
		return nil, fmt.Errorf("pin %s: %w", path, err)
	}
	p.interpreted = !isELF(head)
	if p.interpreted {
		// Until Capture decides otherwise: a sealed copy made at the
		// start, run as /proc/self/fd/3.
		p.mode = fromDescriptor3
	}
	return p, nil
}

// isELF reports whether a file's head is an ELF image's.
func isELF(head [binprmBufSize]byte) bool { return string(head[:4]) == "\x7fELF" }

// binprmBufSize is how many of a file's first bytes the kernel reads to
// find its format, and so the whole of the #! line it reads
// (BINPRM_BUF_SIZE).
const binprmBufSize = 256

// shebang reads the #! line at the start of buf as Linux does
// (fs/binfmt_script.c, since 5.1), so that the interpreter checked is
// the one that runs: the interpreter name is the first word and the
// optional argument is the rest of the line, words being separated by
// space and tab only. Any other white space (\r, \f, \v, U+00A0...) is
// part of the word it stands in: "#!/bin/sh\r" names the file "sh\r".
// Leading spaces and tabs are skipped and trailing ones trimmed; a NUL
// ends the name (or the argument), and a line with no newline in buf
// is read to buf's last byte but one, provided the name ends before
// that (else the kernel takes the name for truncated and runs nothing).
// It returns the name and the argument ("" for none), or two empty
// strings where the kernel runs no interpreter: no #! at the start, no
// name, or a name that may be truncated.
func shebang(buf [binprmBufSize]byte) (name, arg string) {
	if buf[0] != '#' || buf[1] != '!' {
		return "", ""
	}
	b := buf[:]
	end := shebangEnd(b)
	if end < 0 {
		return "", "" // only blanks, or a name that may go on
	}
	for spacetab(b[end-1]) {
		end--
	}
	at := nextNonSpacetab(b, 2, end)
	if at < 0 || at == end {
		return "", "" // no name
	}
	argAt := -1
	sep := nextTerminator(b, at, end)
	if sep >= 0 && b[sep] != 0 {
		argAt = nextNonSpacetab(b, sep, end)
	}
	// Each ends at the first NUL: the line's end and, with an argument,
	// the name's end become NUL, as the kernel writes them.
	b[end] = 0
	if argAt >= 0 {
		b[sep] = 0
		arg = cString(b[argAt:])
	}
	return cString(b[at:]), arg
}

// shebangEnd is where the #! line that starts b ends: its newline, looked
// for up to the first NUL; without one, b's last byte, provided a name
// starts and ends before it; else -1.
func shebangEnd(b []byte) int {
	for i := 0; i < len(b) && b[i] != 0; i++ {
		if b[i] == '\n' {
			return i
		}
	}
	last := len(b) - 1
	at := nextNonSpacetab(b, 2, last)
	if at < 0 || nextTerminator(b, at, last) < 0 {
		return -1
	}
	return last
}

// spacetab reports whether c separates the words of a #! line.
func spacetab(c byte) bool { return c == ' ' || c == '\t' }

// nextNonSpacetab is the first index of b from first to last (both
// included) that holds neither a space nor a tab; -1 for none.
func nextNonSpacetab(b []byte, first, last int) int {
	for ; first <= last; first++ {
		if !spacetab(b[first]) {
			return first
		}
	}
	return -1
}

// nextTerminator is the first index of b from first to last (both
// included) that holds a space, a tab or a NUL; -1 for none.
func nextTerminator(b []byte, first, last int) int {
	for ; first <= last; first++ {
		if spacetab(b[first]) || b[first] == 0 {
			return first
		}
	}
	return -1
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// maxInterpreters is how many interpreters the kernel goes through for
// one exec, each a #! line's, before it gives up with ELOOP (the depth
// exec_binprm allows).
const maxInterpreters = 5

// Interpreters calls check with each interpreter the kernel would run
// for the pinned file, in turn: the one its #! line names, then the one
// that file's #! line names, and so on, as the kernel follows them, and
// last the loader the ELF image at the end of the chain names (its
// PT_INTERP, ld.so for a dynamic binary): the kernel opens each by its
// path when the run starts. The chain starts from the captured content
// when there is one ([Pinned.Capture]), which is what runs. Each file is
// read with the caller's identity, for the kernel reads it whoever runs
// the file (an execute-only script too), and an interpreter's own only
// once check accepted its path. An error from check, or one reading a
// file, ends the walk; so does a chain longer than the kernel follows.
func (p *Pinned) Interpreters(check func(path string) error) error {
	return p.walk(check, true)
}

// Shebangs is [Pinned.Interpreters] without the ELF loader: the
// interpreters of the #! lines alone, none for an ELF image.
func (p *Pinned) Shebangs(check func(path string) error) error {
	return p.walk(check, false)
}

// walk is [Pinned.Interpreters], the loader included when loader is set.
func (p *Pinned) walk(check func(path string) error, loader bool) error {
	var f *os.File
	if c := p.content; c != nil {
		f = c.f // not closed here: the content's own
	} else {
		var err error
		if f, err = openRegular(p.fdPath()); err != nil {
			return fmt.Errorf("%s: %w", p.Real, err)
		}
	}
	// f is the file the chain has reached: each is opened once, its
	// head read, and, at the end of the chain, its loader.
	defer func() {
		if p.content == nil || f != p.content.f {
			f.Close()
		}
	}()
	for n := 0; ; n++ {
		head, err := readHead(f)
		if err != nil {
			return fmt.Errorf("%s: %s: %w", p.Real, f.Name(), err)
		}
		ip, _ := shebang(head)
		if ip == "" {
			if !isELF(head) || !loader {
				return nil
			}
			ld, err := elfInterp(f)
			switch {
			case err != nil:
				return fmt.Errorf("%s: the ELF loader of %s: %w", p.Real, f.Name(), err)
			case ld == "":
				return nil // static
			}
			return check(ld)
		}
		if n == maxInterpreters {
			return fmt.Errorf("%s: more than %d interpreters: %w", p.Real, maxInterpreters, unix.ELOOP)
		}
		if err := check(ip); err != nil {
			return err
		}
		next, err := openRegular(ip)
		if err != nil {
			return fmt.Errorf("%s: the interpreter %s: %w", p.Real, ip, err)
		}
		if p.content == nil || f != p.content.f {
			f.Close()
		}
		f = next
	}
}

// elfInterp is the loader the ELF file f names (PT_INTERP), "" for none.
func elfInterp(f *os.File) (string, error) {
	e, err := elf.NewFile(f)
	if err != nil {
		return "", err
	}
	for _, prog := range e.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b, err := io.ReadAll(io.LimitReader(prog.Open(), unix.PathMax))
		if err != nil {
			return "", err
		}
		name, _, _ := bytes.Cut(b, []byte{0})
		if len(name) == 0 {
			return "", errors.New("an empty PT_INTERP")
		}
		return string(name), nil
	}
	return "", nil
}

// openRegular opens the regular file at path for reading; a FIFO or a
// device is refused, never opened to wait for a writer or with side
// effects.
func openRegular(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, errors.New("not a regular file")
	}
	return f, nil
}

// readHead reads the first binprmBufSize bytes of f, NUL past its end,
// as the kernel's buffer holds them.
func readHead(f *os.File) (head [binprmBufSize]byte, err error) {
	if _, err := f.ReadAt(head[:], 0); err != nil && err != io.EOF {
		return head, err
	}
	return head, nil
}

// Close releases the held descriptor and the captured content.
func (p *Pinned) Close() error {
	if p.content != nil {
		p.content.Close()
	}
	return p.f.Close()
}

// Interpreted reports whether the pinned file is not an ELF binary but a
// file the kernel hands to an interpreter (a #! script, a binfmt_misc
// format), whose descriptor a run passes on as descriptor 3.
func (p *Pinned) Interpreted() bool { return p.interpreted }

func (p *Pinned) fdPath() string { return "/proc/self/fd/" + strconv.Itoa(int(p.f.Fd())) }

// maxScript bounds the interpreted file a run copies (sealedCopy).
const maxScript = 16 << 20

// maxImage bounds the ELF file a run copies (sealedCopy) because someone
// other than root and the run's own user may write it.
const maxImage = 256 << 20

// othersMayWrite reports whether someone other than root and uid, the
// run's user, may write the pinned file: its owner, or its group or
// others by its mode. An ELF image is read by the kernel at exec, which
// comes after the last check: such a writer could put another program in
// the file in between (writes fail with ETXTBSY only once it runs).
func (p *Pinned) othersMayWrite(uid uint32) bool {
	return p.st.Uid != 0 && p.st.Uid != uid || p.st.Mode&0o022 != 0
}

// sealedCopy returns a sealed memfd named name holding the pinned file's
// contents (at most limit bytes), read through the held descriptor, for a
// stage to run instead of the file itself. The kernel reads a script's #!
// line, and its interpreter the script, while it runs: from the file,
// anyone who may write it could change what runs after the check (append
// a line a shell has not read yet). An ELF image is read at exec, after
// the last check (othersMayWrite). The copy is checked to be of the file as pinned (it
// is unchanged after the read), and then no one can change it.
func (p *Pinned) sealedCopy(name string, limit int64) (*os.File, error) {
	src, err := os.Open(p.fdPath())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.Path, err)
	}
	defer src.Close()
	dst, n, err := sealedMemfd(src, name, limit, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: copy: %w", p.Path, err)
	}
	var after unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &after); err != nil || !unchanged(&after, &p.st) || n != p.st.Size {
		dst.Close()
		return nil, fmt.Errorf("%s %w", strconv.Quote(p.Path), ErrChanged)
	}
	return dst, nil
}

// sealedMemfd copies src into a new memfd named name, and also to also
// when it is not nil, then seals it against every change: at most limit
// bytes, or an error wrapping [ErrTooBig]. It returns the memfd and how
// many bytes it holds.
func sealedMemfd(src io.Reader, name string, limit int64, also io.Writer) (*os.File, int64, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, 0, err
	}
	dst := os.NewFile(uintptr(fd), name)
	var w io.Writer = dst
	if also != nil {
		w = io.MultiWriter(dst, also)
	}
	n, err := io.Copy(w, io.LimitReader(src, limit+1))
	if err == nil && n > limit {
		err = fmt.Errorf("over %d MiB: %w", limit>>20, ErrTooBig)
	}
	if err == nil {
		_, err = unix.FcntlInt(dst.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_WRITE)
	}
	if err != nil {
		dst.Close()
		return nil, 0, err
	}
	return dst, n, nil
}

// ErrChanged is wrapped by the error a run returns when a pinned
// executable is no longer the file at its path, or was modified.
var ErrChanged = errors.New("changed since it was resolved")

// check reports an error wrapping ErrChanged unless Path still names the
// pinned file and the file is unchanged. A file whose content was captured
// needs neither: its content runs, whatever became of the file.
func (p *Pinned) check() error {
	if p.content != nil {
		return nil
	}
	var now, there unix.Stat_t
	if err := unix.Fstat(int(p.f.Fd()), &now); err != nil {
		return fmt.Errorf("%s: %w", p.Path, err)
	}
	if err := unix.Stat(p.Path, &there); err != nil || !sameFile(&there, &p.st) || !unchanged(&now, &p.st) {
		return fmt.Errorf("%s %w", strconv.Quote(p.Path), ErrChanged)
	}
	return nil
}

func sameFile(a, b *unix.Stat_t) bool { return a.Dev == b.Dev && a.Ino == b.Ino }

func unchanged(a, b *unix.Stat_t) bool {
	return sameFile(a, b) && a.Uid == b.Uid && a.Gid == b.Gid && a.Mode == b.Mode && a.Size == b.Size &&
		a.Mtim == b.Mtim && a.Ctim == b.Ctim
}

// Stat is the pinned file's status as it was when pinned.
func (p *Pinned) Stat() unix.Stat_t { return p.st }

// SHA256 is the SHA-256 of the pinned file, in lowercase hex: of its
// captured content when there is one ([Pinned.Capture]), which is what
// runs, else of the file as read through the held descriptor with the
// calling thread's identity (see [AsUser]). A file whose length is not
// its length when pinned was changed since: an error wrapping
// [ErrChanged].
func (p *Pinned) SHA256() (string, error) {
	if p.content != nil {
		return p.content.SHA256(), nil
	}
	f, err := openRegular(p.fdPath())
	if err != nil {
		return "", fmt.Errorf("%s: %w", p.Path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(f, p.st.Size+1))
	switch {
	case err != nil:
		return "", fmt.Errorf("%s: %w", p.Path, err)
	case n != p.st.Size:
		return "", fmt.Errorf("%s %w", strconv.Quote(p.Path), ErrChanged)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Same reports whether p and q pinned the same file, unchanged between
// the two pins: device, inode, owner, mode, size and times.
func (p *Pinned) Same(q *Pinned) bool { return unchanged(&p.st, &q.st) }

// Identity names the pinned file as it was when pinned: its device and
// inode, owner, mode, size and change times, and, when its content was
// captured ([Pinned.Capture]), that content's SHA-256. Two pins with the
// same Identity held the same unmodified file; a file replaced behind its
// path, or written to, has another, and so does a captured file written
// to in a way that changes none of its times (through a shared mapping).
func (p *Pinned) Identity() string {
	s := &p.st
	id := fmt.Sprintf("dev=%d ino=%d uid=%d gid=%d mode=%o size=%d mtime=%d.%09d ctime=%d.%09d",
		s.Dev, s.Ino, s.Uid, s.Gid, s.Mode, s.Size, s.Mtim.Sec, s.Mtim.Nsec, s.Ctim.Sec, s.Ctim.Nsec)
	if p.content != nil {
		id += " sha256=" + p.content.SHA256()
	}
	return id
}
