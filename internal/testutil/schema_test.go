package testutil

import "testing"

func TestDescribes(t *testing.T) {
	for _, c := range []struct {
		desc, k string
		v       any
		want    bool
	}{
		{"At most 16 stages.", "maxItems", 16.0, true},
		{"At most 160 stages.", "maxItems", 16.0, false},
		{"up to 4096 bytes", "maxLength", 4096.0, true},
		{"a list of words", "minItems", 1.0, false},
		{"at least one word", "minItems", 1.0, true},
		{"default 25.", "default", 25.0, true},
		{"default 2.5", "default", 2.0, false},
		{`"local" (the default)`, "default", "local", true},
		{"localhost (the default)", "default", "local", false},
		{"true (the default) runs as root", "default", true, true},
		{"Default /.", "default", "/", true},
	} {
		if got := Describes(c.desc, c.k, c.v); got != c.want {
			t.Errorf("Describes(%q, %s, %v) = %v, want %v", c.desc, c.k, c.v, got, c.want)
		}
	}
}
