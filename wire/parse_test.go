package wire

import (
	"errors"
	"reflect"
	"regexp"
	"strconv"
	"testing"
	"time"
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
