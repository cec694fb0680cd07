package approval

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
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
