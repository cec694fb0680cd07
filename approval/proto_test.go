package approval

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func readOne(s string, max int) (*Message, error) {
	return ReadMessage(bufio.NewReaderSize(strings.NewReader(s), 16), max)
}

// TestReadMessageErrors pins what ReadMessage refuses.
func TestReadMessageErrors(t *testing.T) {
	for _, tc := range []struct {
		name, line, want string
	}{
		{"unknown field", `{"type":"pong","evil":1}` + "\n", `bad message: json: unknown field "evil"`},
		{"duplicate field", `{"type":"decision","id":"a","hash":"h","approve":false,"approve":true}` + "\n", `bad message: duplicate field "approve"`},
		{"trailing data", `{"type":"pong"} {"type":"decision"}` + "\n", "bad message: data after the message"},
		{"no type", `{}` + "\n", "bad message: no type"},
		{"not an object", `[]` + "\n", "bad message: json: cannot unmarshal array into Go value of type approval.Message"},
		{"too long", `{"type":"` + strings.Repeat("x", 200) + `"}` + "\n", "message line too long"},
		{"no newline", `{"type":"pong"}`, "unexpected EOF"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := readOne(tc.line, 90)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got %+v, %v; want error %q", m, err, tc.want)
			}
		})
	}
	if _, err := readOne("", 64); !errors.Is(err, io.EOF) {
		t.Errorf("empty input: %v, want EOF", err)
	}
	m, err := readOne(`{"type":"decision","id":"a","hash":"h","approve":true}`+" \n", 64)
	if err != nil || m.Approve == nil || !*m.Approve {
		t.Errorf("plain decision: %+v, %v", m, err)
	}
}

// FuzzReadMessage: whatever an approver (or a daemon) sends, ReadMessage
// does not panic, honours its cap, returns only typed messages, and what
// it accepts survives a round trip through WriteMessage unchanged.
func FuzzReadMessage(f *testing.F) {
	for _, s := range []string{
		`{"type":"hello","version":1,"client":"v1","name":"pts/3","capabilities":["terminal"]}`,
		`{"type":"decision","id":"x","hash":"00","approve":true}`,
		`{"type":"pong"}`,
		`{"type":"prompt","id":"x","hash":"00","deadline":"2026-02-13T14:30:00Z","request":{"id":"x","stages":[{"argv":["a"],"path":"/a","target":""}],"stdin":"aGk="}}`,
		`{"type":"decision","approve":false,"approve":true}`,
	} {
		f.Add([]byte(s+"\n"), 4096)
	}
	f.Fuzz(func(t *testing.T, in []byte, max int) {
		max = 1 + max&0xffff
		m, err := ReadMessage(bufio.NewReaderSize(bytes.NewReader(in), 16), max)
		first, _, _ := bytes.Cut(in, []byte("\n"))
		if len(first)+1 > max && err == nil {
			t.Fatalf("accepted a %d-byte line over the %d-byte cap", len(first)+1, max)
		}
		if err != nil {
			return
		}
		if m.Type == "" {
			t.Fatal("accepted a message without a type")
		}
		var b1 bytes.Buffer
		if err := WriteMessage(&b1, m); err != nil {
			t.Fatalf("accepted message does not encode: %v", err)
		}
		m2, err := ReadMessage(bufio.NewReader(bytes.NewReader(b1.Bytes())), b1.Len())
		if err != nil {
			t.Fatalf("re-reading %q: %v", b1.Bytes(), err)
		}
		var b2 bytes.Buffer
		_ = WriteMessage(&b2, m2)
		if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
			t.Fatalf("round trip changed the message:\n%s\n%s", b1.Bytes(), b2.Bytes())
		}
	})
}

func TestPromptLineBound(t *testing.T) {
	// The worst a 1 MiB request line can do: an argument of U+2028 (3
	// bytes each, written back as the 6 of \u2028), 16 stages whose
	// resolved paths are PATH_MAX bytes of invalid UTF-8 (6 bytes each as
	// \ufffd), and '<' that must not become \u003c.
	bad := strings.Repeat("\xff", 4096)
	p := &Prompt{ID: "big", Requester: Requester{Exe: bad}}
	for i := range 16 {
		arg := "<"
		if i == 0 {
			arg = strings.Repeat("\u2028", (1<<20)/3)
		}
		p.Stages = append(p.Stages, Stage{Argv: []string{"cat", arg}, Path: bad, Target: bad})
	}
	line, err := PromptLine(p, time.Now())
	if err != nil || len(line) > MaxDaemonLine {
		t.Fatalf("a prompt for a 1 MiB request: %d bytes, %v; want at most %d", len(line), err, MaxDaemonLine)
	}
	if _, err := ReadMessage(bufio.NewReader(bytes.NewReader(line)), MaxDaemonLine); err != nil {
		t.Fatalf("the client cannot read the prompt back: %v", err)
	}

	p = &Prompt{Stages: []Stage{{Argv: []string{"echo", strings.Repeat("<", 3<<20)}}}}
	if line, err := PromptLine(p, time.Now()); err != nil || !bytes.Contains(line, []byte(`"<<<`)) {
		t.Fatalf("'<' is escaped or refused: %.40q, %v", line, err)
	}
	p.Stages[0].Argv[1] += strings.Repeat("<", 1<<20)
	if _, err := PromptLine(p, time.Now()); err == nil || !strings.HasPrefix(err.Error(), "the request is too large to show to an approver: its prompt would be ") {
		t.Fatalf("an over-long prompt: %v, want it refused", err)
	}
}
