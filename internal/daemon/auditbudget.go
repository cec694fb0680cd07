package daemon

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/wire"
)

// What one uid's requests add to the audit log is bounded (docs/audit.md,
// "What one requester adds to the log"). A received record of a uid
// other than root keeps each long argument, env key and reason as an
// excerpt with its size and SHA-256, and at most maxRecordedPipeline
// bytes of the pipeline and maxRecordedEnv of the env. And every record
// a uid other than root adds is charged to its hourly budget
// (Config.AuditUIDBudget, from the uid's first record of the hour): its
// received records are full only until they took a quarter of it, and
// once it is spent, its further requests that may run or reach a person
// are refused before they are received (admit), so that no record of a
// run is ever dropped; what it may still add is the rate-limited records
// of refused requests, pings and checks (rejectLimit). Root is not
// limited. The budgets of the hours still open are kept in the runtime
// directory across a restart (auditbudgetfile.go).

const (
	// maxRecordedWord is the longest argument (or env key) a received
	// record keeps whole; a longer one is kept as an excerpt of
	// maxExcerpt bytes.
	maxRecordedWord = 256
	maxExcerpt      = 128
	// maxRecordedReason is the longest reason kept whole.
	maxRecordedReason = 1024
	// maxRecordedPipeline bounds the pipeline's (excerpted) words a
	// received record keeps; the words past it are counted.
	maxRecordedPipeline = 8 << 10
	// maxRecordedEnv bounds the env's (excerpted) keys and values a
	// received record keeps; the keys past it are counted.
	maxRecordedEnv = 4 << 10
	// DefaultAuditUIDBudget is Config.AuditUIDBudget's default: how many
	// bytes of records one uid other than root may add an hour.
	DefaultAuditUIDBudget = 8 << 20
	// auditBudgetWindow is the budget's period.
	auditBudgetWindow = time.Hour
	// auditBudgetSaves is how many times in its budget a uid's charges
	// have the budgets saved (auditBudget.saved): each time they pass
	// another 1/auditBudgetSaves of it, so a crash of the daemon forgets
	// less than that much of any uid's hour.
	auditBudgetSaves = 16
)

// excerpt returns s when it is at most max bytes, else its first
// maxExcerpt bytes (cut at a character boundary) with its size and
// SHA-256: "BEGINNING…[N bytes, sha256:HEX]".
func excerpt(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return fmt.Sprintf("%s…[%d bytes, sha256:%s]", runeCut(s, maxExcerpt), len(s), audit.SHA256([]byte(s)))
}

// excerptPipeline returns the pipeline as a received record keeps it:
// each long word as an excerpt, and the words past maxRecordedPipeline
// bytes (each word counted with 3 more, for its quotes and comma) left
// out, a last word saying how many. p itself is not changed.
func excerptPipeline(p [][]string) [][]string {
	total, out := 0, make([][]string, 0, len(p))
	for i, argv := range p {
		st := make([]string, 0, len(argv))
		for j, w := range argv {
			w = excerpt(w, maxRecordedWord)
			// A word takes its quotes and comma too: empty words count.
			if total+len(w)+3 > maxRecordedPipeline {
				left := len(argv) - j
				for _, rest := range p[i+1:] {
					left += len(rest)
				}
				st = append(st, fmt.Sprintf("…[%d more words, in the request line's sha256]", left))
				return append(out, st)
			}
			total += len(w) + 3
			st = append(st, w)
		}
		out = append(out, st)
	}
	return out
}

// excerptEnv returns env as a received record keeps it: each long key
// as an excerpt, and the keys (in order) past maxRecordedEnv bytes of
// keys and values (each pair counted with 6 more, for its quotes, colon
// and comma) left out, a last key "…" saying how many. hashed, the
// keys whose values are kept by their SHA-256, share the bound. Neither
// map is changed.
func excerptEnv(env, hashed map[string]string) (map[string]string, map[string]string) {
	keys := make([]string, 0, len(env)+len(hashed))
	for k := range env {
		keys = append(keys, k)
	}
	for k := range hashed {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var outEnv, outHashed map[string]string
	put := func(m *map[string]string, k, v string) {
		if *m == nil {
			*m = map[string]string{}
		}
		(*m)[k] = v
	}
	total := 0
	for i, k := range keys {
		v, isHashed := hashed[k]
		if !isHashed {
			v = env[k]
		}
		ek := excerpt(k, maxRecordedWord)
		if total+len(ek)+len(v)+6 > maxRecordedEnv {
			put(&outEnv, "…", fmt.Sprintf("[%d more keys, in the request line's sha256]", len(keys)-i))
			break
		}
		total += len(ek) + len(v) + 6
		if isHashed {
			put(&outHashed, ek, v)
		} else {
			put(&outEnv, ek, v)
		}
	}
	return outEnv, outHashed
}

// auditBudget is the per-uid hourly budget of audit records (see the
// top of this file). Its zero value is not usable: see newAuditBudget.
type auditBudget struct {
	limit int64 // bytes of records one uid may add an hour
	// spent is told, once per uid and hour, that uid's budget is spent
	// until renews.
	spent func(uid int, limit int64, renews time.Time)
	// saved, when set, is called (without mu held) when a charge takes a
	// uid past another 1/auditBudgetSaves of its budget, or to its end:
	// it keeps the budgets (snapshot) where a restarted daemon finds them.
	saved func()

	mu   sync.Mutex // guards uids
	uids map[int]*uidBudget
}

// uidBudget is one uid's hour.
type uidBudget struct {
	start time.Time
	used  int64 // bytes of the uid's records written this hour
	full  int64 // of which full received records
	told  bool  // spent was called this hour
}

func newAuditBudget(limit int64, spent func(uid int, limit int64, renews time.Time)) *auditBudget {
	return &auditBudget{limit: limit, spent: spent, uids: map[int]*uidBudget{}}
}

// hourLocked returns uid's hour at now, a new one when its last is over.
func (b *auditBudget) hourLocked(uid int, now time.Time) *uidBudget {
	u := b.uids[uid]
	if u == nil || now.Sub(u.start) >= auditBudgetWindow || now.Before(u.start) {
		// Forget the uids whose hour is over, so the map stays small.
		for k, v := range b.uids {
			if now.Sub(v.start) >= auditBudgetWindow {
				delete(b.uids, k)
			}
		}
		u = &uidBudget{start: now}
		b.uids[uid] = u
	}
	return u
}

// fullShare is how many bytes of full received records one uid may add
// an hour: a quarter of its budget.
func (b *auditBudget) fullShare() int64 { return b.limit / 4 }

// full reports whether uid's received record at now may be full (else it
// is compact: the line's size and SHA-256, the short fields): root's
// always is; another uid's while its full received records took less
// than a quarter of its budget this hour, and the budget is not spent.
func (b *auditBudget) full(uid int, now time.Time) bool {
	if uid == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.hourLocked(uid, now)
	return u.full < b.fullShare() && u.used < b.limit
}

// charge counts a record of n bytes that uid's request added at now
// (full: a full received record). Root's are not counted.
func (b *auditBudget) charge(uid, n int, full bool, now time.Time) {
	if uid == 0 || n <= 0 {
		return
	}
	b.mu.Lock()
	u := b.hourLocked(uid, now)
	step := max(1, b.limit/auditBudgetSaves)
	passed := u.used/step != (u.used+int64(n))/step || u.used < b.limit && u.used+int64(n) >= b.limit
	u.used += int64(n)
	if full {
		u.full += int64(n)
	}
	b.mu.Unlock()
	if passed && b.saved != nil {
		b.saved()
	}
}

// snapshot returns the hours not over at now, by uid.
func (b *auditBudget) snapshot(now time.Time) map[int]uidBudget {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[int]uidBudget, len(b.uids))
	for uid, u := range b.uids {
		if !now.Before(u.start) && now.Sub(u.start) < auditBudgetWindow {
			out[uid] = *u
		}
	}
	return out
}

// restore takes up hours a daemon before this one kept (snapshot), for
// the uids that have none yet.
func (b *auditBudget) restore(hours map[int]uidBudget) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for uid, u := range hours {
		if _, ok := b.uids[uid]; !ok && uid != 0 {
			b.uids[uid] = &u
		}
	}
}

// admit is called as a request of uid comes, before it is received. A
// request that may run or reach a person (not a check, which shares the
// rate-limited budget of refused requests) is refused, before anything
// of it is recorded but its rejected record, once uid's records took its
// whole budget this hour: what it would add could not be bounded
// otherwise, and records of a run are never left out. The first refusal
// of the hour is told (spent). Root is not limited.
func (b *auditBudget) admit(uid int, check bool, now time.Time) error {
	if uid == 0 || check {
		return nil
	}
	b.mu.Lock()
	u := b.hourLocked(uid, now)
	if u.used < b.limit {
		b.mu.Unlock()
		return nil
	}
	renews, tell := u.start.Add(auditBudgetWindow), !u.told
	u.told = true
	b.mu.Unlock()
	if tell && b.spent != nil {
		b.spent(uid, b.limit, renews)
	}
	return wire.AuditBudgetError(uid, b.limit, renews)
}
