package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"runtime/metrics"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// TestCheckTimeExtremes: freshness holds for every time RFC 3339 can
// write, however far off (a Duration between them would overflow), with
// the protocol's texts only; and the bound itself is inside.
func TestCheckTimeExtremes(t *testing.T) {
	now := time.Date(2026, 2, 13, 14, 30, 0, 0, time.UTC)
	skew := time.Minute
	tooOldRe := regexp.MustCompile(`^request too old: ([0-9]+)s \(max 60s\)$`)
	aheadRe := regexp.MustCompile(`^request time is in the future: ([0-9]+)s ahead \(max 60s\)$`)
	for _, tc := range []struct {
		time string
		want string // "", or the exact text, or "old"/"new" for a text checked against secs
		secs int64
	}{
		{"0001-01-01T00:00:00Z", "old", now.Unix() - time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()},
		{"0000-01-01T00:00:00+23:59", "old", now.Unix() - time.Date(-1, 12, 31, 0, 1, 0, 0, time.UTC).Unix()},
		{"9999-12-31T23:59:59.999999999Z", "new", time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC).Unix() - now.Unix() + 1},
		{"9999-12-31T23:59:59-23:59", "new", time.Date(10000, 1, 1, 23, 58, 59, 0, time.UTC).Unix() - now.Unix()},
		{"2318-02-13T14:30:00Z", "new", time.Date(2318, 2, 13, 14, 30, 0, 0, time.UTC).Unix() - now.Unix()}, // about 292 years ahead
		{"1734-02-13T14:30:00Z", "old", now.Unix() - time.Date(1734, 2, 13, 14, 30, 0, 0, time.UTC).Unix()},
		// The bound is inside; a nanosecond past it is outside.
		{"2026-02-13T14:29:00Z", "", 0},
		{"2026-02-13T14:31:00Z", "", 0},
		{"2026-02-13T14:28:59.999999999Z", "request too old: 61s (max 60s)", 0},
		{"2026-02-13T14:31:00.000000001Z", "request time is in the future: 61s ahead (max 60s)", 0},
		{"2026-02-13t14:31:00z", "", 0},
		{"2026-02-13T14:30:60Z", "", 0}, // a leap second: 14:31:00
		// Not RFC 3339, though time.Parse takes them.
		{"2026-02-13T14:30:00,5Z", `field "time" must be an RFC 3339 date-time with a zone, got "2026-02-13T14:30:00,5Z"`, 0},
		{"2026-02-13T4:30:00+10:00", `field "time" must be an RFC 3339 date-time with a zone, got "2026-02-13T4:30:00+10:00"`, 0},
		{"2026-02-13T14:30:00+24:00", `field "time" must be an RFC 3339 date-time with a zone, got "2026-02-13T14:30:00+24:00"`, 0},
		{"2026-02-13T14:30:00.Z", `field "time" must be an RFC 3339 date-time with a zone, got "2026-02-13T14:30:00.Z"`, 0},
		{"2026-02-30T14:30:00Z", `field "time" must be an RFC 3339 date-time with a zone, got "2026-02-30T14:30:00Z"`, 0},
		{"2026-02-13 14:30:00Z", `field "time" must be an RFC 3339 date-time with a zone, got "2026-02-13 14:30:00Z"`, 0},
		{"+2026-02-13T14:30:00Z", `field "time" must be an RFC 3339 date-time with a zone, got "+2026-02-13T14:30:00Z"`, 0},
	} {
		r := &Request{TimeText: tc.time}
		err := r.CheckTime(now, skew)
		got := ""
		if err != nil {
			got = err.Error()
		}
		switch tc.want {
		case "old", "new":
			re := tooOldRe
			if tc.want == "new" {
				re = aheadRe
			}
			m := re.FindStringSubmatch(got)
			if m == nil || m[1] != strconv.FormatInt(tc.secs, 10) {
				t.Errorf("CheckTime(%q) = %q, want the %s text with %ds", tc.time, got, tc.want, tc.secs)
			}
		default:
			if got != tc.want {
				t.Errorf("CheckTime(%q) = %q, want %q", tc.time, got, tc.want)
			}
		}
	}
}

// TestDecodeExactNames: a request key must be exactly a field's name and
// no string may hold an escaped lone surrogate, which Go's decoder would
// silently make U+FFFD.
func TestDecodeExactNames(t *testing.T) {
	base := `{"time":"` + exampleTime + `","pipeline":[["echo","x"]]`
	for _, tc := range []struct{ extra, want string }{
		{`,"privilegeD":false`, `unknown field "privilegeD"`},
		{`,"Privileged":false`, `unknown field "Privileged"`},
		{`,"ıd":"a"`, `unknown field "ıd"`},
		{`,"forward_agent":false,"forward_agent":false`, `duplicate field "forward_agent"`},
		{`,"env":{"LANG":"C","LANG":"C"}`, `duplicate env key "LANG"`},
		{`,"reason":"\ud800"`, `reason contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		{`,"reason":"a\udc00b"`, `reason contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		{`,"reason":"\ud800\u0041"`, `reason contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		{`,"env":{"LANG":"\udbff"}`, `env["LANG"] contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		{`,"env":{"\ud800":"C"}`, `a key in env contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
		{`,"\ud800":1`, `a field name contains an escaped lone surrogate (\ud800-\udfff without its pair)`},
	} {
		_, err := Decode([]byte(base + tc.extra + "}"))
		if err == nil || err.Error() != tc.want {
			t.Errorf("%s: got %v, want %q", tc.extra, err, tc.want)
		}
	}
	_, err := Decode([]byte(`{"time":"x","pipeline":[["echo","\ud800"]]}`))
	if err == nil || err.Error() != `pipeline[0][1] contains an escaped lone surrogate (\ud800-\udfff without its pair)` {
		t.Errorf("lone surrogate in argv: %v", err)
	}
	// A surrogate pair is a character; an escaped backslash before "u" is
	// no escape.
	r, err := Decode([]byte(`{"time":"x","pipeline":[["echo","\ud83d\ude00","\\ud800"]]}`))
	if err != nil || r.Pipeline[0][1] != "😀" || r.Pipeline[0][2] != `\ud800` {
		t.Errorf("pair and escaped backslash: %+v, %v", r, err)
	}
}

// TestCheckKeysShape: ShapeOf takes names from json tags, exactly, at
// every level, and CheckKeys names where the key is.
func TestCheckKeysShape(t *testing.T) {
	type inner struct {
		Name string `json:"name"`
	}
	type outer struct {
		Approve *bool             `json:"approve,omitempty"`
		Items   []inner           `json:"items"`
		Env     map[string]string `json:"env"`
		When    time.Time         `json:"when"`
		Skip    string            `json:"-"`
		Plain   int
	}
	s := ShapeOf(reflect.TypeFor[outer]())
	for _, tc := range []struct{ in, want string }{
		{`{"approve":true,"items":[{"name":"a"}],"env":{"A":"b"},"when":"x","Plain":1}`, ""},
		{`{"approve":false,"Approve":true}`, `unknown field "Approve"`},
		{`{"APPROVE":true}`, `unknown field "APPROVE"`},
		{`{"Skip":"x"}`, `unknown field "Skip"`},
		{`{"-":"x"}`, `unknown field "-"`},
		{`{"plain":1}`, `unknown field "plain"`},
		{`{"items":[{"name":"a"},{"nam\u212a":"b"}]}`, "unknown field \"nam\u212a\" in items[1]"},
		{`{"items":[{"name":"a","name":"b"}]}`, `duplicate field "name" in items[0]`},
		{`{"env":{"A":"b","A":"c"}}`, `duplicate field "A" in env`},
		{`{"when":{"x":1,"x":2}}`, ""}, // a type error, left to the decoder
		{`{"approve":tru`, ""},         // not JSON, left to the decoder
	} {
		err := CheckKeys([]byte(tc.in), s)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("CheckKeys(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
	var ke *KeyError
	if err := CheckKeys([]byte(`{"haſh":1}`), s); !errors.As(err, &ke) || ke.Key != "haſh" || ke.Repeated {
		t.Errorf("haſh: %v", err)
	}
}

// rfc3339Grammar is RFC 3339's date-time written as a regular expression,
// an oracle for FuzzParseTime independent of ParseTime's code.
var rfc3339Grammar = regexp.MustCompile(`^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[Tt]([01][0-9]|2[0-3]):[0-5][0-9]:([0-5][0-9]|60)(\.[0-9]+)?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$`)

// FuzzParseTime: ParseTime accepts exactly what RFC 3339's grammar
// allows (for days that exist), and then means the instant time.Parse
// reads from the same text in its upper-case form.
func FuzzParseTime(f *testing.F) {
	for _, s := range []string{
		exampleTime, "0001-01-01T00:00:00Z", "0000-01-01T00:00:00+23:59", "9999-12-31T23:59:59.999999999-23:59",
		"2026-02-13t14:30:00.5z", "2026-02-13T14:30:00,5Z", "2026-02-13T4:30:00Z", "2026-02-13T14:30:00+24:00",
		"2026-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "2026-02-13T14:30:60Z", "2026-02-13T14:30:00.1234567891Z",
		"2318-02-13T14:30:00Z", "2026-02-13T14:30:00.Z", "2026-02-13 14:30:00Z",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := ParseTime(s)
		grammar := rfc3339Grammar.MatchString(s)
		if err == nil && !grammar {
			t.Fatalf("accepted %q, which is not RFC 3339", s)
		}
		if !grammar {
			return
		}
		// The grammar allows day 31 in any month; a real day must exist.
		y, _ := strconv.Atoi(s[0:4])
		mo, _ := strconv.Atoi(s[5:7])
		d, _ := strconv.Atoi(s[8:10])
		exists := d <= time.Date(y, time.Month(mo)+1, 0, 0, 0, 0, 0, time.UTC).Day()
		if (err == nil) != exists {
			t.Fatalf("ParseTime(%q): %v, but the day exists: %v", s, err, exists)
		}
		if err != nil || s[17:19] == "60" {
			return
		}
		want, perr := time.Parse(time.RFC3339Nano, strings.ToUpper(s))
		if perr != nil {
			return // time.Parse has its own limits (e.g. on offsets)
		}
		if !got.Equal(want) {
			t.Fatalf("ParseTime(%q) = %v, time.Parse says %v", s, got, want)
		}
	})
}

// checkShape is a message-like shape for FuzzCheckKeys.
var checkShape = &Shape{Fields: map[string]*Shape{
	"approve": {}, "hash": {}, "id": {},
	"env":    {Map: true, Elem: &Shape{}},
	"stages": {Elem: &Shape{Fields: map[string]*Shape{"argv": {Elem: &Shape{}}}}},
}}

// FuzzCheckKeys: what CheckKeys lets through has, at every level the
// shape names fields, only keys that are exactly those names, each once,
// and no string that a decoder reads as U+FFFD unless it was sent as such.
func FuzzCheckKeys(f *testing.F) {
	for _, s := range []string{
		`{"approve":false,"Approve":true}`, `{"APPROVE":true}`, `{"haſh":"x"}`, `{"ıd":"x"}`, `{"id":"x","id":"y"}`,
		`{"stages":[{"argv":["a","\ud800"]},{"ARGV":[]}]}`, `{"env":{"\u212a":"\udc00"}}`, `{"hash":"\ud83d\ude00"}`,
		`{"stages":[{"argv":["a"],"argv":["b"]}]}`, `{"env":{"A":"1","A":"2"}}`, `{"id":"\\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	for _, s := range deepSeeds() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var err error
		checkPeak(t, b, func() { err = CheckKeys(b, checkShape) })
		if err != nil || !json.Valid(b) {
			return
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			return
		}
		raw := !bytes.ContainsRune(b, utf8.RuneError) && !bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`))
		var walk func(v any, s *Shape)
		walk = func(v any, s *Shape) {
			switch v := v.(type) {
			case string:
				if raw && strings.ContainsRune(v, utf8.RuneError) {
					t.Fatalf("let through %s, which decodes to U+FFFD", b)
				}
			case []any:
				for _, e := range v {
					if s != nil && !s.Map {
						walk(e, s.Elem)
					} else {
						walk(e, nil)
					}
				}
			case map[string]any:
				for k, e := range v {
					if raw && strings.ContainsRune(k, utf8.RuneError) {
						t.Fatalf("let through %s, a key of which decodes to U+FFFD", b)
					}
					switch {
					case s != nil && s.Fields != nil:
						sub, ok := s.Fields[k]
						if !ok {
							t.Fatalf("let through key %q of %s", k, b)
						}
						walk(e, sub)
					case s != nil && s.Map:
						walk(e, s.Elem)
					default:
						walk(e, nil)
					}
				}
			}
		}
		walk(v, checkShape)
		// No key given twice at the top, where the shape has fields: the
		// decoder keeps one of each, so the counts differ when one was.
		if m, ok := v.(map[string]any); ok && countTopKeys(t, b) != len(m) {
			t.Fatalf("let through a repeated key: %s", b)
		}
	})
}

// countTopKeys counts the keys of b's top-level object as written.
func countTopKeys(t *testing.T, b []byte) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		t.Fatal(err)
	}
	n := 0
	for dec.More() {
		if _, err := dec.Token(); err != nil {
			t.Fatal(err)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// lookAlikes are spellings of name that Go's JSON decoder would take for
// it: other cases, and the Unicode folds it knows (ſ for s, the Kelvin
// sign for k), plus a dotless ı for i.
func lookAlikes(name string) []string {
	out := []string{strings.ToUpper(name), strings.ToUpper(name[:1]) + name[1:], name[:len(name)-1] + strings.ToUpper(name[len(name)-1:])}
	for _, r := range []struct{ from, to string }{{"s", "ſ"}, {"k", "\u212a"}, {"i", "ı"}} {
		if strings.Contains(name, r.from) {
			out = append(out, strings.Replace(name, r.from, r.to, 1))
		}
	}
	return out
}

// TestDecodeEveryFieldExact: every request field, including any added to
// the fields table later, is refused under each look-alike name.
func TestDecodeEveryFieldExact(t *testing.T) {
	for name := range fields {
		for _, alike := range lookAlikes(name) {
			if alike == name {
				continue
			}
			line := `{"time":"` + exampleTime + `","pipeline":[["a"]],` + strconv.Quote(alike) + `:true}`
			if _, err := Decode([]byte(line)); err == nil || err.Error() != "unknown field "+strconv.Quote(alike) {
				t.Errorf("%s: got %v, want unknown field", line, err)
			}
		}
	}
}

// TestDecodeNotObjectFirst: a line that is no object is refused as such,
// whatever its strings hold.
func TestDecodeNotObjectFirst(t *testing.T) {
	for _, line := range []string{`"\ud800"`, ` ["\ud800"]`} {
		if _, err := Decode([]byte(line)); err == nil || err.Error() != "invalid JSON: request must be a JSON object" {
			t.Errorf("%s: %v", line, err)
		}
	}
}

// deepSeeds are fuzz seeds nested as deep as a 64 KiB line can be, for
// the cost of depth.
func deepSeeds() []string {
	const n = 64 << 10
	prefix := `{"time":"2026-02-13T14:30:00Z","pipeline":`
	return []string{
		prefix + strings.Repeat("[", n),
		prefix + strings.Repeat(`{"a":`, n/5),
		strings.Repeat("[", n) + strings.Repeat("]", n),
		`{"stages":` + strings.Repeat(`[{"argv":`, n/9),
	}
}

// allocated is how many bytes the program has allocated so far.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// allocs is what f allocates: the least of two calls, since the runtime
// counts by whole spans, and another goroutine (the fuzzer's) may
// allocate meanwhile.
func allocs(f func()) uint64 {
	least := ^uint64(0)
	for range 2 {
		before := allocated()
		f()
		least = min(least, allocated()-before)
	}
	return least
}

// checkPeak fails a parse of b that allocated more than a small multiple
// of b's length: what a parse allocates bounds the peak of its heap,
// which is what a hostile line must not blow up (checking the heap after
// the parse would miss what it held while parsing). The slack is for
// the runtime's accounting by whole spans. A 1 MiB request line of
// the costliest shape (a flat pipeline of 262,000 arguments) allocates
// 24 times its length; the recursive key scanner allocated over 200
// times for a nested one.
//
// It runs parse, and measures it only for inputs of 1 KiB or more: below,
// the slack is more than any shape could take, and measuring twice would
// make the fuzzing of small inputs three times slower.
func checkPeak(t *testing.T, b []byte, parse func()) {
	t.Helper()
	if len(b) < 1<<10 {
		parse()
		return
	}
	if alloc, limit := allocs(parse), 64*uint64(len(b))+512<<10; alloc > limit {
		t.Fatalf("parsing %d bytes (%.40q…) allocated %d bytes; the bound is %d", len(b), b, alloc, limit)
	}
}
