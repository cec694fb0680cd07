package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// replayFile is the replay window's file inside the runtime directory.
const replayFile = "replay"

// replayWindow remembers request keys for a while, in memory and in an
// append-only file so that a restarted daemon refuses what it saw before.
// The file lives on the runtime directory (tmpfs /run under systemd): a
// write() is enough to survive a crash of the daemon, and nothing needs to
// survive a reboot because the window is minutes long.
type replayWindow struct {
	path   string
	window time.Duration

	mu        sync.Mutex              // guards the fields that follow
	seen      map[string]*replayEntry // key -> the request that recorded it
	live      map[string]bool         // keys of requests in progress, refused even once expired
	f         *os.File
	size      int64     // f's length: what was written whole
	torn      bool      // f may end in part of a line that cutting back failed to drop
	nextPrune time.Time // when expired keys are next dropped from seen and f
	last      time.Time // the latest expiry ever recorded
	// byUID holds, for each uid other than root, the expiries of the
	// requests it added, oldest first: at most perUID, so one requester
	// cannot fill the runtime directory and memory with unique ids. It is
	// rebuilt from the file at start, so a restart gives no fresh budget.
	byUID  map[int][]time.Time
	perUID int
}

// replayEntry is one request in the window: when it leaves it, who sent it
// (-1: unknown, from a file written before lines named the uid) and its
// keys. It is one line of the file: "EXPIRY UID KEY..." with the expiry in
// Unix nanoseconds and each key quoted.
type replayEntry struct {
	exp  time.Time
	uid  int
	keys []string
}

// line is e as a line of the file.
func (e *replayEntry) line() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %d", e.exp.UnixNano(), e.uid)
	for _, k := range e.keys {
		b.WriteString(" " + strconv.Quote(k))
	}
	b.WriteString("\n")
	return b.String()
}

// parseReplayLine reads a line of the file, newline included, or one of
// the older "EXPIRY KEY" form (uid -1); ok is false for a torn line.
func parseReplayLine(line string) (e *replayEntry, ok bool) {
	rest, ok := strings.CutSuffix(line, "\n")
	if !ok {
		return nil, false
	}
	exp, rest, _ := strings.Cut(rest, " ")
	ns, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return nil, false
	}
	e = &replayEntry{exp: time.Unix(0, ns), uid: -1}
	if !strings.HasPrefix(rest, `"`) {
		var uid string
		uid, rest, _ = strings.Cut(rest, " ")
		if e.uid, err = strconv.Atoi(uid); err != nil || e.uid < -1 {
			return nil, false
		}
	}
	for {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return nil, false
		}
		k, err := strconv.Unquote(q)
		if err != nil {
			return nil, false
		}
		e.keys = append(e.keys, k)
		if rest = rest[len(q):]; rest == "" {
			return e, true
		}
		if rest, ok = strings.CutPrefix(rest, " "); !ok {
			return nil, false
		}
	}
}

// openReplay loads the requests of dir's replay file that have not
// expired, and counts them against the uids that sent them. A line of the
// older form, without a uid, counts against no one.
// dir must be root's alone (checkDir): root rewrites files in it.
func openReplay(dir string, window time.Duration, perUID int, now time.Time) (*replayWindow, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("replay window: %w", err)
	}
	if err := checkDir(dir, true); err != nil {
		return nil, fmt.Errorf("runtime directory: %w", err)
	}
	w := &replayWindow{path: filepath.Join(dir, replayFile), window: window, seen: map[string]*replayEntry{}, live: map[string]bool{}, byUID: map[int][]time.Time{}, perUID: perUID}
	data, err := readDaemonFile(w.path, 0)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("replay window: %s: %w", w.path, err)
	}
	for line := range strings.Lines(string(data)) {
		e, ok := parseReplayLine(line)
		if !ok {
			continue // a torn last line from a crash
		}
		if !e.exp.After(now) {
			continue
		}
		for _, k := range e.keys {
			w.seen[k] = e
		}
		if e.exp.After(w.last) {
			w.last = e.exp
		}
		if e.uid > 0 {
			w.byUID[e.uid] = append(w.byUID[e.uid], e.exp)
		}
	}
	for _, exps := range w.byUID {
		slices.SortFunc(exps, time.Time.Compare)
	}
	if err := w.rewriteLocked(now); err != nil {
		return nil, err
	}
	return w, nil
}

// Add records keys, the keys of one request sent by uid, and reports
// whether they were all new: none seen within the window, nor the key of a
// request in progress (see Done). An id-less request has two: its line's
// SHA-256 and the id the daemon made up for it, which it names in its
// answers, so a requester who hears it cannot take it for another request
// within the window. Keys are written quoted, so any id fits on one line.
// A new request of a uid other than root that has perUID requests in the
// window already is not recorded: the error says so.
func (w *replayWindow) Add(keys []string, uid int, now time.Time) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, key := range keys {
		if e, ok := w.seen[key]; ok && e.exp.After(now) || w.live[key] {
			return false, nil
		}
	}
	exp := now.Add(w.window)
	if uid != 0 {
		exps := w.byUID[uid]
		i := 0
		for i < len(exps) && !exps[i].After(now) {
			i++
		}
		if exps = exps[i:]; len(exps) >= w.perUID {
			w.byUID[uid] = exps
			return false, wire.ReplayFullError(uid, w.perUID, w.window)
		}
		w.byUID[uid] = append(exps, exp)
	}
	e := &replayEntry{exp: exp, uid: uid, keys: slices.Clone(keys)}
	for _, key := range keys {
		w.seen[key] = e
	}
	if exp.After(w.last) {
		w.last = exp
	}
	if err := w.append(e.line()); err != nil {
		return true, fmt.Errorf("replay window: %w", err)
	}
	if now.After(w.nextPrune) {
		if err := w.rewriteLocked(now); err != nil {
			return true, err
		}
	}
	for _, key := range keys {
		w.live[key] = true
	}
	return true, nil
}

// append writes line to the file whole, or not at all: a write that
// failed part-way (a full file system) is cut back, so that the next line,
// once there is room, does not join the half line left and, unreadable,
// is dropped by the next daemon, which would then take a request that
// ran for new. Should the cut fail too, the next write begins with a
// newline, which ends the half line on its own.
func (w *replayWindow) append(line string) error {
	if w.torn {
		line = "\n" + line
	}
	n, err := io.WriteString(w.f, line)
	if err == nil {
		w.size += int64(n)
		w.torn = false
		return nil
	}
	if n > 0 {
		if terr := w.f.Truncate(w.size); terr != nil {
			w.torn = true
			w.size += int64(n)
		}
	}
	return err
}

// Done ends the request of keys, which Add took: from now on they are new
// again once the window has passed. A run may outlast the window; its id
// must not name another request (and its audit records) meanwhile.
func (w *replayWindow) Done(keys ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, key := range keys {
		delete(w.live, key)
	}
}

// rewriteLocked drops expired keys and writes the file anew (atomically).
// Add calls it once a window, so memory and file hold at most two windows'
// worth of keys.
func (w *replayWindow) rewriteLocked(now time.Time) error {
	var b strings.Builder
	written := map[*replayEntry]bool{}
	for k, e := range w.seen {
		if !e.exp.After(now) {
			delete(w.seen, k)
			continue
		}
		if !written[e] {
			written[e] = true
			b.WriteString(e.line())
		}
	}
	for uid, exps := range w.byUID {
		if len(exps) == 0 || !exps[len(exps)-1].After(now) {
			delete(w.byUID, uid)
		}
	}
	tmp := w.path + ".tmp"
	if err := writeNew(tmp, []byte(b.String())); err != nil {
		return fmt.Errorf("replay window: %w", err)
	}
	if err := os.Rename(tmp, w.path); err != nil {
		return fmt.Errorf("replay window: %w", err)
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return fmt.Errorf("replay window: %w", err)
	}
	if w.f != nil {
		w.f.Close()
	}
	w.f, w.size, w.torn = f, int64(b.Len()), false
	w.nextPrune = now.Add(w.window)
	return nil
}

// writeNew writes data to a file it creates at path (0600), never through
// what is there already: whatever a crash (or anyone) left at path, a
// symlink included, is removed first, and the file is made with O_EXCL and
// O_NOFOLLOW, so root writes only a file it made.
func writeNew(path string, data []byte) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// readDaemonFile reads the file at path as the daemon wrote it, refusing
// anything else: a symlink (not followed), a FIFO or device (opened
// without blocking), a file of another uid, one others may read or
// write, one with more than one link (another name for it elsewhere), or
// one larger than limit bytes when limit > 0. An error wrapping
// fs.ErrNotExist when there is none.
func readDaemonFile(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, errors.New("it is a symlink")
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("it is not a regular file (%s)", fi.Mode().Type())
	case st.Uid != uint32(os.Geteuid()):
		return nil, fmt.Errorf("it is owned by uid %d, not by the daemon's", st.Uid)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("its mode %04o lets others than its owner at it", fi.Mode().Perm())
	case st.Nlink != 1:
		return nil, fmt.Errorf("it has %d links", st.Nlink)
	}
	if limit <= 0 {
		return io.ReadAll(f)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("it is larger than %d bytes", limit)
	}
	return data, nil
}

// LastExpiry is when the newest key recorded (in this run or a previous
// one still in the file) leaves the window; zero when there is none.
func (w *replayWindow) LastExpiry() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// Close closes the file.
func (w *replayWindow) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.f.Close()
}
