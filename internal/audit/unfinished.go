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
// daemon and alive says whether a daemon still runs ([Running]); a run
// started by self or by a daemon still alive (another daemon appending to
// the same file) is not listed. A run's daemon is the one whose opened
// record, with the started record's daemon_pid, comes last before it, so
// that a process which took a gone daemon's pid over does not pass for
// it; a pid whose opened record is not in the part of the file read is
// taken for a daemon named by its pid alone.
//
// Only the end of the file at path is read: back to the opened record of
// the last daemon before self that is gone, whose start already looked at
// what came before it. A run started in a file since rotated away is not
// looked for.
func Unfinished(path string, self Daemon, alive func(Daemon) bool) ([]string, error) {
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
	Kind   Kind    `json:"kind"`
	ID     string  `json:"id"`
	Daemon *Daemon `json:"daemon"`
	Run    *struct {
		DaemonPID int `json:"daemon_pid"`
	} `json:"run"`
}

// unfinishedIn is Unfinished over the whole lines of b; found says
// whether b holds the opened record of a daemon that is gone, other than
// self (only what follows the last such record is looked at).
func unfinishedIn(b []byte, self Daemon, alive func(Daemon) bool) (ids []string, found bool) {
	var recs []trailRecord
	for line := range bytes.Lines(b) {
		var r trailRecord
		if json.Unmarshal(line, &r) != nil {
			continue // not a record; Verify says what is wrong with it
		}
		recs = append(recs, r)
	}
	gone := func(d Daemon) bool { return d.PID > 0 && !same(d, self) && !alive(d) }
	from := 0
	for i := len(recs) - 1; i >= 0; i-- {
		if r := recs[i]; r.Kind == KindOpened && r.Daemon != nil && gone(*r.Daemon) {
			from, found = i, true
			break
		}
	}
	// An end record ends the run of its id started last before it: an id
	// is the requester's word, and may come again once the replay window
	// has forgotten it (never while its request is in progress), so an
	// end never ends a run that started after it.
	type run struct {
		id    string
		d     Daemon
		ended bool
	}
	var runs []*run
	open := make(map[string]*run)
	// daemons holds, by pid, the daemon of the last opened record met;
	// opener is the last opened record's.
	daemons := make(map[int]Daemon)
	var opener Daemon
	for i, r := range recs {
		switch {
		case r.Kind == KindOpened && r.Daemon != nil:
			opener = *r.Daemon
			daemons[opener.PID] = opener
		case i >= from && r.Kind == KindStarted:
			d := opener // a record from before daemon_pid was written
			if r.Run != nil && r.Run.DaemonPID != 0 {
				var ok bool
				if d, ok = daemons[r.Run.DaemonPID]; !ok {
					d = Daemon{PID: r.Run.DaemonPID}
				}
			}
			open[r.ID] = &run{id: r.ID, d: d}
			runs = append(runs, open[r.ID])
		case i >= from && endKinds[r.Kind] && open[r.ID] != nil:
			open[r.ID].ended = true
			delete(open, r.ID)
		}
	}
	seen := make(map[string]bool)
	for _, rn := range runs {
		if !rn.ended && !seen[rn.id] && gone(rn.d) {
			seen[rn.id] = true
			ids = append(ids, rn.id)
		}
	}
	return ids, found
}

// Unfinished is [Unfinished] for this Log's file and this process
// ([ThisDaemon]).
func (l *Log) Unfinished(alive func(Daemon) bool) ([]string, error) {
	return Unfinished(l.path, *ThisDaemon(""), alive)
}
