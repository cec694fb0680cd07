package remote

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/approval"
)

func readOne(s string, max int) (*Message, error) {
	return ReadMessage(bufio.NewReaderSize(strings.NewReader(s), 16), max)
}

// TestReadMessageErrors pins what ReadMessage refuses.
func TestReadMessageErrors(t *testing.T) {
	for _, tc := range []struct {
		name, line, want string
	}{
		{"unknown field", `{"type":"pong","evil":1}` + "\n", `bad message: unknown field "evil"`},
		{"duplicate field", `{"type":"decision","id":"a","hash":"h","approve":false,"approve":true}` + "\n", `bad message: duplicate field "approve"`},
		{"trailing data", `{"type":"pong"} {"type":"decision"}` + "\n", "bad message: data after the message"},
		{"no type", `{}` + "\n", "bad message: no type"},
		{"not an object", `[]` + "\n", "bad message: json: cannot unmarshal array into Go value of type remote.Message"},
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

// TestReadMessageExactNames: a key must be exactly a field's name, at
// every level, or Go's decoder would take "Approve" for "approve" while a
// person, a log reader or another decoder reads the line otherwise.
func TestReadMessageExactNames(t *testing.T) {
	for _, tc := range []struct{ line, want string }{
		{`{"type":"decision","id":"a","hash":"h","approve":false,"Approve":true}`, `bad message: unknown field "Approve"`},
		{`{"type":"decision","id":"a","hash":"h","APPROVE":true}`, `bad message: unknown field "APPROVE"`},
		{`{"type":"decision","id":"a","haſh":"h","approve":true}`, `bad message: unknown field "haſh"`},
		{`{"type":"decision","ıd":"a","hash":"h","approve":true}`, `bad message: unknown field "ıd"`},
		{`{"Type":"pong"}`, `bad message: unknown field "Type"`},
		{`{"type":"hello","version":1,"agent_socKet":"/a"}`, "bad message: unknown field \"agent_soc\u212aet\""},
		{`{"type":"prompt","request":{"id":"x","Host":"h"}}`, `bad message: unknown field "Host" in request`},
		{`{"type":"prompt","request":{"requester":{"uıd":0}}}`, `bad message: unknown field "uıd" in request.requester`},
		{`{"type":"prompt","request":{"stages":[{"argv":["a"],"Path":"/a"}]}}`, `bad message: unknown field "Path" in request.stages[0]`},
		{`{"type":"decision","id":"\ud800","hash":"h","approve":true}`, `bad message: id contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		{`{"type":"prompt","request":{"stages":[{"argv":["a","\udfff"]}]}}`, `bad message: request.stages[0].argv[1] contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
	} {
		m, err := readOne(tc.line+"\n", 4096)
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %+v, %v; want error %q", tc.line, m, err, tc.want)
		}
	}
	// Escapes that spell a field name exactly are that name.
	m, err := readOne(`{"type":"decision","id":"a","hash":"h","\u0061pprove":true}`+"\n", 4096)
	if err != nil || m.Approve == nil || !*m.Approve {
		t.Errorf("escaped exact name: %+v, %v", m, err)
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
		`{"type":"decision","id":"x","hash":"00","approve":false,"Approve":true}`,
		`{"type":"decision","id":"x","haſh":"00","APPROVE":true}`,
		`{"type":"decision","ıd":"x","hash":"00","approve":true}`,
		`{"type":"hello","version":1,"name":"pts/3","agent_socKet":"/a","capabilities":["forward-agent"]}`,
		`{"type":"prompt","id":"x","hash":"00","request":{"Host":"h","requester":{"uid":0},"stages":[{"argv":["\ud800"]}]}}`,
		`{"type":"decision","id":"\ud83d\ude00","hash":"00","approve":true}`,
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
		// What was read is what is written, key for key: a key of the
		// input that is not exactly a field's name would be missing
		// from the output (where it holds more than a zero value).
		sameKeys(t, first, b1.Bytes())
		if !bytes.ContainsRune(first, utf8.RuneError) && !bytes.Contains(bytes.ToLower(first), []byte(`\ufffd`)) &&
			bytes.ContainsRune(b1.Bytes(), utf8.RuneError) {
			t.Fatalf("accepted %q, which reads as U+FFFD: %s", first, b1.Bytes())
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

// sameKeys fails when an object key of in (at the top level, and in a
// prompt's request) with a non-zero value is not a key of out.
func sameKeys(t *testing.T, in, out []byte) {
	t.Helper()
	var a, b map[string]json.RawMessage
	if json.Unmarshal(in, &a) != nil || json.Unmarshal(out, &b) != nil {
		t.Fatalf("not objects: %s / %s", in, out)
	}
	for k, v := range a {
		if _, ok := b[k]; ok || zeroJSON(v) {
			continue
		}
		t.Fatalf("key %q of %s is not in what was read back: %s", k, in, out)
	}
	if ra, ok := a["request"]; ok && !zeroJSON(ra) {
		sameKeys(t, ra, b["request"])
	}
}

func zeroJSON(v json.RawMessage) bool {
	var x any
	if json.Unmarshal(v, &x) != nil {
		return false
	}
	switch x := x.(type) {
	case nil:
		return true
	case bool:
		return !x
	case float64:
		return x == 0
	case string:
		return x == ""
	case []any:
		return len(x) == 0
	case map[string]any:
		return len(x) == 0
	}
	return false
}

// TestReadMessageEveryFieldExact: every message field, and every field of
// a prompt's request, including any added later, is refused under other
// cases and Unicode folds of its name.
func TestReadMessageEveryFieldExact(t *testing.T) {
	check := func(typ reflect.Type, wrap func(key string) string) {
		for f := range typ.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			for _, alike := range []string{strings.ToUpper(name), strings.ToUpper(name[:1]) + name[1:],
				strings.Replace(name, "s", "ſ", 1), strings.Replace(name, "k", "\u212a", 1)} {
				if alike == name {
					continue
				}
				line := wrap(strconv.Quote(alike) + `:1`)
				if _, err := readOne(line+"\n", 4096); err == nil || !strings.HasPrefix(err.Error(), "bad message: unknown field "+strconv.Quote(alike)) {
					t.Errorf("%s: %v", line, err)
				}
			}
		}
	}
	check(reflect.TypeFor[Message](), func(k string) string { return `{"type":"pong",` + k + `}` })
	check(reflect.TypeFor[approval.Prompt](), func(k string) string { return `{"type":"prompt","request":{` + k + `}}` })
	check(reflect.TypeFor[approval.Stage](), func(k string) string { return `{"type":"prompt","request":{"stages":[{` + k + `}]}}` })
	check(reflect.TypeFor[approval.Requester](), func(k string) string { return `{"type":"prompt","request":{"requester":{` + k + `}}}` })
}

func TestPromptLineBound(t *testing.T) {
	// The worst a 1 MiB request line can do: an argument of U+2028 (3
	// bytes each, written back as the 6 of \u2028), 16 stages whose
	// resolved paths are PATH_MAX bytes of invalid UTF-8 (6 bytes each as
	// \ufffd), and '<' that must not become \u003c.
	bad := strings.Repeat("\xff", 4096)
	p := &approval.Prompt{ID: "big", Requester: approval.Requester{Exe: bad}}
	for i := range 16 {
		arg := "<"
		if i == 0 {
			arg = strings.Repeat("\u2028", (1<<20)/3)
		}
		p.Stages = append(p.Stages, approval.Stage{Argv: []string{"cat", arg}, Path: bad, Target: bad})
	}
	line, err := PromptLine(p, time.Now(), "")
	if err != nil || len(line) > MaxDaemonLine {
		t.Fatalf("a prompt for a 1 MiB request: %d bytes, %v; want at most %d", len(line), err, MaxDaemonLine)
	}
	if _, err := ReadMessage(bufio.NewReader(bytes.NewReader(line)), MaxDaemonLine); err != nil {
		t.Fatalf("the client cannot read the prompt back: %v", err)
	}

	p = &approval.Prompt{Stages: []approval.Stage{{Argv: []string{"echo", strings.Repeat("<", 3<<20)}}}}
	if line, err := PromptLine(p, time.Now(), ""); err != nil || !bytes.Contains(line, []byte(`"<<<`)) {
		t.Fatalf("'<' is escaped or refused: %.40q, %v", line, err)
	}
	p.Stages[0].Argv[1] += strings.Repeat("<", 1<<20)
	if _, err := PromptLine(p, time.Now(), ""); err == nil || !strings.HasPrefix(err.Error(), "the request is too large to show to an approver: its prompt would be ") {
		t.Fatalf("an over-long prompt: %v, want it refused", err)
	}
}

// TestRefusedErrorEscapes: a refusal read from a socket (which need not
// be rootgated's) reaches the operator's terminal without its control
// sequences.
func TestRefusedErrorEscapes(t *testing.T) {
	msg := (&RefusedError{Message: "no\x1b]0;owned\x07 \x1b[2Jway"}).Error()
	if strings.ContainsAny(msg, "\x1b\x07") || !strings.HasPrefix(msg, "rootgated refused this approver: no") {
		t.Fatalf("refusal shown as %q", msg)
	}
}
