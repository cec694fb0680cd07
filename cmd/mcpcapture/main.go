// Command mcpcapture records how real MCP clients treat rootgate's tools:
// the schemas a client shows its model, and the tools/call requests it
// sends to `rootgate mcp` when its model calls them. It is how the
// recordings in cmd/rootgate/testdata/mcpclients were made, by
// cmd/rootgate/testdata/mcpclients/capture.sh, which says how to run it;
// nothing in the test suite runs it.
//
//	mcpcapture model -listen ADDR -addr-file F -dir DIR -rootgate BIN -socket SOCK
//
// is a stand-in for the clients' model endpoints on ADDR (loopback): the
// Anthropic messages API (Claude Code), the OpenAI responses API (Codex)
// and the Gemini generateContent API (Gemini CLI), streaming or not. It
// keeps every request body in DIR and answers as a model that calls
// rootgate's tools one at a time, in the order of [script], then says
// "done". It fills every argument a client added to a tool's schema (one
// that `BIN mcp --socket SOCK` does not list) with a value of its type,
// as a model told about it may.
//
//	mcpcapture proxy -log FILE -- CMD ARGS...
//
// runs CMD (`rootgate mcp`) with its standard input and output passed
// through, and appends every line each way to FILE as JSON lines
// {"dir": "client" | "server", "msg": ...}.
//
//	mcpcapture record -client NAME -model DIR -mcp FILE -raw DIR
//
// turns one client's capture into what the tests read: the recording
// (how the client rewrote the schemas, its handshake and its tools/call
// requests), printed on standard output, and in DIR the tools as rootgate
// served them and as the model saw them.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("mcpcapture: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: mcpcapture model|proxy|record ...")
	}
	var err error
	switch os.Args[1] {
	case "model":
		err = runModel(os.Args[2:])
	case "proxy":
		err = runProxy(os.Args[2:])
	case "record":
		err = runRecord(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		log.Fatal(err)
	}
}

// step is one tool call of the stand-in model: the rootgate tool and its
// arguments; "$ID" is replaced by the id of the last request rootgate
// reported ("request id: ..." in a tool result).
type step struct {
	tool string
	args map[string]any
}

// script is what the stand-in model calls, one tool per turn: every tool
// once, with arguments a model reading the schemas would give.
var script = []step{
	{"ping", map[string]any{}},
	{"check", map[string]any{"argv": []any{"id", "-u"}}},
	{"execute", map[string]any{"argv": []any{"id", "-u"}, "reason": "show which uid the command runs as", "privileged": true, "cwd": "/", "env": map[string]any{"LANG": "C.UTF-8"}}},
	{"wait", map[string]any{"id": "$ID"}},
	{"output", map[string]any{"id": "$ID", "stream": "stdout", "from": 1}},
	{"execute", map[string]any{"pipeline": []any{[]any{"printf", `b\na\n`}, []any{"sort"}}, "reason": "sort two lines", "timeout": 30}},
	{"cancel", map[string]any{"id": "$ID"}},
}

// servedTools lists the tools of `bin mcp --socket sock`.
func servedTools(bin, sock string) ([]*mcp.Tool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "mcpcapture", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.CommandTransport{Command: exec.Command(bin, "mcp", "--socket", sock)}, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	return res.Tools, nil
}

// stand is the stand-in model endpoint.
type stand struct {
	dir    string
	served map[string]map[string]bool // tool → its properties as served

	mu  sync.Mutex
	n   int // requests kept so far
	ids int // ids given to messages and calls so far
}

// id returns a new id for a message or a call, prefix first.
func (s *stand) id(prefix string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return fmt.Sprintf("%s%06d", prefix, s.ids)
}

func runModel(args []string) error {
	fs := flag.NewFlagSet("model", flag.ExitOnError)
	listen := fs.String("listen", "127.0.0.1:0", "address to serve on (loopback)")
	dir := fs.String("dir", "", "directory to keep the request bodies in")
	bin := fs.String("rootgate", "rootgate", "the rootgate binary whose tools the clients are given")
	sock := fs.String("socket", "", "its daemon's request socket")
	addrFile := fs.String("addr-file", "", "file to write the address served on to, once serving")
	fs.Parse(args)
	if *dir == "" || *sock == "" {
		return errors.New("model: -dir and -socket are required")
	}
	tools, err := servedTools(*bin, *sock)
	if err != nil {
		return fmt.Errorf("listing rootgate's tools: %w", err)
	}
	s := &stand{dir: *dir, served: map[string]map[string]bool{}}
	for _, t := range tools {
		var schema struct {
			Properties map[string]any `json:"properties"`
		}
		b, _ := json.Marshal(t.InputSchema)
		json.Unmarshal(b, &schema)
		s.served[t.Name] = map[string]bool{}
		for p := range schema.Properties {
			s.served[t.Name][p] = true
		}
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	log.Printf("model: serving on %s", ln.Addr())
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
	}
	return http.Serve(ln, s)
}

func (s *stand) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	api := ""
	switch p := r.URL.Path; {
	case strings.HasSuffix(p, "/messages"):
		api = "anthropic"
	case strings.HasSuffix(p, "/responses"):
		api = "responses"
	case strings.Contains(p, ":generateContent") || strings.Contains(p, ":streamGenerateContent"):
		api = "gemini"
	}
	// A request of an API the stand-in speaks is kept as its JSON body,
	// any other with its method and path first.
	name, kept := fmt.Sprintf("%03d-%s.json", n, api), body
	if api == "" {
		name, kept = fmt.Sprintf("%03d-other.txt", n), append(fmt.Appendf(nil, "%s %s\n", r.Method, r.URL.RequestURI()), body...)
	}
	if err := os.WriteFile(filepath.Join(s.dir, name), kept, 0o644); err != nil {
		log.Printf("model: %v", err)
	}
	log.Printf("model: %s %s -> %s", r.Method, r.URL.RequestURI(), name)
	if api == "" {
		if strings.HasSuffix(r.URL.Path, ":countTokens") {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"totalTokens": 100}`)
			return
		}
		http.NotFound(w, r)
		return
	}
	var req map[string]any
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	names := toolNames(api, req, body)
	turn := s.next(req, names, body)
	stream := req["stream"] == true || strings.Contains(r.URL.Path, ":streamGenerateContent")
	switch api {
	case "anthropic":
		s.answerAnthropic(w, req, turn, stream)
	case "responses":
		s.answerResponses(w, turn)
	case "gemini":
		answerGemini(w, turn, stream)
	}
}

// turn is the model's answer: a tool call (tool non-empty) or text.
type turn struct {
	tool string // as the client names it
	args map[string]any
	text string
}

// requestID finds a request's id in a tool result as the model sees it:
// the text result's "request id: ID", or the structured result's "id"
// (as a JSON string inside the request's JSON).
var requestID = regexp.MustCompile(`(?:request id: |\\"id\\":\s*\\")([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})`)

// next chooses the answer to a request: the script's next call when the
// request offers rootgate's tools, else text.
func (s *stand) next(req map[string]any, names map[string]clientTool, body []byte) turn {
	if len(names) == 0 {
		// Claude Code defers MCP tools: it names them, and its ToolSearch
		// tool fetches their schemas.
		if ds := deferredName.FindAll(body, -1); len(ds) > 0 && !called(req, "ToolSearch") {
			var sel []string
			for _, d := range ds {
				if !slices.Contains(sel, string(d)) {
					sel = append(sel, string(d))
				}
			}
			return turn{tool: "ToolSearch", args: map[string]any{"query": "select:" + strings.Join(sel, ",")}}
		}
		return turn{text: "ok"}
	}
	done := countCalls(req)
	if done >= len(script) {
		return turn{text: "done"}
	}
	st := script[done]
	ct, ok := names[st.tool]
	if !ok {
		return turn{text: "no rootgate tool " + st.tool}
	}
	args := map[string]any{}
	for k, v := range st.args {
		if v == "$ID" {
			m := requestID.FindAllSubmatch(body, -1)
			if len(m) == 0 {
				return turn{text: "no request id to use"}
			}
			v = string(m[len(m)-1][1])
		}
		args[k] = v
	}
	// What the client added to the schema, the model fills in.
	for p, ps := range ct.props {
		if s.served[st.tool][p] {
			continue
		}
		typ, _ := ps["type"].(string)
		switch strings.ToLower(typ) {
		case "boolean":
			args[p] = true
		case "string":
			args[p] = "x"
		case "number", "integer":
			args[p] = 1
		}
	}
	return turn{tool: ct.name, args: args}
}

// visit calls f with every value in v, depth first: maps, slices and
// their elements, leaving out what is under a key "tools" when
// skipTools (the tools offered, not the conversation).
func visit(v any, skipTools bool, f func(any)) {
	f(v)
	switch v := v.(type) {
	case map[string]any:
		for k, c := range v {
			if !skipTools || k != "tools" {
				visit(c, skipTools, f)
			}
		}
	case []any:
		for _, c := range v {
			visit(c, skipTools, f)
		}
	}
}

// countCalls counts the calls of rootgate's tools already in the
// conversation: tool_use blocks (Anthropic), function_call items
// (responses), functionCall parts (Gemini), everywhere but in the tools
// offered.
func countCalls(req map[string]any) int {
	n := 0
	ours := func(v map[string]any) bool {
		name, _ := v["name"].(string)
		ns, _ := v["namespace"].(string)
		return strings.Contains(name+ns, "rootgate")
	}
	visit(req, true, func(v any) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		if t, _ := m["type"].(string); (t == "tool_use" || t == "function_call") && ours(m) {
			n++
		}
		if fc, ok := m["functionCall"].(map[string]any); ok && ours(fc) {
			n++
		}
	})
	return n
}

// called reports whether the conversation has a call of the tool named
// name.
func called(req map[string]any, name string) bool {
	found := false
	visit(req, true, func(v any) {
		if m, ok := v.(map[string]any); ok && m["name"] == name && (m["type"] == "tool_use" || m["type"] == "function_call") {
			found = true
		}
	})
	return found
}

var (
	deferredName = regexp.MustCompile(`mcp__rootgate__[a-z]+`)
	fetched      = regexp.MustCompile(`(?s)<function>(.*?)</function>`)
)

// deferred finds rootgate's tools that Claude Code's ToolSearch returned
// into the conversation (<function>{"name": ..., "parameters": ...}</function>).
func deferred(body []byte) []clientTool {
	var req any
	json.Unmarshal(body, &req)
	var out []clientTool
	visit(req, false, func(v any) {
		str, ok := v.(string)
		if !ok {
			return
		}
		for _, m := range fetched.FindAllStringSubmatch(str, -1) {
			var f struct {
				Name        string         `json:"name"`
				Description string         `json:"description"`
				Parameters  map[string]any `json:"parameters"`
			}
			if json.Unmarshal([]byte(m[1]), &f) == nil && strings.Contains(f.Name, "rootgate") {
				ct := newClientTool(f.Name, f.Parameters)
				ct.desc = f.Description
				out = append(out, ct)
			}
		}
	})
	return out
}

// clientTool is one of rootgate's tools as a client offers it to its
// model.
type clientTool struct {
	name   string
	desc   string
	schema map[string]any
	props  map[string]map[string]any
}

var rootgateTools = []string{"ping", "check", "execute", "wait", "output", "cancel"}

// toolNames finds rootgate's tools among those a request offers, by the
// names the client gave them (mcp__rootgate__execute and the like).
func toolNames(api string, req map[string]any, body []byte) map[string]clientTool {
	out := map[string]clientTool{}
	for _, t := range append(offeredTools(api, req), deferred(body)...) {
		if !strings.Contains(t.name, "rootgate") {
			continue
		}
		for _, rt := range rootgateTools {
			if strings.HasSuffix(t.name, "_"+rt) || strings.HasSuffix(t.name, "."+rt) || strings.HasSuffix(t.name, "/"+rt) {
				out[rt] = t
			}
		}
	}
	return out
}

func newClientTool(name string, s map[string]any) clientTool {
	ct := clientTool{name: name, schema: s, props: map[string]map[string]any{}}
	if props, ok := s["properties"].(map[string]any); ok {
		for k, v := range props {
			if m, ok := v.(map[string]any); ok {
				ct.props[k] = m
			}
		}
	}
	return ct
}

// offeredTools lists the function tools a request offers, in each API's
// shape.
func offeredTools(api string, req map[string]any) []clientTool {
	var out []clientTool
	add := func(name string, desc, schema any) {
		s, _ := schema.(map[string]any)
		ct := newClientTool(name, s)
		ct.desc, _ = desc.(string)
		out = append(out, ct)
	}
	tools, _ := req["tools"].([]any)
	for _, t := range tools {
		m, _ := t.(map[string]any)
		switch api {
		case "anthropic":
			name, _ := m["name"].(string)
			add(name, m["description"], m["input_schema"])
		case "responses":
			name, _ := m["name"].(string)
			if m["type"] == "function" {
				add(name, m["description"], m["parameters"])
			}
			// A namespace of tools (an MCP server's) holds its own list.
			if inner, ok := m["tools"].([]any); ok {
				for _, it := range inner {
					im, _ := it.(map[string]any)
					iname, _ := im["name"].(string)
					add(name+"/"+iname, im["description"], im["parameters"])
				}
			}
		case "gemini":
			decls, _ := m["functionDeclarations"].([]any)
			for _, d := range decls {
				dm, _ := d.(map[string]any)
				name, _ := dm["name"].(string)
				schema := dm["parametersJsonSchema"]
				if schema == nil {
					schema = dm["parameters"]
				}
				add(name, dm["description"], schema)
			}
		}
	}
	return out
}

func sse(w http.ResponseWriter, event string, data any) {
	b, _ := json.Marshal(data)
	if event != "" {
		fmt.Fprintf(w, "event: %s\n", event)
	}
	fmt.Fprintf(w, "data: %s\n\n", b)
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *stand) answerAnthropic(w http.ResponseWriter, req map[string]any, t turn, stream bool) {
	model, _ := req["model"].(string)
	var block map[string]any
	stop := "end_turn"
	if t.tool != "" {
		block = map[string]any{"type": "tool_use", "id": s.id("toolu_"), "name": t.tool, "input": t.args}
		stop = "tool_use"
	} else {
		block = map[string]any{"type": "text", "text": t.text}
	}
	usage := map[string]any{"input_tokens": 10, "output_tokens": 10}
	msg := map[string]any{"id": s.id("msg_"), "type": "message", "role": "assistant", "model": model,
		"content": []any{block}, "stop_reason": stop, "stop_sequence": nil, "usage": usage}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(msg)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	start := map[string]any{}
	for k, v := range msg {
		start[k] = v
	}
	start["content"] = []any{}
	start["stop_reason"] = nil
	sse(w, "message_start", map[string]any{"type": "message_start", "message": start})
	if t.tool != "" {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "tool_use", "id": block["id"], "name": t.tool, "input": map[string]any{}}})
		args, _ := json.Marshal(t.args)
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "input_json_delta", "partial_json": string(args)}})
	} else {
		sse(w, "content_block_start", map[string]any{"type": "content_block_start", "index": 0,
			"content_block": map[string]any{"type": "text", "text": ""}})
		sse(w, "content_block_delta", map[string]any{"type": "content_block_delta", "index": 0,
			"delta": map[string]any{"type": "text_delta", "text": t.text}})
	}
	sse(w, "content_block_stop", map[string]any{"type": "content_block_stop", "index": 0})
	sse(w, "message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": 10}})
	sse(w, "message_stop", map[string]any{"type": "message_stop"})
}

func (s *stand) answerResponses(w http.ResponseWriter, t turn) {
	id := s.id("resp_")
	var item map[string]any
	if t.tool != "" {
		args, _ := json.Marshal(t.args)
		name, ns := t.tool, ""
		if i := strings.LastIndex(name, "/"); i >= 0 {
			ns, name = name[:i], name[i+1:]
		}
		item = map[string]any{"type": "function_call", "id": s.id("fc_"), "call_id": s.id("call_"), "name": name, "arguments": string(args), "status": "completed"}
		if ns != "" {
			item["namespace"] = ns
		}
	} else {
		item = map[string]any{"type": "message", "id": s.id("msg_"), "role": "assistant", "status": "completed",
			"content": []any{map[string]any{"type": "output_text", "text": t.text, "annotations": []any{}}}}
	}
	w.Header().Set("Content-Type", "text/event-stream")
	resp := map[string]any{"id": id, "object": "response", "status": "in_progress", "output": []any{}}
	sse(w, "response.created", map[string]any{"type": "response.created", "response": resp})
	sse(w, "response.output_item.added", map[string]any{"type": "response.output_item.added", "output_index": 0, "item": item})
	sse(w, "response.output_item.done", map[string]any{"type": "response.output_item.done", "output_index": 0, "item": item})
	done := map[string]any{"id": id, "object": "response", "status": "completed", "output": []any{item},
		"usage": map[string]any{"input_tokens": 10, "input_tokens_details": map[string]any{"cached_tokens": 0},
			"output_tokens": 10, "output_tokens_details": map[string]any{"reasoning_tokens": 0}, "total_tokens": 20}}
	sse(w, "response.completed", map[string]any{"type": "response.completed", "response": done})
}

func answerGemini(w http.ResponseWriter, t turn, stream bool) {
	var part map[string]any
	if t.tool != "" {
		part = map[string]any{"functionCall": map[string]any{"name": t.tool, "args": t.args}}
	} else {
		part = map[string]any{"text": t.text}
	}
	resp := map[string]any{
		"candidates":    []any{map[string]any{"content": map[string]any{"role": "model", "parts": []any{part}}, "finishReason": "STOP", "index": 0}},
		"usageMetadata": map[string]any{"promptTokenCount": 10, "candidatesTokenCount": 10, "totalTokenCount": 20},
		"modelVersion":  "stand-in",
	}
	if !stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(resp)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	sse(w, "", resp)
}

func runProxy(args []string) error {
	fs := flag.NewFlagSet("proxy", flag.ExitOnError)
	logPath := fs.String("log", "", "file to append the MCP messages to")
	fs.Parse(args)
	if *logPath == "" || fs.NArg() == 0 {
		return errors.New("proxy: -log FILE -- CMD ARGS... are required")
	}
	f, err := os.OpenFile(*logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	var mu sync.Mutex
	note := func(dir string, line []byte) {
		mu.Lock()
		defer mu.Unlock()
		var msg json.RawMessage = bytes.TrimSpace(line)
		if !json.Valid(msg) {
			msg, _ = json.Marshal(string(line))
		}
		b, _ := json.Marshal(map[string]any{"dir": dir, "msg": msg})
		f.Write(append(b, '\n'))
	}
	cmd := exec.Command(fs.Arg(0), fs.Args()[1:]...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	go func() {
		copyLines(os.Stdin, in, func(l []byte) { note("client", l) })
		in.Close()
	}()
	copyLines(out, os.Stdout, func(l []byte) { note("server", l) })
	return cmd.Wait()
}

// copyLines copies r to w line by line, calling seen with each line.
func copyLines(r io.Reader, w io.Writer, seen func([]byte)) {
	br := bufio.NewReaderSize(r, 1<<20)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			seen(line)
			if _, werr := w.Write(line); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// logLine is one line of the proxy's log.
type logLine struct {
	Dir string          `json:"dir"`
	Msg json.RawMessage `json:"msg"`
}

// rpc is the part of a JSON-RPC message the recording looks at.
type rpc struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

// recording is what cmd/rootgate's TestMCPClientsAsRecorded reads.
type recording struct {
	Client        string            `json:"client"`
	Captured      string            `json:"captured"`
	How           string            `json:"how"`
	ModelTools    map[string]string `json:"model_tool_names"`
	SchemaRewrite rewriteRule       `json:"schema_rewrite"`
	Handshake     []json.RawMessage `json:"handshake"`
	Calls         []recordedCall    `json:"calls"`
}

type rewriteRule struct {
	DropKeywords    []string                   `json:"drop_keywords"`
	AddProperties   map[string]json.RawMessage `json:"add_properties"`
	EmptyProperties bool                       `json:"empty_properties"`
}

type recordedCall struct {
	Tool      string         `json:"tool"`
	Arguments map[string]any `json:"arguments"`
	Meta      map[string]any `json:"_meta,omitempty"`
}

func runRecord(args []string) error {
	fs := flag.NewFlagSet("record", flag.ExitOnError)
	client := fs.String("client", "", `the client's name and version, e.g. "Claude Code 2.1.332"`)
	modelDir := fs.String("model", "", "the stand-in model's request directory for this client")
	mcpLog := fs.String("mcp", "", "the proxy's log for this client")
	raw := fs.String("raw", "", "directory for the raw capture")
	fs.Parse(args)
	if *client == "" || *modelDir == "" || *mcpLog == "" || *raw == "" {
		return errors.New("record: -client, -model, -mcp and -raw are required")
	}
	lf, err := os.ReadFile(*mcpLog)
	if err != nil {
		return err
	}
	rec := recording{Client: *client, ModelTools: map[string]string{},
		Captured: "captured live on " + time.Now().UTC().Format("2006-01-02") + " with a stand-in model endpoint (cmd/mcpcapture; README.md here says how)"}
	var served []map[string]any
	pending := map[string]string{} // request id → method, of the client's requests
	lastID := ""                   // the id of the last execute's request
	for line := range bytes.Lines(lf) {
		var l logLine
		if err := json.Unmarshal(line, &l); err != nil {
			return err
		}
		var m rpc
		if err := json.Unmarshal(l.Msg, &m); err != nil {
			return fmt.Errorf("not JSON-RPC: %s", l.Msg)
		}
		if l.Dir == "server" {
			switch pending[string(m.ID)] {
			case "tools/list":
				var r struct {
					Tools []map[string]any `json:"tools"`
				}
				json.Unmarshal(m.Result, &r)
				if served == nil {
					served = r.Tools
				}
			case "tools/call execute":
				var r struct {
					StructuredContent struct {
						ID string `json:"id"`
					} `json:"structuredContent"`
				}
				json.Unmarshal(m.Result, &r)
				lastID = r.StructuredContent.ID
			}
			continue
		}
		if m.Method == "tools/call" {
			var c recordedCall
			if err := json.Unmarshal(m.Params, &struct {
				Name      *string         `json:"name"`
				Arguments *map[string]any `json:"arguments"`
				Meta      *map[string]any `json:"_meta"`
			}{&c.Tool, &c.Arguments, &c.Meta}); err != nil {
				return err
			}
			for k, v := range c.Arguments {
				if v == lastID && lastID != "" {
					c.Arguments[k] = "$ID"
				}
			}
			rec.Calls = append(rec.Calls, c)
			pending[string(m.ID)] = "tools/call " + c.Tool
			continue
		}
		if m.ID != nil {
			pending[string(m.ID)] = m.Method
		}
		if len(rec.Calls) == 0 {
			rec.Handshake = append(rec.Handshake, l.Msg)
		} else {
			log.Printf("record: left out %s, sent after the first call", l.Msg)
		}
	}
	if served == nil {
		return errors.New("record: no tools/list answer in the MCP log")
	}
	if len(rec.Calls) == 0 {
		return errors.New("record: the client called no tool: see its output")
	}
	// The output schemas are rootgate's alone: no client rewrites them
	// for its model.
	for _, t := range served {
		delete(t, "outputSchema")
	}
	model, err := modelTools(*modelDir)
	if err != nil {
		return err
	}
	for rt, t := range model {
		rec.ModelTools[rt] = t["name"].(string)
	}
	if rec.SchemaRewrite, err = deriveRule(served, model); err != nil {
		return err
	}
	rec.How = describeRule(rec.SchemaRewrite)
	if err := os.MkdirAll(*raw, 0o755); err != nil {
		return err
	}
	var modelList []any
	for _, rt := range slices.Sorted(mapsKeys(model)) {
		modelList = append(modelList, model[rt])
	}
	if err := writeJSON(filepath.Join(*raw, "served-tools.json"), served); err != nil {
		return err
	}
	if err := writeJSON(filepath.Join(*raw, "model-tools.json"), modelList); err != nil {
		return err
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	_, err = os.Stdout.Write(append(b, '\n'))
	return err
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// modelTools returns rootgate's tools as the model saw them in the first
// request to the model that offered them: name, description and input
// schema, by rootgate's name of the tool.
func modelTools(dir string) (map[string]map[string]any, error) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var req map[string]any
		if err := json.Unmarshal(b, &req); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		api := strings.TrimSuffix(filepath.Base(f)[4:], ".json")
		tools := toolNames(api, req, b)
		if len(tools) == 0 {
			continue
		}
		log.Printf("record: the model's tools are those of %s", f)
		out := map[string]map[string]any{}
		for rt, ct := range tools {
			out[rt] = map[string]any{"name": ct.name, "description": ct.desc, "input_schema": ct.schema}
		}
		return out, nil
	}
	return nil, errors.New("record: no request to the model offered rootgate's tools")
}

// deriveRule works out how the client rewrote each served input schema
// into the one its model saw: keywords it dropped, properties it added to
// every tool, "properties": {} added to object schemas without one. Any
// other difference is an error: the rule must explain the whole capture.
func deriveRule(served []map[string]any, model map[string]map[string]any) (rewriteRule, error) {
	rule := rewriteRule{AddProperties: map[string]json.RawMessage{}}
	dropped := map[string]bool{}
	var errs []error
	var walk func(path string, a, b map[string]any)
	walk = func(path string, a, b map[string]any) {
		for k, av := range a {
			bv, ok := b[k]
			if !ok {
				dropped[k] = true
				continue
			}
			switch k {
			case "properties":
				ap, _ := av.(map[string]any)
				bp, _ := bv.(map[string]any)
				for name, s := range ap {
					as, _ := s.(map[string]any)
					bs, _ := bp[name].(map[string]any)
					if bs == nil {
						errs = append(errs, fmt.Errorf("%s: property %s dropped", path, name))
						continue
					}
					walk(path+"."+name, as, bs)
				}
				for name, s := range bp {
					if _, ok := ap[name]; ok {
						continue
					}
					raw, _ := json.Marshal(s)
					if prev, ok := rule.AddProperties[name]; ok && !bytes.Equal(prev, raw) {
						errs = append(errs, fmt.Errorf("%s: added property %s differs between tools", path, name))
					}
					rule.AddProperties[name] = raw
				}
			case "items", "additionalProperties":
				as, aok := av.(map[string]any)
				bs, bok := bv.(map[string]any)
				if aok && bok {
					walk(path+"/"+k, as, bs)
				} else if !jsonEqual(av, bv) {
					errs = append(errs, fmt.Errorf("%s: %s changed", path, k))
				}
			default:
				if !jsonEqual(av, bv) {
					errs = append(errs, fmt.Errorf("%s: %s changed from %v to %v", path, k, av, bv))
				}
			}
		}
		for k, bv := range b {
			if _, ok := a[k]; ok {
				continue
			}
			if k == "properties" && a["type"] == "object" && jsonEqual(bv, map[string]any{}) {
				rule.EmptyProperties = true
				continue
			}
			errs = append(errs, fmt.Errorf("%s: %s added", path, k))
		}
	}
	for _, t := range served {
		name, _ := t["name"].(string)
		m, ok := model[name]
		if !ok {
			errs = append(errs, fmt.Errorf("tool %s not shown to the model", name))
			continue
		}
		if m["description"] != t["description"] {
			errs = append(errs, fmt.Errorf("tool %s: description changed", name))
		}
		as, _ := t["inputSchema"].(map[string]any)
		bs, _ := m["input_schema"].(map[string]any)
		walk(name, as, bs)
	}
	rule.DropKeywords = slices.Sorted(mapsKeys(dropped))
	if rule.DropKeywords == nil {
		rule.DropKeywords = []string{}
	}
	return rule, errors.Join(errs...)
}

func jsonEqual(a, b any) bool {
	ab, _ := json.Marshal(a)
	bb, _ := json.Marshal(b)
	return bytes.Equal(ab, bb)
}

// describeRule says in words what rule does, for the recording's "how".
func describeRule(rule rewriteRule) string {
	var parts []string
	if len(rule.DropKeywords) > 0 {
		parts = append(parts, "drops "+strings.Join(rule.DropKeywords, ", ")+" from the schemas its model sees")
	}
	for _, name := range slices.Sorted(mapsKeys(rule.AddProperties)) {
		parts = append(parts, "adds a property "+name+" to every tool's schema")
	}
	if rule.EmptyProperties {
		parts = append(parts, `gives every object schema without "properties" an empty one`)
	}
	if len(parts) == 0 {
		return "shows its model every tool's schema and description unchanged; the calls below are the tools/call requests it sent, as the stand-in model made them"
	}
	return strings.Join(parts, "; ") + "; the calls below are the tools/call requests it sent, as the stand-in model made them"
}
