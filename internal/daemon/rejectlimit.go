package daemon

import (
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/audit"
)

// DefaultAuditRejectRate is Config.AuditRejectRate's default.
const DefaultAuditRejectRate = 60

// maxRecordedError bounds the error text of a rejected record: some
// errors quote what the requester sent.
const maxRecordedError = 256

// rejectLimit keeps one uid's refused requests from filling the audit log
// (and the journal): past rate rejected records a minute (a fixed minute
// from its first), the uid's further ones are counted, not written, and
// one dropped record says how many when that minute is over. Root is not
// limited.
type rejectLimit struct {
	rate  int
	flush func(*audit.Record) // writes a dropped record

	mu     sync.Mutex // guards the fields that follow
	uids   map[int]*uidRejects
	closed bool
}

// uidRejects is one uid's minute of rejected records.
type uidRejects struct {
	start   time.Time
	n       int         // records written this minute
	dropped int         // records left out this minute
	timer   *time.Timer // writes the dropped record when the minute ends
}

func newRejectLimit(rate int, flush func(*audit.Record)) *rejectLimit {
	return &rejectLimit{rate: rate, flush: flush, uids: map[int]*uidRejects{}}
}

// allow reports whether uid's rejected record at now is to be written.
func (l *rejectLimit) allow(uid int, now time.Time) bool {
	if uid == 0 {
		return true
	}
	l.mu.Lock()
	u := l.uids[uid]
	var done *audit.Record
	if u == nil || now.Sub(u.start) >= time.Minute {
		if u != nil {
			done = l.endLocked(uid, u)
		}
		u = &uidRejects{start: now}
		l.uids[uid] = u
	}
	ok := u.n < l.rate
	if ok {
		u.n++
	} else {
		u.dropped++
		if u.timer == nil && !l.closed {
			u.timer = time.AfterFunc(u.start.Add(time.Minute).Sub(now), func() { l.end(uid, u) })
		}
	}
	l.mu.Unlock()
	if done != nil {
		l.flush(done)
	}
	return ok
}

// end closes u's minute if it is still uid's current one.
func (l *rejectLimit) end(uid int, u *uidRejects) {
	l.mu.Lock()
	var done *audit.Record
	if l.uids[uid] == u {
		done = l.endLocked(uid, u)
	}
	l.mu.Unlock()
	if done != nil {
		l.flush(done)
	}
}

// endLocked forgets u and returns its dropped record, if any.
func (l *rejectLimit) endLocked(uid int, u *uidRejects) *audit.Record {
	delete(l.uids, uid)
	if u.timer != nil {
		u.timer.Stop()
	}
	if u.dropped == 0 {
		return nil
	}
	return &audit.Record{Kind: audit.KindDropped, Peer: &audit.Peer{UID: uid}, Dropped: &audit.Dropped{Count: u.dropped, Since: u.start.UTC()}}
}

// close writes the dropped records of every minute still open. The
// minutes themselves (when each began, how many records it wrote) are
// kept, for minutes to hand to the next daemon.
func (l *rejectLimit) close() {
	l.mu.Lock()
	l.closed = true
	var done []*audit.Record
	for uid, u := range l.uids {
		if u.timer != nil {
			u.timer.Stop()
			u.timer = nil
		}
		if u.dropped > 0 {
			done = append(done, &audit.Record{Kind: audit.KindDropped, Peer: &audit.Peer{UID: uid}, Dropped: &audit.Dropped{Count: u.dropped, Since: u.start.UTC()}})
			u.dropped = 0
		}
	}
	l.mu.Unlock()
	for _, r := range done {
		l.flush(r)
	}
}

// rejectMinute is what a restarted daemon takes up of a uid's minute:
// when it began and how many rejected records it wrote. Its dropped
// record, if any, was written when the daemon before stopped (close).
type rejectMinute struct {
	start time.Time
	n     int
}

// minutes returns the minutes not over at now, by uid.
func (l *rejectLimit) minutes(now time.Time) map[int]rejectMinute {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[int]rejectMinute, len(l.uids))
	for uid, u := range l.uids {
		if !now.Before(u.start) && now.Sub(u.start) < time.Minute {
			out[uid] = rejectMinute{start: u.start, n: u.n}
		}
	}
	return out
}

// restore takes up minutes a daemon before this one kept (minutes), for
// the uids that have none yet.
func (l *rejectLimit) restore(ms map[int]rejectMinute) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for uid, m := range ms {
		if _, ok := l.uids[uid]; !ok && uid != 0 {
			l.uids[uid] = &uidRejects{start: m.start, n: m.n}
		}
	}
}

// clip shortens s to at most max bytes (on a rune boundary), saying how
// long it was.
func clip(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return runeCut(s, max) + "… (" + strconv.Itoa(len(s)) + " bytes)"
}

// runeCut is s's first n bytes at most, cut on a rune boundary; s is at
// least n bytes long.
func runeCut(s string, n int) string {
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
