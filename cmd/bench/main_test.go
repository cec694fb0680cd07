package main

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDocFlags: docs/performance.md lists every flag with its default.
func TestDocFlags(t *testing.T) {
	doc, err := os.ReadFile("../../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	var cfg config
	flags(&cfg, io.Discard).VisitAll(func(f *flag.Flag) {
		if want := "`-" + f.Name + "` (" + f.DefValue + ")"; !strings.Contains(string(doc), want) {
			t.Errorf("docs/performance.md does not list %s", want)
		}
	})
}

// TestInTurns: each round starts with the next contender, and the warm-up
// rounds are not kept.
func TestInTurns(t *testing.T) {
	var order []string
	cs := []contender{
		{"a", func() error { order = append(order, "a"); return nil }},
		{"b", func() error { order = append(order, "b"); return nil }},
		{"c", func() error { order = append(order, "c"); return nil }},
	}
	got, err := inTurns(t.Context(), 2, 1, cs...)
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.Join(order, ""); s != "abcbcacab" {
		t.Errorf("order %s, want abcbcacab", s)
	}
	for i, s := range got {
		if len(s) != 2 {
			t.Errorf("contender %d: %d times kept, want 2", i, len(s))
		}
	}
}

func TestPaired(t *testing.T) {
	ms := time.Millisecond
	a := sample{2 * ms, 9 * ms, 3 * ms}
	b := sample{1 * ms, 3 * ms, 3 * ms}
	if r := pairedRatio(a, b); r != 2 {
		t.Errorf("pairedRatio = %v, want 2 (the median of 2, 3, 1)", r)
	}
	if d := pairedDiff(a, b); d != ms {
		t.Errorf("pairedDiff = %v, want 1ms (the median of 1, 6, 0 ms)", d)
	}
	if m := a.median(); m != 3*ms {
		t.Errorf("median = %v, want 3ms", m)
	}
}
