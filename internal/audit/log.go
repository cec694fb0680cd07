package audit

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// DefaultPath is where rootgated keeps its audit log.
const DefaultPath = "/var/log/rootgate/audit.jsonl"

// maxLine bounds one record's line when reading; records hold at most one
// request (1 MiB on the wire) and its JSON escaping.
const maxLine = 16 << 20

// Options tune a [Log]. The zero value never rotates and uses time.Now.
type Options struct {
	// MaxSize rotates the file before a record would take it past this
	// many bytes; 0 never rotates.
	MaxSize int64
	// Keep is how many rotated files are kept: after a rotation, the
	// oldest beyond it are removed; 0 keeps them all. The chain still
	// verifies from the oldest file left (see [Verify]).
	Keep int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Warn, when set, is told (to log at error priority) when a
	// rotation leaves Keep rotated files, so that the next one removes
	// the oldest, naming it, and when a rotation removes one: the
	// operator learns that records are about to go, and went, before
	// anyone asks for them.
	Warn func(msg string, args ...any)
}

// Log appends records to an audit file. Its methods are safe for
// concurrent use; several processes may append to the same file, as each
// append takes an exclusive flock(2) on it and continues the chain from
// what is on disk.
type Log struct {
	path string
	opt  Options

	mu   sync.Mutex // guards the fields that follow
	f    *os.File
	size int64  // bytes of f known to hold whole records
	seq  uint64 // the last record's seq (0: none yet)
	prev string // the last record's hash
	n    int    // records in f
	err  error  // set once closed
	// written counts the records this Log wrote, synced those of them
	// known to be on disk (see Commit).
	written, synced uint64

	commit sync.Mutex // one Commit's sync at a time; the others share it
	// lockedSize is the file's size as lock saw it, with the flock held.
	lockedSize int64
	// timer is CommitWithin's pending Commit, if one is (guarded by mu).
	timer *time.Timer
	// lost is the last time records of a file another process rotated
	// away could not be synced before it was closed (guarded by mu).
	lost lostRecords
}

// lostRecords says that the records this Log wrote after the from-th, up
// to the to-th, were in a file closed without a successful sync, and why.
type lostRecords struct {
	from, to uint64
	err      error
}

// Open opens (creating it 0600, and its directory 0700, if need be) the
// audit file at path for appending. The file's end is read at the first
// append, which refuses a file whose last record does not check out (run
// [Verify] on it and move it aside); rootgated appends its opened record
// at once, so it does not start on such a file.
func Open(path string, opt Options) (*Log, error) {
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	l := &Log{path: path, opt: opt}
	f, err := l.open()
	if err != nil {
		return nil, err
	}
	_ = l.use(f) // no file before: nothing to sync
	return l, nil
}

// open opens l.path, creating it 0600, and tightens an existing file's
// mode to 0600. It never opens through a symlink, nor a file that is not
// a regular file of the process's own uid: what is at the path may have
// been put there by someone else (a symlink to a file whose mode the
// chmod would change, or a FIFO whose open would block).
func (l *Log) open() (*os.File, error) {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit: %w", err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || !ok || int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, fmt.Errorf("audit: %s is not a regular file of uid %d", l.path, os.Geteuid())
	}
	if fi.Mode().Perm() != 0o600 {
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, fmt.Errorf("audit: %w", err)
		}
	}
	return f, nil
}

// use makes f the file appended to; what is known of the chain is read
// from it again at the next append. Records written for later go to disk
// with the file they were in, which use syncs before closing it: if that
// fails, they are lost, and use returns the error at once, for the caller
// to fail its own append, as well as to each Commit under way that was
// to cover them (a later sync of the new file does not).
func (l *Log) use(f *os.File) error {
	var err error
	if l.f != nil {
		if l.synced < l.written {
			if serr := l.f.Sync(); serr != nil {
				err = fmt.Errorf("audit: records lost with a file rotated away: %w", serr)
				from := l.synced
				if l.lost.err != nil {
					// One range over both losses: no Commit still waiting
					// for the first is told its records are safe.
					from = min(from, l.lost.from)
				}
				l.lost = lostRecords{from: from, to: l.written, err: err}
			}
			// Nothing more can be done for them: the file is closed.
			l.synced = l.written
		}
		l.f.Close()
	}
	l.f, l.size, l.seq, l.prev, l.n = f, -1, 0, "", 0
	return err
}

// Append fills in r's Seq, Time, Prev and Hash, and writes r as one line,
// synced to disk (with every record before it) before it returns. It
// rotates the file first when r would take it past Options.MaxSize.
// Concurrent Appends share their syncs (see [Log.Commit]): the lock on
// the file is not held while the disk works. If r cannot be written,
// nothing of it stays in the file (a partial line is cut off again) and
// the chain is as before; if it was written but the sync failed, it stays
// in the file, not known to be on disk, and the error says so: the caller
// must not act on it. An append that finds the file rotated away by
// another process, and cannot sync the records written there for later,
// returns that error (see [Log.Commit]) without writing r.
func (l *Log) Append(r *Record) error {
	n, err := l.append(r)
	if err != nil {
		return err
	}
	// Up to r itself: a commit up to the records written since (into a
	// file that replaced r's) would not say that r was lost.
	return l.commitTo(n)
}

// AppendAsync is Append with its sync in the background: r is written to
// the file before AppendAsync returns (a write error is returned at
// once, as Append's), and the sync starts at once, in a goroutine of
// its own, so the caller can do other work while the disk works. The
// returned wait blocks until r (with every record before it) is on
// disk, or returns what Append would have returned for it; it may be
// called any number of times. The caller must not act on r before wait
// returned nil.
func (l *Log) AppendAsync(r *Record) (wait func() error, err error) {
	n, err := l.append(r)
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- l.commitTo(n) }()
	return sync.OnceValue(func() error { return <-done }), nil
}

// AppendLater is Append without waiting for the disk: r is written to the
// file, and is on disk once a later Append or Commit returns (or the Log
// is closed). For a record that is always followed by one that must be
// durable before anything happens, or whose loss a later reader can tell
// (see [Unfinished]).
func (l *Log) AppendLater(r *Record) error {
	_, err := l.append(r)
	return err
}

// CommitWithin makes every record written so far durable within d: the
// sync of a durable Append that comes first takes them along (under a
// steady load, the next run's started record), else a Commit of their own
// runs once d has passed, whose error goes to failed. It does not wait.
func (l *Log) CommitWithin(d time.Duration, failed func(error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil || l.synced >= l.written || l.timer != nil {
		return
	}
	l.timer = time.AfterFunc(d, func() {
		l.mu.Lock()
		l.timer = nil
		l.mu.Unlock()
		if err := l.Commit(); err != nil && failed != nil {
			failed(err)
		}
	})
}

// Commit returns once every record this Log wrote before the call is on
// disk. Concurrent callers share syncs: a caller whose records a sync
// already in progress will not cover waits for it and then syncs once for
// everyone waiting behind it, so N requests ending at once cost about two
// syncs, not N (a group commit). When records it was to cover were in a
// file another process rotated away that could not be synced before it
// was closed, it returns that error, as the append that found the file
// gone did.
func (l *Log) Commit() error {
	l.mu.Lock()
	target := l.written
	l.mu.Unlock()
	return l.commitTo(target)
}

// commitTo is Commit for the records up to the target'th this Log wrote.
func (l *Log) commitTo(target uint64) error {
	l.commit.Lock()
	defer l.commit.Unlock()
	l.mu.Lock()
	if lost := l.lost; lost.err != nil && target > lost.from && target <= lost.to {
		// Records this call was to cover were lost with a file closed
		// under it (use). A call that covers records written since has
		// those to sync: the loss was told to the append that closed
		// the file.
		l.mu.Unlock()
		return lost.err
	}
	if l.synced >= target || l.err != nil {
		l.mu.Unlock()
		return nil // on disk already, or synced when it was closed
	}
	f, upto := l.f, l.written
	l.mu.Unlock()
	// Outside l.mu: appends go on meanwhile. A file another process
	// rotated away is closed meanwhile only after use tried to sync it,
	// and noted the records it lost if that failed.
	if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
		return fmt.Errorf("audit: sync %s: %w", l.path, err)
	}
	l.mu.Lock()
	if lost := l.lost; lost.err != nil && target > lost.from && target <= lost.to {
		l.mu.Unlock()
		return lost.err
	}
	l.synced = max(l.synced, upto)
	l.mu.Unlock()
	return nil
}

// append writes r (see AppendLater) and returns how many records this
// Log has written with it.
func (l *Log) append(r *Record) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.appendLocked(r); err != nil {
		return 0, err
	}
	return l.written, nil
}

// appendLocked is append with l.mu held.
func (l *Log) appendLocked(r *Record) error {
	if l.err != nil {
		return l.err
	}
	if err := l.lock(); err != nil {
		return err
	}
	// l.f may change on rotation: unlock whichever file is current then.
	defer func() { _ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN) }()
	// lock saw the file's size with the flock held: no second stat.
	if err := l.syncSized(l.lockedSize); err != nil {
		return err
	}
	if l.seq == 0 {
		g := make([]byte, 32)
		_, _ = rand.Read(g)
		if err := l.write(&Record{Kind: KindGenesis}, hex.EncodeToString(g)); err != nil {
			return err
		}
	}
	r.Seq, r.Time, r.Prev = l.seq+1, l.opt.Now().UTC(), l.prev
	line, err := encode(r)
	if err != nil {
		return err
	}
	if l.opt.MaxSize > 0 && l.n > 1 && l.size+int64(len(line))+1 > l.opt.MaxSize {
		if err := l.rotate(); err != nil {
			return err
		}
		// The rotated record now comes first: r is chained anew.
		r.Seq, r.Prev = l.seq+1, l.prev
		if line, err = encode(r); err != nil {
			return err
		}
	}
	return l.writeLine(r, line)
}

// lock takes the file's flock, reopening the path first if another
// process rotated the file away from under l. Each retry means another
// writer made progress (it filled and rotated a whole file meanwhile), so
// the bound only guards against a path that never settles.
func (l *Log) lock() error {
	for range 1000 {
		if err := unix.Flock(int(l.f.Fd()), unix.LOCK_EX); err != nil {
			return fmt.Errorf("audit: lock %s: %w", l.path, err)
		}
		same, err := l.stillAtPath()
		if err != nil || same {
			if err != nil {
				_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
			}
			return err
		}
		_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
		f, err := l.open()
		if err != nil {
			return err
		}
		if err := l.use(f); err != nil {
			return err
		}
	}
	return fmt.Errorf("audit: %s keeps being rotated away", l.path)
}

func (l *Log) stillAtPath() (bool, error) {
	var a, b unix.Stat_t
	if err := unix.Fstat(int(l.f.Fd()), &a); err != nil {
		return false, fmt.Errorf("audit: stat %s: %w", l.path, err)
	}
	if err := unix.Stat(l.path, &b); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, fmt.Errorf("audit: stat %s: %w", l.path, err)
	}
	l.lockedSize = a.Size
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

// sync brings l's idea of the chain up to date with the file, which
// another process, or a failed write of ours, may have changed.
func (l *Log) sync() error {
	fi, err := l.f.Stat()
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	return l.syncSized(fi.Size())
}

// syncSized is sync, given the file's size as stat(2) just saw it with
// the flock held.
func (l *Log) syncSized(size int64) error {
	if size == l.size {
		return nil
	}
	// Another process appended, or rotated, or this is the first
	// append: read what is there.
	last, n, err := lastRecord(l.path)
	if err != nil {
		return err
	}
	if last == nil {
		// An empty file: after a rotation with no record yet, continue
		// from the newest rotated file.
		prevFile, prev, err := newestRotated(l.path)
		if err != nil {
			return err
		}
		l.size, l.n = 0, 0
		if prev == nil {
			l.seq, l.prev = 0, ""
			return nil
		}
		l.seq, l.prev = *prev.Seq, prev.hash
		return l.write(&Record{Kind: KindRotated, PrevFile: filepath.Base(prevFile)}, l.prev)
	}
	l.size, l.seq, l.prev, l.n = size, *last.Seq, last.hash, n
	return nil
}

// write encodes r chained to prev and appends it; on failure it cuts the
// file back to its last whole record. The caller syncs.
func (l *Log) write(r *Record, prev string) error {
	r.Seq, r.Time, r.Prev = l.seq+1, l.opt.Now().UTC(), prev
	line, err := encode(r)
	if err != nil {
		return err
	}
	return l.writeLine(r, line)
}

// writeLine appends r, encoded as line (chained to the file's last
// record); on failure it cuts the file back to its last whole record.
func (l *Log) writeLine(r *Record, line []byte) error {
	line = append(line, '\n')
	if _, err := l.f.Write(line); err != nil {
		if terr := l.f.Truncate(l.size); terr != nil {
			l.size = -1 // re-read the file before the next append
		}
		return fmt.Errorf("audit: write %s: %w", l.path, err)
	}
	l.size += int64(len(line))
	r.Size = len(line)
	l.seq, l.prev = r.Seq, r.Hash
	l.n++
	l.written++
	return nil
}

// rotate renames the full file to PATH.SEQ (SEQ: its first record's, 20
// digits, so names sort in order) and starts a new file with a rotated
// record. Called with the flock held; the old file's lock is kept until
// the new file's is taken, so no other writer slips in between.
func (l *Log) rotate() error {
	first, err := firstSeq(l.path)
	if err != nil {
		return err
	}
	old := fmt.Sprintf("%s.%020d", l.path, first)
	// Records appended for later are made durable before the file is
	// left behind: later syncs are of the new file.
	if err := l.f.Sync(); err != nil {
		return fmt.Errorf("audit: sync %s: %w", l.path, err)
	}
	l.synced = l.written
	if err := os.Rename(l.path, old); err != nil {
		return fmt.Errorf("audit: rotate: %w", err)
	}
	syncDir(filepath.Dir(l.path))
	f, err := l.open()
	if err != nil {
		return err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return fmt.Errorf("audit: lock %s: %w", l.path, err)
	}
	if err := l.use(f); err != nil {
		return err // not reached: the old file was synced above
	}
	// The new file is empty (or another writer's rotated record is
	// already in it): sync writes or reads the rotated record.
	if err := l.sync(); err != nil {
		return err
	}
	l.prune()
	return nil
}

// prune removes the oldest rotated files beyond Options.Keep. Called with
// the flock held, after a rotation; a file that cannot be removed is left
// for the next rotation.
func (l *Log) prune() {
	if l.opt.Keep <= 0 {
		return
	}
	files, err := Files(l.path)
	if err != nil {
		return
	}
	if n := len(files); n > 0 && files[n-1] == l.path {
		files = files[:n-1]
	}
	for len(files) > l.opt.Keep {
		if err := os.Remove(files[0]); err == nil {
			l.warn("audit file removed by rotation (--audit-keep); its records are gone from this host", "file", files[0], "keep", l.opt.Keep)
		}
		files = files[1:]
	}
	syncDir(filepath.Dir(l.path))
	if len(files) == l.opt.Keep && len(files) > 0 {
		l.warn("the next audit rotation removes the oldest audit file (--audit-keep); copy it elsewhere to keep its records", "file", files[0], "keep", l.opt.Keep)
	}
}

// warn calls Options.Warn, if set.
func (l *Log) warn(msg string, args ...any) {
	if l.opt.Warn != nil {
		l.opt.Warn(msg, args...)
	}
}

// Free is how many bytes the audit file's file system has for this
// process to write: statfs(2) f_bfree, which counts the blocks the file
// system keeps for root, when the process may use them (it runs as uid
// 0, ext4's default reserved uid, or holds CAP_SYS_RESOURCE: the
// kernel's tests), else f_bavail. Counting f_bavail
// for a root daemon would let any uid that writes to the same file
// system (a /var/log that shares /home or /tmp) use up the space left to
// others and trip a guard set on it for everyone.
func (l *Log) Free() (int64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(l.path), &st); err != nil {
		return 0, fmt.Errorf("audit: statfs %s: %w", filepath.Dir(l.path), err)
	}
	if mayUseReserved() {
		return int64(st.Bfree) * st.Bsize, nil
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// mayUseReserved reports whether this process may write to the blocks a
// file system keeps for root: it runs as uid 0 (the reserved uid unless
// the operator set another with tune2fs -u), or holds CAP_SYS_RESOURCE
// in its effective set.
func mayUseReserved() bool {
	if os.Geteuid() == 0 {
		return true
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_SYS_RESOURCE/32].Effective&(1<<(unix.CAP_SYS_RESOURCE%32)) != 0
}

// Close closes the file; later appends fail.
func (l *Log) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return nil
	}
	l.err = errors.New("audit: log closed")
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	var err error
	if l.synced < l.written {
		if err = l.f.Sync(); err == nil {
			l.synced = l.written
		}
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// parsed is a checked record's head and hash.
type parsed struct {
	head
	hash string
}

// lastRecord reads the file at path and returns its last record (nil for
// an empty file) and the number of records. A last line that is cut short
// or does not check out is an error.
func lastRecord(path string) (*parsed, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("audit: %w", err)
	}
	if fi.Size() == 0 {
		return nil, 0, nil
	}
	// Count lines and keep the last one; files are bounded by rotation.
	var last []byte
	lines := 0
	err = eachLine(f, func(line []byte, complete bool) error {
		lines++
		if !complete {
			return &Problem{File: path, Line: lines, What: "last record is cut short (no newline at its end)"}
		}
		last = append(last[:0], line...)
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("audit: cannot continue %w; check it with \"rootgate audit verify\" and move it aside", err)
	}
	h, sum, err := parse(last)
	if err != nil {
		return nil, 0, fmt.Errorf("audit: cannot continue %w; check it with \"rootgate audit verify\" and move it aside", &Problem{File: path, Line: lines, What: err.Error()})
	}
	return &parsed{h, sum}, lines, nil
}

// firstSeq is the seq of the first record in the file at path.
func firstSeq(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	var seq uint64
	found := false
	stop := errors.New("stop")
	err = eachLine(f, func(line []byte, _ bool) error {
		h, _, err := parse(line)
		if err != nil {
			return &Problem{File: path, Line: 1, What: err.Error()}
		}
		seq, found = *h.Seq, true
		return stop
	})
	if err != nil && err != stop {
		return 0, fmt.Errorf("audit: rotate: %w", err)
	}
	if !found {
		return 0, fmt.Errorf("audit: rotate: %s is empty", path)
	}
	return seq, nil
}

// newestRotated finds the newest rotated file beside path and its last
// record; nil when there is none.
func newestRotated(path string) (string, *parsed, error) {
	files, err := Files(path)
	if err != nil {
		return "", nil, err
	}
	for i := len(files) - 1; i >= 0; i-- {
		if files[i] == path {
			continue
		}
		last, _, err := lastRecord(files[i])
		if err != nil {
			return "", nil, err
		}
		if last != nil {
			return files[i], last, nil
		}
	}
	return "", nil, nil
}

// eachLine calls fn with each line of r (without its newline) and whether
// it had one; it stops at fn's first error.
func eachLine(r io.Reader, fn func(line []byte, complete bool) error) error {
	br := newLineReader(r)
	for {
		line, complete, err := br.next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(line, complete); err != nil {
			return err
		}
	}
}

// errLineTooLong: a line past maxLine, which no record is.
var errLineTooLong = fmt.Errorf("line longer than %d bytes", maxLine)

// lineReader reads lines of up to maxLine bytes.
type lineReader struct{ br *bufio.Reader }

func newLineReader(r io.Reader) *lineReader { return &lineReader{bufio.NewReaderSize(r, 64<<10)} }

// next returns the next line without its newline, and whether it ended in
// one (false only for a last line cut short).
func (lr *lineReader) next() ([]byte, bool, error) {
	var line []byte
	for {
		chunk, err := lr.br.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case err == nil:
			return line[:len(line)-1], true, nil
		case errors.Is(err, bufio.ErrBufferFull):
			if len(line) > maxLine {
				return nil, false, errLineTooLong
			}
		case errors.Is(err, io.EOF):
			if len(line) == 0 {
				return nil, false, io.EOF
			}
			return line, false, nil
		default:
			return nil, false, err
		}
	}
}
