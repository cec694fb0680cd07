package mcpserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
)

// TestSchemasPortable lists the tools through an MCP client and holds
// every published input and output schema to what every client accepts:
// no oneOf, anyOf or allOf (the Anthropic API refuses them at the top
// level, and some clients then fail every call of the session), and one
// "type" per schema, never a list such as ["null", "integer"].
func TestSchemasPortable(t *testing.T) {
	cs := connect(t, mcpserver.Config{Socket: noDaemon(t), Hosts: map[string]string{"web1": "/x"}})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) < 5 {
		t.Fatalf("%d tools", len(res.Tools))
	}
	for _, tool := range res.Tools {
		for kind, schema := range map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			if schema == nil {
				t.Errorf("%s has no %s schema", tool.Name, kind)
				continue
			}
			b, err := json.Marshal(schema)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			if v["type"] != "object" {
				t.Errorf("%s %s schema: type %v, want object", tool.Name, kind, v["type"])
			}
			checkPortable(t, fmt.Sprintf("%s %s schema", tool.Name, kind), v)
		}
	}
}

// checkPortable checks schema s at path and every schema below it.
func checkPortable(t *testing.T, path string, s map[string]any) {
	t.Helper()
	for _, k := range []string{"oneOf", "anyOf", "allOf"} {
		if _, ok := s[k]; ok {
			t.Errorf("%s has %s", path, k)
		}
	}
	switch ty := s["type"].(type) {
	case string:
		if ty == "null" {
			t.Errorf("%s: type null", path)
		}
	default:
		t.Errorf("%s: type %v, want one type name", path, s["type"])
	}
	props, _ := s["properties"].(map[string]any)
	for name, p := range props {
		ps, ok := p.(map[string]any)
		if !ok {
			t.Errorf("%s.%s is not a schema", path, name)
			continue
		}
		checkPortable(t, path+"."+name, ps)
	}
	if items, ok := s["items"].(map[string]any); ok {
		checkPortable(t, path+"[]", items)
	}
	if ap, ok := s["additionalProperties"].(map[string]any); ok && len(ap) > 0 && ap["not"] == nil {
		checkPortable(t, path+"{}", ap)
	}
}
