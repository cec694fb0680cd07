package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
)

// strippedKeywords are the schema keywords that some clients drop before
// their model sees a tool (Codex CLI drops default, minLength, maxLength,
// minimum, maximum, exclusiveMinimum and maxItems): the value of each
// must also be in the words of the description the model keeps.
var strippedKeywords = []string{"default", "minLength", "maxLength", "minimum", "maximum",
	"exclusiveMinimum", "exclusiveMaximum", "minItems", "maxItems", "minProperties", "maxProperties", "pattern"}

// TestSchemaLimitsDescribed lists the tools through an MCP client and
// walks every input schema: each default and limit a schema states must
// appear in the description of that property (or, for a schema without
// one, such as a pipeline stage, the nearest description above it), so a
// client that strips those keywords loses nothing.
func TestSchemaLimitsDescribed(t *testing.T) {
	cs := connect(t, mcpserver.Config{Socket: noDaemon(t), Hosts: map[string]string{"web1": "/x"}})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, tool := range res.Tools {
		b, err := json.Marshal(tool.InputSchema)
		if err != nil {
			t.Fatal(err)
		}
		var s map[string]any
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		checked += checkDescribed(t, tool.Name, tool.Description, s)
	}
	if checked < 10 { // execute alone states more than that
		t.Errorf("only %d keywords checked: is the walk broken?", checked)
	}
}

// checkDescribed checks schema s at path and every schema below it;
// desc is the nearest description above s. It returns how many keywords
// it checked.
func checkDescribed(t *testing.T, path, desc string, s map[string]any) int {
	t.Helper()
	if d, ok := s["description"].(string); ok && d != "" {
		desc = d
	}
	n := 0
	for _, k := range strippedKeywords {
		v, ok := s[k]
		if !ok {
			continue
		}
		n++
		if !describes(desc, k, v) {
			t.Errorf("%s: %s %v is not in its description %q", path, k, v, desc)
		}
	}
	var names []string
	props, _ := s["properties"].(map[string]any)
	for name := range props {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if ps, ok := props[name].(map[string]any); ok {
			n += checkDescribed(t, path+"."+name, desc, ps)
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		n += checkDescribed(t, path+"[]", desc, items)
	}
	return n
}

// describes reports whether desc states keyword k's value v: a number as
// a number of its own (1 also as "at least one" or "not empty"), a
// string or boolean as a word of its own.
func describes(desc, k string, v any) bool {
	var word string
	switch v := v.(type) {
	case float64:
		if v == 1 && strings.HasPrefix(k, "min") && (strings.Contains(desc, "at least one") || strings.Contains(desc, "not empty")) {
			return true
		}
		word = strconv.FormatFloat(v, 'f', -1, 64)
	case string:
		word = v
	case bool:
		word = strconv.FormatBool(v)
	default:
		word = fmt.Sprint(v)
	}
	return regexp.MustCompile(`(^|[^0-9A-Za-z_.])` + regexp.QuoteMeta(word) + `($|[^0-9A-Za-z_.]|\.($|[^0-9]))`).MatchString(desc)
}

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
		if got := describes(c.desc, c.k, c.v); got != c.want {
			t.Errorf("describes(%q, %s, %v) = %v, want %v", c.desc, c.k, c.v, got, c.want)
		}
	}
}
