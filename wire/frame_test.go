package wire

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
)

// TestParseFrame: what is a frame, what is not, and each way a frame is
// refused.
func TestParseFrame(t *testing.T) {
	for _, c := range []struct {
		line  string
		frame *Frame // nil: not a frame
		bad   string // a frame refused with this
	}{
		{`{"stdout":"aGkK"}`, &Frame{Data: []byte("hi\n")}, ""},
		{`{"stdout":""}` + "\n", &Frame{Data: []byte{}}, ""},
		{`{"stderr":"ZQ==","stage":3}`, &Frame{Stage: 3, Data: []byte("e")}, ""},
		{`{"stage":16,"stderr":"ZQ==","more":[1]}`, &Frame{Stage: 16, Data: []byte("e")}, ""},
		{`{"id":"x","status":"ok","stdout":"aGkK","stages":[]}`, nil, ""},
		{`{"id":"x","progress":"running","within":3}`, nil, ""},
		{`{"id":"x","stdout":"aGkK","progress":"running"}`, nil, ""},
		{`{"id":"x"}`, nil, ""},
		{`[1]`, nil, ""},
		{`{"stdout":`, nil, ""},
		{``, nil, ""},
		{`{"stdout":"aGkK","stderr":"aGkK","stage":1}`, nil, "both stdout and stderr"},
		{`{"stdout":"aGkK","stage":1}`, nil, "a stdout frame has no stage"},
		{`{"stderr":"aGkK"}`, nil, "a stderr frame needs a stage from 1 to 16"},
		{`{"stderr":"aGkK","stage":0}`, nil, "a stderr frame needs a stage from 1 to 16"},
		{`{"stderr":"aGkK","stage":17}`, nil, "a stderr frame needs a stage from 1 to 16"},
		{`{"stderr":"aGkK","stage":1.0}`, nil, "a stderr frame needs a stage from 1 to 16"},
		{`{"stderr":"aGkK","stage":"1"}`, nil, "a stderr frame needs a stage from 1 to 16"},
		{`{"stdout":"aGk"}`, nil, "data is not base64"},
		{`{"stdout":"aGk\n"}`, nil, "data is not base64"},
		{`{"stdout":"` + strings.Repeat("A", (MaxFrameData+2)/3*4+4) + `"}`, nil, "more than 65536 bytes of data"},
		{`{"stdout":"` + strings.Repeat("A", (MaxFrameData+2)/3*4+100) + `"}`, nil, ""}, // longer than any frame: the caller judges it as an answer
	} {
		f, ok, err := ParseFrame([]byte(c.line))
		switch {
		case c.bad != "":
			if !ok || !errors.Is(err, ErrBadFrame) || !strings.HasSuffix(err.Error(), ": "+c.bad) {
				t.Errorf("%.60s: ok %v, err %v; want %q", c.line, ok, err, c.bad)
			}
		case c.frame == nil:
			if ok || err != nil {
				t.Errorf("%.60s: ok %v, err %v; want not a frame", c.line, ok, err)
			}
		default:
			if !ok || err != nil || f.Stage != c.frame.Stage || !bytes.Equal(f.Data, c.frame.Data) {
				t.Errorf("%.60s: %+v, %v, %v; want %+v", c.line, f, ok, err, *c.frame)
			}
		}
	}
}

// TestFrameWriter: writes from several goroutines come out as whole
// frame lines, each no bigger than MaxFrameData, and every stream's bytes
// in order; before runs once, before the first frame; a failed write is
// the last.
func TestFrameWriter(t *testing.T) {
	var out bytes.Buffer
	var mu sync.Mutex
	befores := 0
	fw := NewFrameWriter(&out, func() { befores++; out.WriteString(`{"id":"x","progress":"running"}` + "\n") },
		func() func() { mu.Lock(); return mu.Unlock })
	big := bytes.Repeat([]byte("0123456789abcdef"), (3*MaxFrameData)/16+5)
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; i < len(big); i += 7000 {
			if _, err := fw.Stdout().Write(big[i:min(len(big), i+7000)]); err != nil {
				t.Error(err)
			}
		}
	})
	for s := range 3 {
		wg.Go(func() {
			for range 50 {
				if _, err := fw.Stderr(s).Write([]byte{'a' + byte(s)}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	if befores != 1 {
		t.Fatalf("before called %d times", befores)
	}
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	if !sc.Scan() || !strings.Contains(sc.Text(), "progress") {
		t.Fatalf("first line %q, want the progress line before's", sc.Text())
	}
	streams := map[int][]byte{}
	for sc.Scan() {
		f, ok, err := ParseFrame(sc.Bytes())
		if !ok || err != nil || len(f.Data) > MaxFrameData {
			t.Fatalf("line %.80q: %v %v", sc.Text(), ok, err)
		}
		streams[f.Stage] = append(streams[f.Stage], f.Data...)
	}
	if !bytes.Equal(streams[0], big) {
		t.Errorf("stdout: %d bytes, want %d", len(streams[0]), len(big))
	}
	for s := range 3 {
		if want := strings.Repeat(string(rune('a'+s)), 50); string(streams[s+1]) != want {
			t.Errorf("stage %d's stderr %q", s+1, streams[s+1])
		}
	}

	w := &failWriter{ok: 10}
	fw = NewFrameWriter(w, nil, nil)
	if _, err := fw.Stdout().Write([]byte("abcdefghijklmnop")); !errors.Is(err, errBroken) || !errors.Is(fw.Err(), errBroken) {
		t.Fatalf("first write: %v", err)
	}
	n := w.Len()
	if _, err := fw.Stderr(0).Write([]byte("x")); !errors.Is(err, errBroken) || w.Len() != n {
		t.Fatalf("after a failed write: %v, %d bytes written more", err, w.Len()-n)
	}
}

// FuzzParseFrame: ParseFrame never panics, never takes an answer or a
// progress line for a frame, and reads back exactly what AppendFrame
// wrote of any frame it returns.
func FuzzParseFrame(f *testing.F) {
	f.Add([]byte(`{"stdout":"aGkK"}`))
	f.Add([]byte(`{"stderr":"ZQ==","stage":3}`))
	f.Add([]byte(`{"stderr":"ZQ==","stage":3,"status":"ok"}`))
	f.Add([]byte(`{"stdout":"aGk"}`))
	f.Add([]byte(`{"stderr":"","stage":1e0}`))
	f.Add([]byte(`{"stdout":"\u0061GkK"}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		fr, ok, err := ParseFrame(line)
		// The fast path and the JSON decoder read a line alike.
		jf, jok, jerr := parseFrameJSON(bytes.TrimSuffix(line, []byte("\n")))
		if ok != jok || (err == nil) != (jerr == nil) || fr.Stage != jf.Stage || !bytes.Equal(fr.Data, jf.Data) {
			t.Fatalf("%q: ParseFrame %+v %v %v, the JSON decoder %+v %v %v", line, fr, ok, err, jf, jok, jerr)
		}
		if !ok {
			if err != nil {
				t.Fatalf("not a frame, with an error: %v", err)
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v is not ErrBadFrame", err)
			}
			return
		}
		var v map[string]json.RawMessage
		if json.Unmarshal(line, &v) != nil || v["status"] != nil || v["progress"] != nil {
			t.Fatalf("%q taken for a frame", line)
		}
		if fr.Stage < 0 || fr.Stage > MaxStages || len(fr.Data) > MaxFrameData {
			t.Fatalf("frame %+v out of bounds", fr)
		}
		again, ok, err := ParseFrame(AppendFrame(nil, fr))
		if !ok || err != nil || again.Stage != fr.Stage || !bytes.Equal(again.Data, fr.Data) {
			t.Fatalf("%+v written and read back: %+v, %v, %v", fr, again, ok, err)
		}
	})
}
