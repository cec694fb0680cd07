package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// clientRecording is how one real MCP client treated rootgate's tools,
// captured live (testdata/mcpclients/README.md says how): how it
// rewrote every tool's input schema before its model saw it, the
// messages it sent `rootgate mcp` before its first call, and the
// tools/call requests it sent as its model called each tool ("$ID"
// stands for the id of the last execute call).
type clientRecording struct {
	Client        string            `json:"client"`
	Captured      string            `json:"captured"`
	How           string            `json:"how"`
	ModelTools    map[string]string `json:"model_tool_names"`
	SchemaRewrite struct {
		DropKeywords    []string                   `json:"drop_keywords"`
		AddProperties   map[string]json.RawMessage `json:"add_properties"`
		EmptyProperties bool                       `json:"empty_properties"`
	} `json:"schema_rewrite"`
	Handshake []json.RawMessage `json:"handshake"`
	Calls     []struct {
		Tool      string         `json:"tool"`
		Arguments map[string]any `json:"arguments"`
		Meta      map[string]any `json:"_meta"`
	} `json:"calls"`
}

// rewrite returns input schema s as rec's client shows it to its model:
// the keywords it drops removed everywhere, "properties": {} given to an
// object schema without one, its own properties added to the tool's.
func (rec *clientRecording) rewrite(t *testing.T, s map[string]any) map[string]any {
	t.Helper()
	var out map[string]any
	remarshalJSON(t, s, &out)
	var walk func(m map[string]any)
	walk = func(m map[string]any) {
		for _, k := range rec.SchemaRewrite.DropKeywords {
			delete(m, k)
		}
		if _, ok := m["properties"]; !ok && m["type"] == "object" && rec.SchemaRewrite.EmptyProperties {
			m["properties"] = map[string]any{}
		}
		if props, ok := m["properties"].(map[string]any); ok {
			for _, p := range props {
				if pm, ok := p.(map[string]any); ok {
					walk(pm)
				}
			}
		}
		for _, k := range []string{"items", "additionalProperties"} {
			if sub, ok := m[k].(map[string]any); ok {
				walk(sub)
			}
		}
	}
	walk(out)
	if len(rec.SchemaRewrite.AddProperties) == 0 {
		return out
	}
	props, _ := out["properties"].(map[string]any)
	if props == nil {
		props = map[string]any{}
		out["properties"] = props
	}
	for name, raw := range rec.SchemaRewrite.AddProperties {
		var p any
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		props[name] = p
	}
	return out
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

func readRecording(t *testing.T, path string) *clientRecording {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec clientRecording
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if rec.Client == "" || !strings.HasPrefix(rec.Captured, "captured live on ") || len(rec.Calls) == 0 {
		t.Fatalf("%s: no client, capture date or calls", path)
	}
	return &rec
}

// rawSession is `rootgate mcp` spoken to line by line, as a client's
// recorded messages were sent.
type rawSession struct {
	t     *testing.T
	stdin interface{ Write([]byte) (int, error) }
	lines chan []byte
}

func (e *mcpEnv) startRaw(t *testing.T) *rawSession {
	t.Helper()
	cmd, stdin, stdout := e.startMCPPipes(t)
	s := &rawSession{t: t, stdin: stdin, lines: make(chan []byte, 64)}
	go func() {
		defer close(s.lines)
		br := bufio.NewReaderSize(stdout, 1<<20)
		for {
			line, err := br.ReadBytes('\n')
			if len(line) > 0 {
				s.lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		stdin.Close()
		for range s.lines {
		}
		if err := cmd.Wait(); err != nil && !t.Failed() {
			t.Errorf("rootgate mcp, its client gone: %v", err)
		}
	})
	return s
}

// send writes one message; for a request, it returns the response to it
// (notifications on the way are skipped).
func (s *rawSession) send(msg []byte) (result json.RawMessage) {
	s.t.Helper()
	var m struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
	}
	if err := json.Unmarshal(msg, &m); err != nil {
		s.t.Fatal(err)
	}
	if _, err := s.stdin.Write(append(bytes.TrimSpace(msg), '\n')); err != nil {
		s.t.Fatal(err)
	}
	// A notification has no answer, nor has a subscription until it ends.
	if m.ID == nil || strings.HasPrefix(m.Method, "subscriptions/") {
		return nil
	}
	deadline := time.After(90 * time.Second) // a bound on a hang, not a timing check
	for {
		select {
		case line, ok := <-s.lines:
			if !ok {
				s.t.Fatalf("%s: rootgate mcp closed its output", m.Method)
			}
			var r struct {
				ID     json.RawMessage `json:"id"`
				Result json.RawMessage `json:"result"`
				Error  json.RawMessage `json:"error"`
			}
			if json.Unmarshal(line, &r) != nil || !bytes.Equal(r.ID, m.ID) {
				continue
			}
			if r.Error != nil {
				s.t.Fatalf("%s: error %s", m.Method, r.Error)
			}
			return r.Result
		case <-deadline:
			s.t.Fatalf("%s: no answer from rootgate mcp", m.Method)
		}
	}
}

// TestMCPClientsAsRecorded replays each client's recording against the
// real `rootgate mcp` and a real rootgated, message for message as the
// client sent them (its own handshake and protocol version, then each
// tools/call with its arguments and _meta): every call is valid against
// the schema as the client rewrote it, rootgate answers each as a
// success, never with "invalid arguments", and the approver sees the
// client's own name as the request's session. Each rewritten schema still
// states every default and limit the client dropped, in its
// description. The rewrite a recording states is held to the schemas
// captured with it (testdata/mcpclients/raw). An argument no client is
// known to add stays refused.
func TestMCPClientsAsRecorded(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/mcpclients/*.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("recordings: %v %v", files, err)
	}
	e := startMCPEnv(t)
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		t.Run(name, func(t *testing.T) {
			rec := readRecording(t, f)
			checkRawCapture(t, rec, filepath.Join("testdata/mcpclients/raw", name))

			s := e.startRaw(t)
			clientName := ""
			var tools []*mcp.Tool
			for _, msg := range rec.Handshake {
				var m struct {
					Method string `json:"method"`
					Params struct {
						ClientInfo struct {
							Name string `json:"name"`
						} `json:"clientInfo"`
						Meta struct {
							ClientInfo struct {
								Name string `json:"name"`
							} `json:"io.modelcontextprotocol/clientInfo"`
						} `json:"_meta"`
					} `json:"params"`
				}
				if err := json.Unmarshal(msg, &m); err != nil {
					t.Fatal(err)
				}
				clientName = firstNonEmpty(clientName, m.Params.ClientInfo.Name, m.Params.Meta.ClientInfo.Name)
				res := s.send(msg)
				if m.Method == "tools/list" {
					var r struct {
						Tools []*mcp.Tool `json:"tools"`
					}
					if err := json.Unmarshal(res, &r); err != nil {
						t.Fatal(err)
					}
					tools = r.Tools
				}
			}
			if len(tools) == 0 || clientName == "" {
				t.Fatalf("the handshake listed no tools (%d) or named no client (%q)", len(tools), clientName)
			}
			byName := map[string]*mcp.Tool{}
			for _, tool := range tools {
				byName[tool.Name] = tool
				checkRewriteDescribed(t, rec, tool)
			}

			lastID := ""
			var executed []string
			for i, call := range rec.Calls {
				tool := byName[call.Tool]
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
				var schema map[string]any
				remarshalJSON(t, tool.InputSchema, &schema)
				var rs jsonschema.Schema
				remarshalJSON(t, rec.rewrite(t, schema), &rs)
				resolved, err := rs.Resolve(nil)
				if err != nil {
					t.Fatal(err)
				}
				var generic any
				remarshalJSON(t, args, &generic)
				if err := resolved.Validate(generic); err != nil {
					t.Fatalf("call %d (%s): the recording is not valid against the client's schema: %v", i, call.Tool, err)
				}
				params := map[string]any{"name": call.Tool, "arguments": args}
				if call.Meta != nil {
					params["_meta"] = call.Meta
				}
				msg, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1000 + i, "method": "tools/call", "params": params})
				if err != nil {
					t.Fatal(err)
				}
				var res struct {
					Content []struct {
						Text string `json:"text"`
					} `json:"content"`
					IsError           bool `json:"isError"`
					StructuredContent struct {
						ID      string `json:"id"`
						Status  string `json:"status"`
						Daemons []struct {
							Reachable bool `json:"reachable"`
						} `json:"daemons"`
					} `json:"structuredContent"`
				}
				if err := json.Unmarshal(s.send(msg), &res); err != nil {
					t.Fatal(err)
				}
				text := ""
				if len(res.Content) > 0 {
					text = res.Content[0].Text
				}
				if res.IsError || strings.Contains(text, "invalid arguments") {
					t.Fatalf("call %d (%s %v) refused:\n%s", i, call.Tool, args, text)
				}
				st := res.StructuredContent
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
					executed = append(executed, st.ID)
				}
			}
			checkSessions(t, e, executed, "mcp: "+clientName)
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

// firstNonEmpty returns the first of its arguments that is not empty.
func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// checkRawCapture holds rec's rewrite to what was captured with it: the
// tools as rootgate served them then, rewritten by rec's rule, are
// exactly the tools the client showed its model, under the names rec
// gives.
func checkRawCapture(t *testing.T, rec *clientRecording, dir string) {
	t.Helper()
	var served []struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		InputSchema map[string]any `json:"inputSchema"`
	}
	var model []struct {
		Name        string         `json:"name"`
		Description string         `json:"description"`
		InputSchema map[string]any `json:"input_schema"`
	}
	for file, into := range map[string]any{"served-tools.json": &served, "model-tools.json": &model} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, into); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
	}
	if len(served) != len(model) || len(served) != len(rec.ModelTools) {
		t.Fatalf("%d tools served, %d shown to the model, %d named in the recording", len(served), len(model), len(rec.ModelTools))
	}
	seen := map[string]int{}
	for i, m := range model {
		seen[m.Name] = i
	}
	for _, s := range served {
		i, ok := seen[rec.ModelTools[s.Name]]
		if !ok {
			t.Errorf("%s: the model saw no tool named %q", s.Name, rec.ModelTools[s.Name])
			continue
		}
		if model[i].Description != s.Description {
			t.Errorf("%s: the client changed the description", s.Name)
		}
		if got := rec.rewrite(t, s.InputSchema); !reflect.DeepEqual(got, model[i].InputSchema) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(model[i].InputSchema)
			t.Errorf("%s: the recorded rewrite gives\n%s\nthe model saw\n%s", s.Name, g, w)
		}
	}
}

// checkRewriteDescribed checks that each keyword rec's client drops from
// tool's input schema, wherever the schema states one, is still stated in
// the description the model keeps: that of the same property, or the
// nearest one above it.
func checkRewriteDescribed(t *testing.T, rec *clientRecording, tool *mcp.Tool) {
	t.Helper()
	var schema map[string]any
	remarshalJSON(t, tool.InputSchema, &schema)
	rewritten := rec.rewrite(t, schema)
	checked := 0
	var walk func(path, desc string, s, r map[string]any)
	walk = func(path, desc string, s, r map[string]any) {
		if d, ok := r["description"].(string); ok && d != "" {
			desc = d
		}
		for _, k := range rec.SchemaRewrite.DropKeywords {
			v, ok := s[k]
			if !ok {
				continue
			}
			if !slices.Contains(testutil.SchemaLimitKeywords, k) {
				t.Errorf("%s: the client drops %s, which no test holds rootgate's descriptions to", path, k)
			}
			checked++
			if !testutil.Describes(desc, k, v) {
				t.Errorf("%s: %s %v, which %s drops, is not in the description its model sees: %q", path, k, v, rec.Client, desc)
			}
		}
		sp, _ := s["properties"].(map[string]any)
		rp, _ := r["properties"].(map[string]any)
		names := make([]string, 0, len(sp))
		for n := range sp {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			ss, _ := sp[n].(map[string]any)
			rs, _ := rp[n].(map[string]any)
			if ss != nil && rs != nil {
				walk(path+"."+n, desc, ss, rs)
			}
		}
		for _, k := range []string{"items", "additionalProperties"} {
			ss, _ := s[k].(map[string]any)
			rs, _ := r[k].(map[string]any)
			if ss != nil && rs != nil {
				walk(path+"/"+k, desc, ss, rs)
			}
		}
	}
	walk(tool.Name, tool.Description, schema, rewritten)
	if tool.Name == "execute" && len(rec.SchemaRewrite.DropKeywords) > 0 && checked == 0 {
		t.Errorf("execute: none of the keywords %s drops checked: is the walk broken?", rec.Client)
	}
}

// checkSessions checks that each request in ids reached rootgated with
// the session want: the approver sees which client asks.
func checkSessions(t *testing.T, e *mcpEnv, ids []string, want string) {
	t.Helper()
	data, err := os.ReadFile(rgtest.AuditPath(e.dir))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for line := range bytes.Lines(data) {
		var r struct {
			Kind    string `json:"kind"`
			ID      string `json:"id"`
			Request struct {
				Session string `json:"session"`
			} `json:"request"`
		}
		if json.Unmarshal(line, &r) == nil && r.Kind == "received" {
			got[r.ID] = r.Request.Session
		}
	}
	for _, id := range ids {
		if got[id] != want {
			t.Errorf("request %s: session %q, want %q", id, got[id], want)
		}
	}
	if len(ids) == 0 {
		t.Error("no execute call in the recording")
	}
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
