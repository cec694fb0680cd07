package daemon

import (
	"fmt"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/audit"
)

// What one uid's requests add to the audit log is bounded (docs/audit.md,
// "What one requester adds to the log"): a received record of a uid
// other than root keeps each
// long argument, and a long reason, as an excerpt with its size and
// SHA-256, and at most maxRecordedPipeline bytes of the pipeline; and a
// uid whose received records took auditUIDBudget bytes within the hour
// gets compact ones (the line's size and SHA-256, the short fields) until
// the hour ends. Root is not limited.

const (
	// maxRecordedWord is the longest argument a received record keeps
	// whole; a longer one is kept as an excerpt of maxExcerpt bytes.
	maxRecordedWord = 256
	maxExcerpt      = 128
	// maxRecordedReason is the longest reason kept whole.
	maxRecordedReason = 1024
	// maxRecordedPipeline bounds the pipeline's (excerpted) words a
	// received record keeps; the words past it are counted.
	maxRecordedPipeline = 8 << 10
	// auditUIDBudget is how many bytes of full received records one uid
	// may add an hour; past it they are compact.
	auditUIDBudget = 2 << 20
	// auditBudgetWindow is the budget's period.
	auditBudgetWindow = time.Hour
)

// excerpt returns s when it is at most max bytes, else its first
// maxExcerpt bytes (cut at a character boundary) with its size and
// SHA-256: "BEGINNING…[N bytes, sha256:HEX]".
func excerpt(s string, max int) string {
	if len(s) <= max {
		return s
	}
	cut := maxExcerpt
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…[%d bytes, sha256:%s]", s[:cut], len(s), audit.SHA256([]byte(s)))
}

// excerptPipeline returns the pipeline as a received record keeps it:
// each long word as an excerpt, and the words past maxRecordedPipeline
// bytes left out, a last word saying how many. p itself is not changed.
func excerptPipeline(p [][]string) [][]string {
	total, out := 0, make([][]string, 0, len(p))
	for i, argv := range p {
		st := make([]string, 0, len(argv))
		for j, w := range argv {
			w = excerpt(w, maxRecordedWord)
			if total+len(w) > maxRecordedPipeline {
				left := len(argv) - j
				for _, rest := range p[i+1:] {
					left += len(rest)
				}
				st = append(st, fmt.Sprintf("…[%d more words, in the request line's sha256]", left))
				return append(out, st)
			}
			total += len(w)
			st = append(st, w)
		}
		out = append(out, st)
	}
	return out
}

// auditBudget is the per-uid hourly budget of full received records.
type auditBudget struct {
	mu   sync.Mutex
	uids map[int]*uidBudget
}

type uidBudget struct {
	start time.Time
	used  int
}

// take charges n bytes to uid's hour starting now or earlier, and
// reports whether its received record may be full: root's always is.
func (b *auditBudget) take(uid, n int, now time.Time) bool {
	if uid == 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.uids == nil {
		b.uids = map[int]*uidBudget{}
	}
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
	if u.used+n > auditUIDBudget {
		return false
	}
	u.used += n
	return true
}
