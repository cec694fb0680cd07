package daemon

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootgate/rootgate/wire"
)

// TestAnswerLineOneWriter: progress lines written from other goroutines
// while a run's stdout streams into the answer are each written whole,
// all before the answer's first byte, and none after: the connection
// carries whole progress lines, then the one answer line, whose stdout is
// the run's bytes and nothing else.
func TestAnswerLineOneWriter(t *testing.T) {
	var conn bytes.Buffer
	a := &answerLine{w: &conn}
	out := a.stdout("x")
	var want []byte
	var wg sync.WaitGroup
	late := 0
	var mu sync.Mutex
	first := make(chan struct{}) // a progress line was written: stdout may begin
	var once sync.Once
	for range 4 {
		wg.Go(func() {
			for range 200 {
				err := wire.WriteProgress(a.progress(), "x", wire.ProgressRunning, time.Second)
				if err == nil {
					once.Do(func() { close(first) })
				}
				if errors.Is(err, errAnswerBegun) {
					mu.Lock()
					late++
					mu.Unlock()
				} else if err != nil {
					t.Error(err)
				}
			}
		})
	}
	<-first
	for i := range 300 {
		p := bytes.Repeat([]byte{byte(i)}, i%7)
		want = append(want, p...)
		if _, err := out.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	if err := a.finish(&wire.Response{ID: "x", Status: wire.StatusOK, Stages: []wire.StageResult{{}}, Version: "v"}); err != nil {
		t.Fatal(err)
	}
	if _, err := out.Write([]byte("after")); err == nil {
		t.Error("stdout written after the answer was finished")
	}
	if err := wire.WriteProgress(a.progress(), "x", wire.ProgressRunning, 0); !errors.Is(err, errAnswerBegun) {
		t.Errorf("a progress line after the answer: %v", err)
	}

	lines := strings.SplitAfter(conn.String(), "\n")
	if lines[len(lines)-1] != "" {
		t.Fatalf("the connection's bytes do not end with a whole line: %q", lines[len(lines)-1])
	}
	lines = lines[:len(lines)-1]
	answer := lines[len(lines)-1]
	for _, l := range lines[:len(lines)-1] {
		if _, _, ok := wire.ParseProgress([]byte(l)); !ok {
			t.Fatalf("before the answer: %q, not a progress line", l)
		}
	}
	var r wire.Response
	if err := json.Unmarshal([]byte(answer), &r); err != nil {
		t.Fatalf("answer %q: %v", answer, err)
	}
	if !bytes.Equal(r.Stdout, want) || r.Status != wire.StatusOK {
		t.Fatalf("answer's stdout %d bytes, want the %d written", len(r.Stdout), len(want))
	}
	t.Logf("%d progress lines before the answer, %d refused once it had begun", len(lines)-1, late)
}

// TestAnswerLineAbandon: a request abandoned once its answer has begun
// (a panic past the run's start) writes no other line into it.
func TestAnswerLineAbandon(t *testing.T) {
	for _, stdout := range []string{"", "a", "abc"} {
		var conn bytes.Buffer
		a := &answerLine{w: &conn}
		_, _ = a.stdout("x").Write([]byte(stdout))
		before := conn.Len()
		err := a.abandon(wire.ErrorResponse("", wire.ErrInternal))
		switch {
		case len(stdout) >= 3 && (!errors.Is(err, errAnswerBegun) || conn.Len() != before):
			t.Errorf("stdout %q: abandon wrote %q (%v) after the answer began", stdout, conn.Bytes()[before:], err)
		case len(stdout) < 3 && (err != nil || !strings.Contains(conn.String(), `"code":"internal"`)):
			t.Errorf("stdout %q, nothing of the answer written: abandon wrote %q (%v), want the error answer", stdout, conn.String(), err)
		}
	}
}

// TestHeldProgressBeforeStdout: a progress line held back (progressLines)
// when a run's stdout comes is written then, before the answer begins,
// not dropped: the client needs its within, since the answer's line may
// take the whole run to complete. None is written after.
func TestHeldProgressBeforeStdout(t *testing.T) {
	var conn bytes.Buffer
	a := &answerLine{w: &conn}
	lines := &progressLines{w: a.progress(), hold: time.Hour}
	a.beforeStdout = lines.flush
	lines.send("x", wire.ProgressReceived, time.Minute)
	lines.send("x", wire.ProgressRunning, time.Second)
	out := a.stdout("x")
	if _, err := out.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	lines.send("x", wire.ProgressRunning, time.Second)
	lines.end()
	want := `{"id":"x","progress":"running","within":1}` + "\n" + `{"id":"x","stdout":"aGkK`
	if conn.String() != want {
		t.Fatalf("the connection got %q, want %q", conn.String(), want)
	}
}

// TestAnswerLineFrames: a streamed run's frames, written from a stdout
// and two stderr goroutines while progress lines come from others, reach
// the connection as whole lines: progress lines only before the first
// frame, every frame whole, then the answer, and nothing after it (a
// frame written after the answer, or after it was abandoned, is refused).
func TestAnswerLineFrames(t *testing.T) {
	var conn bytes.Buffer
	a := &answerLine{w: &conn}
	stdout, stderr := a.output(t.Context(), time.Now().Add(time.Minute))
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for range 100 {
				if err := wire.WriteProgress(a.progress(), "x", wire.ProgressRunning, time.Second); err != nil && !errors.Is(err, errAnswerBegun) {
					t.Error(err)
				}
			}
		})
	}
	for i, w := range []io.Writer{stdout, stderr(0), stderr(1)} {
		wg.Go(func() {
			for range 100 {
				if _, err := w.Write(bytes.Repeat([]byte{byte('a' + i)}, 1000)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if err := a.finish(&wire.Response{ID: "x", Status: wire.StatusOK, Stages: []wire.StageResult{{}, {}}, Version: "v"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stdout.Write([]byte("late")); err == nil {
		t.Error("a frame written after the answer")
	}
	lines := strings.SplitAfter(conn.String(), "\n")
	if lines[len(lines)-1] != "" {
		t.Fatalf("the connection does not end with a line: %q", lines[len(lines)-1])
	}
	lines = lines[:len(lines)-1]
	got := map[int]int{}
	framed := false
	for i, l := range lines {
		if _, _, ok := wire.ParseProgress([]byte(l)); ok {
			if framed {
				t.Fatalf("progress line %d after a frame", i)
			}
			continue
		}
		f, ok, err := wire.ParseFrame([]byte(l))
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if !ok {
			if i != len(lines)-1 || !strings.Contains(l, `"status":"ok"`) {
				t.Fatalf("line %d of %d, not a frame: %.100q", i, len(lines), l)
			}
			continue
		}
		framed = true
		if bytes.Count(f.Data, []byte{byte('a' + f.Stage)}) != len(f.Data) {
			t.Fatalf("frame of stream %d holds another's bytes", f.Stage)
		}
		got[f.Stage] += len(f.Data)
	}
	if got[0] != 100000 || got[1] != 100000 || got[2] != 100000 {
		t.Errorf("bytes by stream: %v", got)
	}

	// Abandoned once a frame went out: nothing more is written.
	conn.Reset()
	a = &answerLine{w: &conn}
	stdout, _ = a.output(t.Context(), time.Now().Add(time.Minute))
	_, _ = stdout.Write([]byte("x"))
	n := conn.Len()
	if err := a.abandon(wire.ErrorResponse("x", wire.ErrInternal)); !errors.Is(err, errAnswerBegun) || conn.Len() != n {
		t.Errorf("abandon after a frame: %v, %d bytes written", err, conn.Len()-n)
	}
}
