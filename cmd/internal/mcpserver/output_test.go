package mcpserver

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// numbered is n lines "line 1" ... "line n".
func numbered(n int) []byte {
	var sb strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&sb, "line %d\n", i)
	}
	return []byte(sb.String())
}

var markerArgs = regexp.MustCompile(`read them with the output tool: (\{[^}]*\}) \.\.\.\]\n`)

// TestCutOnLinesReadsBack: a long stream is cut between lines, the marker
// says which lines, and reading them with the output tool's arguments it
// gives returns exactly the bytes cut.
func TestCutOnLinesReadsBack(t *testing.T) {
	b := numbered(10000)
	resp := &wire.Response{ID: "c1", Status: wire.StatusOK, Stages: []wire.StageResult{{}}, Stdout: b}
	r := render(LocalHost, "/s", [][]string{{"seq"}}, resp, 4000)
	s := r.Stdout
	head, rest, ok := strings.Cut(s.Text, "[... lines ")
	if !ok || !strings.HasSuffix(head, "\n") || !strings.HasPrefix(head, "line 1\n") {
		t.Fatalf("head %q", head)
	}
	m := markerArgs.FindStringSubmatch(rest)
	if m == nil {
		t.Fatalf("marker: %q", rest[:min(len(rest), 400)])
	}
	tail := rest[strings.Index(rest, m[0])+len(m[0]):]
	if !strings.HasSuffix(tail, "line 10000\n") || !strings.HasPrefix(tail, "line ") {
		t.Fatalf("tail %q", tail)
	}
	if len(head)+len(tail) > 4000 {
		t.Errorf("shown %d bytes, budget 4000", len(head)+len(tail))
	}
	var in OutputInput
	if err := json.Unmarshal([]byte(m[1]), &in); err != nil {
		t.Fatal(err)
	}
	got := readRange(resp, in, len(b)) // a budget large enough for the whole cut
	if got.Error != "" || head+got.Text+tail != string(b) || got.NextFrom != got.To+1 {
		t.Fatalf("read back %+v: head, range and tail do not make the stream", got)
	}
	if s.OmittedLines != got.To-got.From+1 || s.OmittedBytes != len(got.Text) {
		t.Errorf("omitted %d lines, %d bytes; read %+v", s.OmittedLines, s.OmittedBytes, got)
	}
	// With the default budget the same range comes in pieces that join up.
	var joined strings.Builder
	for from := in.From; from < in.From+in.Count; {
		part := readRange(resp, OutputInput{ID: "c1", From: from, Count: in.Count - (from - in.From)}, 4000)
		if part.Error != "" || len(part.Text) > 4000 {
			t.Fatalf("part %+v", part)
		}
		joined.WriteString(part.Text)
		from = part.NextFrom
	}
	if head+joined.String()+tail != string(b) {
		t.Error("pieces read with next_from do not make the stream")
	}
}

// TestBudgetIsWholeResult: the text budget holds for all streams
// together, as for a 16-stage pipeline whose every stage writes 100 KB of
// errors; a short stream is shown whole.
func TestBudgetIsWholeResult(t *testing.T) {
	resp := &wire.Response{ID: "c2", Status: wire.StatusOK, Stdout: []byte("short\n")}
	var pipe [][]string
	for range 16 {
		resp.Stages = append(resp.Stages, wire.StageResult{Stderr: numbered(12000)})
		pipe = append(pipe, []string{"cat"})
	}
	r := render(LocalHost, "/s", pipe, resp, DefaultMaxText)
	shown := len(r.Stdout.Text)
	if r.Stdout.Text != "short\n" {
		t.Errorf("stdout %q", r.Stdout.Text)
	}
	for i, st := range r.Stages {
		m := markerArgs.FindStringIndex(st.Stderr.Text)
		if m == nil || st.Stderr.OmittedLines == 0 {
			t.Fatalf("stage %d not cut: %+v", i+1, st.Stderr.OmittedBytes)
		}
		if !strings.Contains(st.Stderr.Text, fmt.Sprintf(`"stream": "stderr", "stage": %d,`, i+1)) {
			t.Errorf("stage %d's marker names another stream", i+1)
		}
		shown += len(st.Stderr.Text) - (m[1] - strings.LastIndex(st.Stderr.Text[:m[0]], "[..."))
	}
	if shown > DefaultMaxText {
		t.Errorf("%d bytes of output shown, budget %d", shown, DefaultMaxText)
	}
	if n := len(r.text()); n > DefaultMaxText+16*400 {
		t.Errorf("text of %d bytes", n)
	}
}

// TestBinaryTakesNoBudget: binary output is only summarised, so the text
// of the other streams gets the whole budget.
func TestBinaryTakesNoBudget(t *testing.T) {
	bin := append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 100000)...)
	text := numbered(3000) // 24,893 bytes
	resp := &wire.Response{ID: "c3", Status: wire.StatusOK, Stdout: bin, Stages: []wire.StageResult{{Stderr: text}}}
	r := render(LocalHost, "/s", [][]string{{"cat"}}, resp, DefaultMaxText)
	if !r.Stdout.Binary || r.Stages[0].Stderr.Text != string(text) {
		t.Fatalf("stdout binary %v; stderr cut %d bytes", r.Stdout.Binary, r.Stages[0].Stderr.OmittedBytes)
	}
}

func TestShares(t *testing.T) {
	for _, tc := range []struct {
		sizes  []int
		budget int
		want   string
	}{
		{[]int{10, 1000, 1000}, 1000, "[10 495 495]"},
		{[]int{0, 0}, 100, "[0 0]"},
		{[]int{5000, 10, 20}, 1000, "[970 10 20]"},
		{[]int{400, 400, 400}, 900, "[300 300 300]"},
	} {
		if got := fmt.Sprint(shares(tc.sizes, tc.budget)); got != tc.want {
			t.Errorf("shares(%v, %d) = %s, want %s", tc.sizes, tc.budget, got, tc.want)
		}
	}
}

// TestStoreBounds: a session keeps the last keepCalls finished calls and
// at most keepBytes of their output, forgetting the oldest first, and
// always the newest.
func TestStoreBounds(t *testing.T) {
	s := &session{calls: map[string]*call{}}
	finished := func(id string, size int) *call {
		c := &call{id: id, done: make(chan struct{}), size: size} // the size its output would have
		close(c.done)
		s.calls[id] = c
		s.keep(c)
		return c
	}
	for i := range keepCalls + 8 {
		finished(fmt.Sprint("n", i), 10)
	}
	if len(s.kept) != keepCalls || s.get("n7") != nil || s.get("n8") == nil || s.bytes != keepCalls*10 {
		t.Fatalf("kept %d calls, %d bytes; n7 %v, n8 %v", len(s.kept), s.bytes, s.get("n7") != nil, s.get("n8") != nil)
	}
	// Two calls of 100 MiB fit with the small ones; a third pushes out
	// everything older than what fits in 256 MiB.
	finished("big1", 100<<20)
	finished("big2", 100<<20)
	finished("big3", 100<<20)
	if s.get("big1") != nil || s.get("big2") == nil || s.get("big3") == nil || s.bytes > keepBytes {
		t.Fatalf("after three big calls: kept %d, %d bytes", len(s.kept), s.bytes)
	}
	// The newest is kept even alone over the bound.
	finished("huge", keepBytes+1)
	if len(s.kept) != 1 || s.get("huge") == nil || s.get("big3") != nil {
		t.Fatalf("after a huge call: kept %d", len(s.kept))
	}
	// A pending call is never forgotten.
	s.calls["pending"] = &call{id: "pending", done: make(chan struct{})}
	for i := range keepCalls + 1 {
		finished(fmt.Sprint("m", i), 1)
	}
	if s.get("pending") == nil {
		t.Fatal("a pending call was forgotten")
	}
}

// TestRangeHugeCount: a count or start as large as an int can hold (the
// model chooses them) reads to the end instead of overflowing into a
// slice out of range, which would end rootgate mcp and its session.
func TestRangeHugeCount(t *testing.T) {
	b := numbered(100)
	resp := &wire.Response{ID: "c1", Status: wire.StatusOK, Stages: []wire.StageResult{{}}, Stdout: b}
	for _, unit := range []string{"lines", "bytes"} {
		for _, from := range []int{1, 2, 50, math.MaxInt} {
			got := readRange(resp, OutputInput{ID: "c1", Unit: unit, From: from, Count: math.MaxInt}, len(b))
			if got.Error != "" || got.NextFrom != 0 {
				t.Errorf("%s from %d, count MaxInt: %+v", unit, from, got)
			}
			if from == 2 && unit == "lines" && got.Text != strings.TrimPrefix(string(b), "line 1\n") {
				t.Errorf("lines from 2: text %q", got.Text[:min(40, len(got.Text))])
			}
		}
	}
}
