package daemon

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
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

	mu        sync.Mutex           // guards the fields that follow
	seen      map[string]time.Time // key -> expiry
	live      map[string]bool      // keys of requests in progress, refused even once expired
	f         *os.File
	nextPrune time.Time // when expired keys are next dropped from seen and f
	last      time.Time // the latest expiry ever recorded
	// byUID holds, for each uid other than root, the expiries of the keys
	// it added, oldest first: at most perUID, so one requester cannot fill
	// the runtime directory and memory with unique ids.
	byUID  map[int][]time.Time
	perUID int
}

// openReplay loads the keys of dir's replay file that have not expired.
// dir must be root's alone (checkDir): root rewrites files in it.
func openReplay(dir string, window time.Duration, perUID int, now time.Time) (*replayWindow, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("replay window: %w", err)
	}
	if err := checkDir(dir, true); err != nil {
		return nil, fmt.Errorf("runtime directory: %w", err)
	}
	w := &replayWindow{path: filepath.Join(dir, replayFile), window: window, seen: map[string]time.Time{}, live: map[string]bool{}, byUID: map[int][]time.Time{}, perUID: perUID}
	data, err := readNoFollow(w.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("replay window: %w", err)
	}
	for line := range strings.Lines(string(data)) {
		exp, quoted, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		ns, err1 := strconv.ParseInt(exp, 10, 64)
		key, err2 := strconv.Unquote(quoted)
		if !ok || err1 != nil || err2 != nil || !strings.HasSuffix(line, "\n") {
			continue // a torn last line from a crash
		}
		if t := time.Unix(0, ns); t.After(now) {
			w.seen[key] = t
			if t.After(w.last) {
				w.last = t
			}
		}
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
		if exp, ok := w.seen[key]; ok && exp.After(now) || w.live[key] {
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
	for _, key := range keys {
		w.seen[key] = exp
	}
	if exp.After(w.last) {
		w.last = exp
	}
	for _, key := range keys {
		if _, err := fmt.Fprintf(w.f, "%d %s\n", exp.UnixNano(), strconv.Quote(key)); err != nil {
			return true, fmt.Errorf("replay window: %w", err)
		}
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
	for k, exp := range w.seen {
		if !exp.After(now) {
			delete(w.seen, k)
			continue
		}
		fmt.Fprintf(&b, "%d %s\n", exp.UnixNano(), strconv.Quote(k))
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
	w.f = f
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

// readNoFollow reads the file at path, refusing a symlink.
func readNoFollow(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
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
