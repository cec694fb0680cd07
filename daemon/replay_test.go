package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReplayWindow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w, err := openReplay(dir, time.Minute, DefaultMaxIDsPerUID, t0)
	if err != nil {
		t.Fatal(err)
	}
	add := func(key string, at time.Time) bool {
		t.Helper()
		fresh, err := w.Add(key, 0, at)
		if err != nil {
			t.Fatal(err)
		}
		if fresh {
			w.Done(key) // the request ended at once
		}
		return fresh
	}
	if !add("id:a", t0) || add("id:a", t0.Add(59*time.Second)) {
		t.Fatal("a key must be refused within the window")
	}
	if !add("id:a", t0.Add(61*time.Second)) {
		t.Fatal("a key must be accepted again after the window")
	}
	// A key whose request is still in progress is refused, however old.
	if fresh, err := w.Add("id:long", 0, t0); !fresh || err != nil {
		t.Fatalf("id:long: %v, %v", fresh, err)
	}
	if add("id:long", t0.Add(61*time.Second)) {
		t.Fatal("the key of a request in progress must be refused after the window")
	}
	w.Done("id:long")
	if !add("id:long", t0.Add(61*time.Second)) {
		t.Fatal("a key must be accepted again after the window once its request ended")
	}
	// A key with a space and a newline survives the file round trip.
	odd := "id:a b\nc"
	add(odd, t0.Add(61*time.Second))
	w.Close()
	w, err = openReplay(dir, time.Minute, DefaultMaxIDsPerUID, t0.Add(62*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if add(odd, t0.Add(62*time.Second)) || add("id:a", t0.Add(62*time.Second)) {
		t.Fatal("keys were lost across a reopen")
	}
	// Keys are pruned once a window: after many windows of traffic, only
	// the live ones remain in memory and in the file.
	for i := range 1000 {
		add(strings.Repeat("k", i%50)+string(rune('a'+i%26))+time.Duration(i).String(), t0.Add(time.Duration(i)*time.Second))
	}
	if n := len(w.seen); n > 2*60+2 {
		t.Errorf("%d keys held after 1000 s of one request a second; the window is 60 s", n)
	}
	b, err := os.ReadFile(filepath.Join(dir, replayFile))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\n"); n > 2*60+2 {
		t.Errorf("replay file holds %d lines", n)
	}
	w.Close()
}
