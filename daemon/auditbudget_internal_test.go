package daemon

import (
	"strings"
	"testing"
	"time"
)

// TestAuditBudget: one uid's full received records are bounded by the
// hour; past the budget they are compact until the hour ends, other uids
// and root are not affected.
func TestAuditBudget(t *testing.T) {
	var b auditBudget
	now := time.Date(2026, 12, 6, 3, 0, 0, 0, time.UTC)
	n := 0
	for b.take(1000, 8<<10, now.Add(time.Duration(n)*time.Second)) {
		n++
	}
	if n != auditUIDBudget/(8<<10) {
		t.Errorf("%d full records of 8 KiB in the hour, want %d", n, auditUIDBudget/(8<<10))
	}
	if !b.take(1001, 8<<10, now) || !b.take(0, 1<<30, now) {
		t.Error("another uid, or root, is limited by uid 1000's budget")
	}
	if b.take(1000, 1, now.Add(59*time.Minute)) {
		t.Error("a full record past the budget within the hour")
	}
	if !b.take(1000, 8<<10, now.Add(time.Hour)) {
		t.Error("no full record once the hour ended")
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
	if p := [][]string{{"ls", "-l"}}; excerptPipeline(p)[0][1] != "-l" {
		t.Error("a short pipeline changed")
	}
}
