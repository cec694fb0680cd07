package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestAuditBudget: what one uid's requests add to the log is bounded by
// the hour: its received records are full within a quarter of the
// budget, its requests refused (told once) once the budget is spent,
// until the hour ends; checks, other uids and root are not affected.
func TestAuditBudget(t *testing.T) {
	const limit = 64 << 10
	told := 0
	b := newAuditBudget(limit, func(uid int, l int64, renews time.Time) {
		told++
		if uid != 1000 || l != limit || renews.Sub(time.Date(2026, 12, 6, 4, 0, 0, 0, time.UTC)) != 0 {
			t.Errorf("told uid %d, budget %d, renews %v", uid, l, renews)
		}
	})
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	n := 0
	for ; b.full(1000, now); n++ {
		b.charge(1000, 1<<10, true, now)
	}
	if n != limit/4/(1<<10) {
		t.Errorf("%d full received records of 1 KiB in the hour, want %d", n, limit/4/(1<<10))
	}
	for ; b.admit(1000, false, now) == nil; n++ {
		if n > limit {
			t.Fatal("never refused")
		}
		b.charge(1000, 1<<10, false, now.Add(time.Duration(n)*time.Second))
	}
	if n != limit/(1<<10) {
		t.Errorf("refused after %d records of 1 KiB, want %d", n, limit/(1<<10))
	}
	err := b.admit(1000, false, now.Add(59*time.Minute))
	if want := "server busy: the requests of uid 1000 added their hourly budget of 65536 bytes to the audit log; more are refused until 2026-12-06T04:00:00Z"; err == nil || err.Error() != want {
		t.Errorf("refused with %v, want %q", err, want)
	}
	if b.admit(1000, true, now) != nil || b.admit(1001, false, now) != nil || b.admit(0, false, now) != nil || !b.full(1001, now) || !b.full(0, now) {
		t.Error("a check, another uid, or root is limited by uid 1000's budget")
	}
	if b.full(1000, now) {
		t.Error("a full received record past the budget")
	}
	if told != 1 {
		t.Errorf("told %d times in the hour, want once", told)
	}
	if b.admit(1000, false, now.Add(time.Hour)) != nil || !b.full(1000, now.Add(time.Hour)) {
		t.Error("still limited once the hour ended")
	}
}

// TestExcerptEnv: long env keys are kept as excerpts, and the keys past
// the env's bound are counted; a short env is kept as it is.
func TestExcerptEnv(t *testing.T) {
	env := map[string]string{"LANG": "C.UTF-8"}
	if e, h := excerptEnv(env, nil); len(e) != 1 || e["LANG"] != "C.UTF-8" || h != nil {
		t.Errorf("a short env changed: %v %v", e, h)
	}
	long := "LA_" + strings.Repeat("A", 1000) // sorts first
	for i := range 1000 {
		env[fmt.Sprintf("LC_%04d", i)] = "C"
	}
	env[long] = "C"
	e, h := excerptEnv(env, map[string]string{"LB_KEY": strings.Repeat("f", 64)})
	total := 0
	for k, v := range e {
		total += len(k) + len(v)
	}
	if total > maxRecordedEnv+100 || !strings.HasPrefix(e["…"], "[") || !strings.Contains(e["…"], " more keys") || h["LB_KEY"] == "" {
		t.Errorf("kept %d bytes of %d keys, last %q, hashed %v", total, len(e), e["…"], h)
	}
	if _, ok := e[long]; ok || len(e) < 2 {
		t.Error("a 1003-byte key kept whole")
	}
	for k := range e {
		if strings.HasPrefix(k, "LA_") && !strings.Contains(k, "…[1003 bytes, sha256:") {
			t.Errorf("long key kept as %q", k)
		}
	}
}

// TestExcerptPipeline: a long word is kept as an excerpt with its size and
// hash, and the words past the pipeline's bound are counted.
func TestExcerptPipeline(t *testing.T) {
	long := strings.Repeat("é", 1000) // 2000 bytes, cut at a character
	got := excerptPipeline([][]string{{"echo", long}})
	if w := got[0][1]; len(w) > maxExcerpt+100 || !strings.HasPrefix(w, "éé") || !strings.Contains(w, "…[2000 bytes, sha256:") {
		t.Errorf("excerpt %q", w)
	}
	many := make([]string, 10000)
	for i := range many {
		many[i] = "word"
	}
	got = excerptPipeline([][]string{many, {"wc"}})
	if len(got) != 1 {
		t.Fatalf("%d stages kept, want 1 (the bound reached in the first)", len(got))
	}
	last := got[0][len(got[0])-1]
	total := 0
	for _, w := range got[0] {
		total += len(w)
	}
	if total > maxRecordedPipeline+100 || !strings.HasPrefix(last, "…[") || !strings.Contains(last, " more words") {
		t.Errorf("kept %d bytes, last word %q", total, last)
	}
	// Empty words take room in the record too.
	if got := excerptPipeline([][]string{append([]string{"true"}, make([]string, 100000)...)}); len(got[0]) > maxRecordedPipeline/3+2 {
		t.Errorf("kept %d empty words", len(got[0]))
	}
	if p := [][]string{{"ls", "-l"}}; excerptPipeline(p)[0][1] != "-l" {
		t.Error("a short pipeline changed")
	}
}

// TestAuditBudgetSaved: a uid's charges have the budgets saved each time
// they pass another 1/auditBudgetSaves of its budget, and when they reach
// it, not at every record.
func TestAuditBudgetSaved(t *testing.T) {
	t.Parallel()
	const limit = 64<<10 + 100 // not a multiple of auditBudgetSaves
	saves := 0
	b := newAuditBudget(limit, nil)
	b.saved = func() { saves++ }
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	for b.admit(1000, false, now) == nil {
		b.charge(1000, 1000, false, now)
	}
	b.charge(0, 1<<20, false, now) // root's: not counted, nor saved
	// Steps of 4102 bytes: 15 passed below the limit, then the limit.
	if saves != 16 {
		t.Errorf("saved %d times over a budget of %d charged 1000 bytes at a time, want 16", saves, limit)
	}
}

// TestLimitsFile: the budgets and minutes a daemon keeps are read back as
// they were, but for the hours and minutes over (or not begun: the clock
// went back); a file with any line the daemon does not write is not
// read at all.
func TestLimitsFile(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	st := limitState{
		hours: map[int]uidBudget{
			1000: {start: now.Add(-59 * time.Minute), used: 70000, full: 16000, told: true},
			1001: {start: now.Add(-time.Minute), used: 10},
			1002: {start: now.Add(-time.Hour), used: 1 << 20},  // over
			1003: {start: now.Add(time.Second), used: 1 << 20}, // after now
		},
		minutes: map[int]rejectMinute{
			1000: {start: now.Add(-59 * time.Second), n: 60},
			1004: {start: now.Add(-time.Minute), n: 60}, // over
		},
	}
	data := formatLimits(st)
	got, err := parseLimits(data, now)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	delete(st.hours, 1002)
	delete(st.hours, 1003)
	delete(st.minutes, 1004)
	same := len(got.hours) == len(st.hours) && len(got.minutes) == len(st.minutes)
	for uid, u := range st.hours {
		g, ok := got.hours[uid]
		same = same && ok && g.start.Equal(u.start) && g.used == u.used && g.full == u.full && g.told == u.told
	}
	for uid, m := range st.minutes {
		g, ok := got.minutes[uid]
		same = same && ok && g.start.Equal(m.start) && g.n == m.n
	}
	if !same {
		t.Errorf("read back %v, want %v", got, st)
	}
	for _, tc := range []struct{ name, text string }{
		{"empty", ""},
		{"no header", "hour 1000 1 2 3 0\n"},
		{"cut short", "rootgate audit budget 1\nhour 1000 1 2 1 0"},
		{"root", "rootgate audit budget 1\nhour 0 1 2 1 0\n"},
		{"uid past 32 bits", "rootgate audit budget 1\nhour 4294967296 1 2 1 0\n"},
		{"negative", "rootgate audit budget 1\nhour 1000 1 -2 0 0\n"},
		{"plus sign", "rootgate audit budget 1\nhour 1000 1 +2 0 0\n"},
		{"full past used", "rootgate audit budget 1\nhour 1000 1 2 3 0\n"},
		{"told 2", "rootgate audit budget 1\nhour 1000 1 2 1 2\n"},
		{"fields missing", "rootgate audit budget 1\nhour 1000 1 2\n"},
		{"twice", "rootgate audit budget 1\nminute 1000 1 2\nminute 1000 1 2\n"},
		{"unknown", "rootgate audit budget 1\nday 1000 1 2\n"},
		{"double space", "rootgate audit budget 1\nminute 1000  1 2\n"},
	} {
		if _, err := parseLimits([]byte(tc.text), now); err == nil {
			t.Errorf("%s: %q read", tc.name, tc.text)
		}
	}
}
