package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// endKinds are the records that end a request whose run started.
var endKinds = map[Kind]bool{
	KindFinished: true, KindTimedOut: true, KindCancelled: true, KindKilled: true,
	KindFailed: true, KindOrphaned: true,
}

// Unfinished lists, oldest first, the request ids whose run was started
// (a started record) by a daemon that is gone, with no record of how it
// ended: the daemon stopped (a crash, SIGKILL, a power cut) before it
// wrote the run's end, or before that record reached the disk (a run's
// end is synced after its answer; see [Log.Commit]). self is the calling
// daemon's pid and alive says whether a pid is a running process; a run
// started by self or by a daemon still alive (another daemon appending to
// the same file) is not listed.
//
// Only the end of the file at path is read: back to the opened record of
// the last daemon before self that is gone, whose start already looked at
// what came before it. A run started in a file since rotated away is not
// looked for.
func Unfinished(path string, self int, alive func(pid int) bool) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	size := fi.Size()
	for window := int64(256 << 10); ; window *= 4 {
		off := max(0, size-window)
		buf := make([]byte, size-off)
		if _, err := f.ReadAt(buf, off); err != nil && err != io.EOF {
			return nil, fmt.Errorf("audit: %w", err)
		}
		if off > 0 {
			// The first line may be cut by the window: skip it.
			i := bytes.IndexByte(buf, '\n')
			if i < 0 {
				continue
			}
			buf = buf[i+1:]
		}
		ids, found := unfinishedIn(buf, self, alive)
		if found || off == 0 {
			return ids, nil
		}
	}
}

// trailRecord is what Unfinished reads of a record.
type trailRecord struct {
	Kind   Kind   `json:"kind"`
	ID     string `json:"id"`
	Daemon *struct {
		PID int `json:"pid"`
	} `json:"daemon"`
	Run *struct {
		DaemonPID int `json:"daemon_pid"`
	} `json:"run"`
}

// unfinishedIn is Unfinished over the whole lines of b; found says
// whether b holds the opened record of a daemon that is gone, other than
// self (only what follows the last such record is looked at).
func unfinishedIn(b []byte, self int, alive func(int) bool) (ids []string, found bool) {
	var recs []trailRecord
	for line := range bytes.Lines(b) {
		var r trailRecord
		if json.Unmarshal(line, &r) != nil {
			continue // not a record; Verify says what is wrong with it
		}
		recs = append(recs, r)
	}
	gone := func(pid int) bool { return pid > 0 && pid != self && !alive(pid) }
	from := 0
	for i := len(recs) - 1; i >= 0; i-- {
		if r := recs[i]; r.Kind == KindOpened && r.Daemon != nil && gone(r.Daemon.PID) {
			from, found = i, true
			break
		}
	}
	ended := make(map[string]bool)
	for _, r := range recs[from:] {
		if endKinds[r.Kind] {
			ended[r.ID] = true
		}
	}
	opener := 0 // the pid of the last opened record met
	seen := make(map[string]bool)
	for _, r := range recs[from:] {
		switch {
		case r.Kind == KindOpened && r.Daemon != nil:
			opener = r.Daemon.PID
		case r.Kind == KindStarted && !ended[r.ID] && !seen[r.ID]:
			pid := opener // a record from before daemon_pid was written
			if r.Run != nil && r.Run.DaemonPID != 0 {
				pid = r.Run.DaemonPID
			}
			if gone(pid) {
				seen[r.ID] = true
				ids = append(ids, r.ID)
			}
		}
	}
	return ids, found
}

// Unfinished is [Unfinished] for this Log's file and this process.
func (l *Log) Unfinished(alive func(pid int) bool) ([]string, error) {
	return Unfinished(l.path, os.Getpid(), alive)
}
