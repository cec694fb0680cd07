package daemon

import (
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/audit"
)

// What one uid's requests add to the audit log is bounded (docs/audit.md,
// "What one requester adds to the log"): a received record of a uid
// other than root keeps each long argument, env key and reason as an
// excerpt with its size and SHA-256, and at most maxRecordedPipeline
// bytes of the pipeline and maxRecordedEnv of the env; and a
// uid whose received records took auditUIDBudget bytes within the hour
// gets compact ones (the line's size and SHA-256, the short fields) until
// the hour ends. Root is not limited.

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
