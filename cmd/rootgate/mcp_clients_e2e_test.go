package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clientRecording is how one MCP client treats rootgate's tools, kept in
// testdata/mcpclients: how it rewrites every tool's input schema before
// its model sees it, and calls its model made with the schema so
// rewritten ("$ID" stands for the id of the last execute call).
type clientRecording struct {
	Client        string `json:"client"`
	How           string `json:"how"`
	SchemaRewrite struct {
		DropKeywords  []string                   `json:"drop_keywords"`
		AddProperties map[string]json.RawMessage `json:"add_properties"`
	} `json:"schema_rewrite"`
	Calls []struct {
		Tool      string         `json:"tool"`
		Arguments map[string]any `json:"arguments"`
	} `json:"calls"`
}

// rewrite returns tool's input schema as rec's client shows it to its
// model.
func (rec *clientRecording) rewrite(t *testing.T, tool *mcp.Tool) map[string]any {
	t.Helper()
	var s map[string]any
	remarshalJSON(t, tool.InputSchema, &s)
	var drop func(map[string]any)
	drop = func(m map[string]any) {
		for _, k := range rec.SchemaRewrite.DropKeywords {
			delete(m, k)
		}
		if props, ok := m["properties"].(map[string]any); ok {
			for _, p := range props {
				if pm, ok := p.(map[string]any); ok {
					drop(pm)
				}
			}
		}
		if items, ok := m["items"].(map[string]any); ok {
			drop(items)
		}
	}
	drop(s)
	props, _ := s["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		s["properties"] = props
	}
	for name, raw := range rec.SchemaRewrite.AddProperties {
		var p any
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		props[name] = p
	}
	return s
}

func remarshalJSON(t *testing.T, from, to any) {
	t.Helper()
	b, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		t.Fatal(err)
	}
}

// TestMCPClientsAsRecorded replays each recorded client against the real
// `rootgate mcp` (over stdio, with the SDK's client) and a real rootgated:
// every call the client's model made from the schemas as the client
// rewrote them is valid against those schemas, and rootgate answers it as
// a success, never with "invalid arguments". An argument no client is
// known to add stays refused.
func TestMCPClientsAsRecorded(t *testing.T) {
	files, err := filepath.Glob("testdata/mcpclients/*.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("recordings: %v %v", files, err)
	}
	e := startMCPEnv(t)
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var rec clientRecording
			dec := json.NewDecoder(strings.NewReader(string(b)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&rec); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			c := e.startMCP(t, 0)
			lastID := ""
			for i, call := range rec.Calls {
				tool := c.tools[call.Tool]
				if tool == nil {
					t.Fatalf("call %d: no tool %q", i, call.Tool)
				}
				args := map[string]any{}
				for k, v := range call.Arguments {
					if v == "$ID" {
						if lastID == "" {
							t.Fatalf("call %d: $ID before any execute", i)
						}
						v = lastID
					}
					args[k] = v
				}
				// The client lets the call through: it is valid against
				// the schema as the client rewrote it.
				var rs jsonschema.Schema
				remarshalJSON(t, rec.rewrite(t, tool), &rs)
				resolved, err := rs.Resolve(nil)
				if err != nil {
					t.Fatal(err)
				}
				var generic any
				remarshalJSON(t, args, &generic)
				if err := resolved.Validate(generic); err != nil {
					t.Fatalf("call %d (%s): the recording is not valid against the client's schema: %v", i, call.Tool, err)
				}
				res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: call.Tool, Arguments: args})
				if err != nil {
					t.Fatalf("call %d (%s): %v", i, call.Tool, err)
				}
				text := res.Content[0].(*mcp.TextContent).Text
				if res.IsError || strings.Contains(text, "invalid arguments") {
					t.Fatalf("call %d (%s %v) refused:\n%s", i, call.Tool, args, text)
				}
				var st struct {
					ID      string `json:"id"`
					Status  string `json:"status"`
					Daemons []struct {
						Reachable bool `json:"reachable"`
					} `json:"daemons"`
				}
				remarshalJSON(t, res.StructuredContent, &st)
				switch call.Tool {
				case "execute", "wait", "cancel", "check":
					if st.Status != "ok" {
						t.Fatalf("call %d (%s): status %q:\n%s", i, call.Tool, st.Status, text)
					}
				case "ping":
					if len(st.Daemons) != 1 || !st.Daemons[0].Reachable {
						t.Fatalf("call %d (ping): %s", i, text)
					}
				}
				if call.Tool == "execute" {
					lastID = st.ID
				}
			}
		})
	}

	t.Run("unknown arguments still refused", func(t *testing.T) {
		c := e.startMCP(t, 0)
		for _, call := range []struct {
			tool string
			args map[string]any
		}{
			{"ping", map[string]any{"wait_for_next": true}},
			{"execute", map[string]any{"argv": []string{"id"}, "reason": "r", "wait_for_previus": true}},
			{"execute", map[string]any{"argv": []string{"id"}, "reason": "r", "wait_for_previous": "yes"}},
			{"check", map[string]any{"argv": []string{"id"}, "wait_for_previous": nil}},
			{"wait", map[string]any{"id": "x", "wait_for_previous": 1}},
		} {
			res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: call.tool, Arguments: call.args})
			if err != nil {
				t.Fatal(err)
			}
			text := res.Content[0].(*mcp.TextContent).Text
			if !strings.Contains(text, "invalid arguments") || !strings.Contains(text, "additional properties") ||
				!slices.ContainsFunc(keysOf(call.args), func(k string) bool { return strings.Contains(text, k) }) {
				t.Errorf("%s %v: not refused as an unknown argument:\n%s", call.tool, call.args, text)
			}
		}
	})
}

func keysOf(m map[string]any) []string {
	var ks []string
	for k := range m {
		if strings.HasPrefix(k, "wait_for") {
			ks = append(ks, k)
		}
	}
	return ks
}
