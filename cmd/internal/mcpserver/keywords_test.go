package mcpserver_test

import (
	"context"
	"encoding/json"
	"sort"
	"testing"

	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
	"github.com/rootgate/rootgate/internal/testutil"
)

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
	for _, k := range testutil.SchemaLimitKeywords {
		v, ok := s[k]
		if !ok {
			continue
		}
		n++
		if !testutil.Describes(desc, k, v) {
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
