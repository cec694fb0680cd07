package mcpserver

import (
	"encoding/json"
	"testing"
)

func TestWithoutIgnored(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`{"argv":["id"],"wait_for_previous":true,"reason":"r"}`, `{"argv":["id"],"reason":"r"}`},
		{`{"wait_for_previous":false}`, `{}`},
		{` { "wait_for_previous" : true , "id" : "x" } `, `{"id" : "x"}`},
		{`{"id":"x",  "wait_for_previous":true}`, `{"id":"x"}`},
		{`{"wait\u005ffor_previous":true,"id":"x"}`, `{"id":"x"}`},
		// kept as sent, for the checks that follow to refuse
		{`{"wait_for_previous":"yes","id":"x"}`, `{"wait_for_previous":"yes","id":"x"}`},
		{`{"wait_for_previous":null}`, `{"wait_for_previous":null}`},
		{`{"wait_for_next":true}`, `{"wait_for_next":true}`},
		{`{"id":"x"}`, `{"id":"x"}`},
		{`{"wait_for_previous":true,"id":"x","id":"y"}`, `{"id":"x","id":"y"}`},
		{`{"wait_for_previous":true,"id":"\ud800"}`, `{"id":"\ud800"}`},
		{`{"wait_for_previous":true} {}`, `{"wait_for_previous":true} {}`},
		{`{"wait_for_previous":true`, `{"wait_for_previous":true`},
		{`[{"wait_for_previous":true}]`, `[{"wait_for_previous":true}]`},
		{`{"a":{"wait_for_previous":true}}`, `{"a":{"wait_for_previous":true}}`},
		{`not json`, `not json`},
	} {
		if got := string(withoutIgnored(json.RawMessage(c.in))); got != c.want {
			t.Errorf("withoutIgnored(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

func FuzzWithoutIgnored(f *testing.F) {
	f.Add([]byte(`{"argv":["id"],"wait_for_previous":true,"reason":"r"}`))
	f.Add([]byte(`{"wait_for_previous":false}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		out := withoutIgnored(json.RawMessage(b))
		if string(out) == string(b) {
			return
		}
		// Rewritten: valid JSON in, an object without the ignored names out.
		var in, got map[string]json.RawMessage
		if json.Unmarshal(b, &in) != nil {
			t.Fatalf("rewrote invalid JSON %q to %q", b, out)
		}
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("%q became %q: %v", b, out, err)
		}
		for _, n := range IgnoredArguments {
			if _, ok := got[n]; ok {
				t.Fatalf("%q became %q, still with %s", b, out, n)
			}
		}
		for k := range got {
			if string(got[k]) != string(in[k]) {
				t.Fatalf("%q became %q: %s changed", b, out, k)
			}
		}
	})
}
