package daemon

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
)

func TestRejectLimit(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got []*audit.Record
	l := newRejectLimit(2, func(r *audit.Record) { mu.Lock(); got = append(got, r); mu.Unlock() })
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var allowed []bool
	for i := range 5 {
		allowed = append(allowed, l.allow(1000, t0.Add(time.Duration(i)*time.Second)))
	}
	if want := []bool{true, true, false, false, false}; !slices.Equal(allowed, want) {
		t.Fatalf("allowed %v, want %v", allowed, want)
	}
	for range 10 {
		if !l.allow(0, t0) {
			t.Fatal("root was limited")
		}
	}
	if !l.allow(1001, t0) {
		t.Fatal("another uid was limited")
	}
	// The next minute: uid 1000's dropped record, and a fresh count.
	if !l.allow(1000, t0.Add(61*time.Second)) {
		t.Fatal("a new minute was limited")
	}
	if len(got) != 1 || got[0].Kind != audit.KindDropped || got[0].Peer.UID != 1000 || got[0].Dropped.Count != 3 || !got[0].Dropped.Since.Equal(t0) {
		t.Fatalf("dropped records %+v", got)
	}
	l.allow(1000, t0.Add(62*time.Second))
	l.allow(1000, t0.Add(63*time.Second)) // dropped
	l.close()
	if len(got) != 2 || got[1].Dropped.Count != 1 {
		t.Fatalf("close wrote %d dropped records", len(got)-1)
	}
}

func TestClip(t *testing.T) {
	t.Parallel()
	if got := clip("short", 10); got != "short" {
		t.Errorf("clip = %q", got)
	}
	long := strings.Repeat("é", 200) // 400 bytes
	got := clip(long, 255)
	if !strings.HasPrefix(got, strings.Repeat("é", 127)+"… (400 bytes)") || len(got) > 255+20 {
		t.Errorf("clip = %q", got)
	}
}

// TestRejectLimitKept: a minute handed from a daemon that stopped to the
// next (close, minutes, restore) goes on where it was: past its rate, a
// uid's records are counted, not written, until the minute ends.
func TestRejectLimitKept(t *testing.T) {
	t.Parallel()
	var got []*audit.Record
	l := newRejectLimit(2, func(r *audit.Record) { got = append(got, r) })
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		l.allow(1000, t0.Add(time.Duration(i)*time.Second))
	}
	l.close()
	ms := l.minutes(t0.Add(10 * time.Second))
	if len(got) != 1 || got[0].Dropped.Count != 1 || len(ms) != 1 || ms[1000] != (rejectMinute{start: t0, n: 2}) {
		t.Fatalf("closed with dropped records %+v, minutes %+v", got, ms)
	}
	next := newRejectLimit(2, func(r *audit.Record) { got = append(got, r) })
	next.restore(ms)
	if next.allow(1000, t0.Add(20*time.Second)) {
		t.Error("a kept minute past its rate allowed a record")
	}
	if !next.allow(1001, t0.Add(20*time.Second)) || !next.allow(1000, t0.Add(61*time.Second)) {
		t.Error("another uid, or the next minute, was limited")
	}
	if len(got) != 2 || got[1].Dropped.Count != 1 || !got[1].Dropped.Since.Equal(t0) {
		t.Errorf("dropped records %+v", got)
	}
	next.close()
}
