package mcpserver_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
	"github.com/rootgate/rootgate/internal/testutil"
)

// connect runs a server with cfg and returns an SDK client session on it,
// over in-memory transports.
func connect(t *testing.T, cfg mcpserver.Config) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := mcpserver.New(cfg).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// noDaemon is a socket path nothing listens on.
func noDaemon(t *testing.T) string { return filepath.Join(t.TempDir(), "none.sock") }

func TestToolsList(t *testing.T) {
	cs := connect(t, mcpserver.Config{Socket: noDaemon(t), Hosts: map[string]string{"web1": "/x", "db": "/y"}})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range res.Tools {
		tools[tl.Name] = tl
	}
	if len(tools) != 6 || tools["execute"] == nil || tools["ping"] == nil || tools["check"] == nil || tools["wait"] == nil || tools["cancel"] == nil || tools["output"] == nil {
		t.Fatalf("tools: %v", tools)
	}
	if init := cs.InitializeResult(); !strings.Contains(init.Instructions, "never send the same request again unchanged") ||
		!strings.Contains(init.Instructions, "sudo rootgate approve") {
		t.Errorf("instructions: %q", init.Instructions)
	}

	// The schemas as a client sees them: plain JSON.
	var in struct {
		Type                 string
		Required             []string
		AdditionalProperties any `json:"additionalProperties"`
		Properties           map[string]struct {
			Type        string
			Description string
			MinItems    *int `json:"minItems"`
			MaxItems    *int `json:"maxItems"`
			MinLength   *int `json:"minLength"`
			Default     any
			Enum        []string
			Items       *struct {
				Type     string
				MinItems *int `json:"minItems"`
				Items    *struct{ Type string }
			}
		}
	}
	remarshal(t, tools["execute"].InputSchema, &in)
	if in.Type != "object" || !slices.Equal(in.Required, []string{"reason"}) || in.AdditionalProperties != false {
		t.Errorf("execute schema: %+v", in)
	}
	want := []string{"argv", "cwd", "env", "forward_agent", "host", "pipeline", "privileged", "reason", "stdin", "timeout", "user"}
	var got []string
	for name, p := range in.Properties {
		got = append(got, name)
		if p.Description == "" {
			t.Errorf("%s has no description", name)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("properties %v, want %v", got, want)
	}
	argv, pipe := in.Properties["argv"], in.Properties["pipeline"]
	if argv.Type != "array" || argv.MinItems == nil || *argv.MinItems != 1 || argv.Items.Type != "string" {
		t.Errorf("argv: %+v", argv)
	}
	if pipe.Type != "array" || *pipe.MinItems != 1 || *pipe.MaxItems != 16 || pipe.Items.Type != "array" || *pipe.Items.MinItems != 1 || pipe.Items.Items.Type != "string" {
		t.Errorf("pipeline: %+v", pipe)
	}
	if r := in.Properties["reason"]; r.Type != "string" || *r.MinLength != 1 || !strings.Contains(r.Description, "A person reads it") {
		t.Errorf("reason: %+v", r)
	}
	if p := in.Properties["privileged"]; p.Type != "boolean" || p.Default != true {
		t.Errorf("privileged: %+v", p)
	}
	if h := in.Properties["host"]; !slices.Equal(h.Enum, []string{"local", "db", "web1"}) || h.Default != "local" {
		t.Errorf("host: %+v", h)
	}
	desc := tools["execute"].Description
	for _, w := range []string{"A person may see the request", "A denial is final for this request"} {
		if !strings.Contains(desc, w) {
			t.Errorf("execute description lacks %q", w)
		}
	}

	// Output schemas are declared, and the structured results below are
	// checked against them.
	var out struct {
		Type       string
		Properties map[string]any
	}
	remarshal(t, tools["execute"].OutputSchema, &out)
	if st, _ := out.Properties["status"].(map[string]any); fmt.Sprint(st["enum"]) != "[ok denied timeout error pending]" {
		t.Errorf("status in the output schema: %v", st)
	}
	for _, f := range []string{"status", "host", "id", "message", "next", "time_limit_hit", "exit_code", "stages", "stdout"} {
		if out.Properties[f] == nil {
			t.Errorf("execute output schema lacks %s", f)
		}
	}
	remarshal(t, tools["ping"].OutputSchema, &out)
	if out.Type != "object" || out.Properties["daemons"] == nil {
		t.Errorf("ping output schema: %+v", out)
	}
}

func remarshal(t *testing.T, from, to any) {
	t.Helper()
	b, err := json.Marshal(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, to); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}

// validate checks a structured result against the tool's output schema.
func validate(t *testing.T, tool *mcp.Tool, structured any) {
	t.Helper()
	var s jsonschema.Schema
	remarshal(t, tool.OutputSchema, &s)
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	remarshal(t, structured, &v)
	if err := rs.Validate(v); err != nil {
		t.Errorf("structured result %v does not match the output schema: %v", v, err)
	}
}

func TestExecuteRejectsBadArguments(t *testing.T) {
	cs := connect(t, mcpserver.Config{Socket: noDaemon(t)})
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	execTool := tools.Tools[slices.IndexFunc(tools.Tools, func(t *mcp.Tool) bool { return t.Name == "execute" })]
	for _, tc := range []struct {
		name string
		args string
		want string
	}{
		{"both argv and pipeline", `{"argv":["ls"],"pipeline":[["ls"]],"reason":"r"}`,
			`give either argv (one command) or pipeline (commands joined by pipes), not both: for one command use {"argv": ["ls", "-l"]}; for a pipeline put every stage in pipeline: {"pipeline": [["ls", "-l"], ["wc", "-l"]]}`},
		{"neither", `{"reason":"r"}`,
			`no command given: set argv to the command as a list of words, e.g. {"argv": ["systemctl", "status", "nginx"]}, or pipeline to a list of such lists`},
		{"no arguments at all", ``,
			`no command given: set argv to the command as a list of words, e.g. {"argv": ["systemctl", "status", "nginx"]}, or pipeline to a list of such lists`},
		{"empty argv", `{"argv":[],"reason":"r"}`, `argv is empty: it must hold at least the program to run, e.g. ["id"]`},
		{"empty argv with spaces", `{"argv":[ ],"reason":"r"}`, `argv is empty: it must hold at least the program to run, e.g. ["id"]`},
		{"null argv", `{"argv":null,"reason":"r"}`,
			`argv and pipeline must not be null: give argv as a list of strings, e.g. {"argv": ["ls", "-l", "/var/log"]}, or pipeline as a list of such lists`},
		{"null pipeline next to argv", `{"argv":["ls"],"pipeline":null,"reason":"r"}`,
			`argv and pipeline must not be null: give argv as a list of strings, e.g. {"argv": ["ls", "-l", "/var/log"]}, or pipeline as a list of such lists`},
		{"no reason", `{"argv":["ls"]}`, `reason is missing: say in a sentence or two what the command does and why you need it; the approver reads it`},
		{"empty reason", `{"argv":["ls"],"reason":""}`, `reason is missing: say in a sentence or two what the command does and why you need it; the approver reads it`},
		{"null reason", `{"argv":["ls"],"reason":null}`, `reason is missing: say in a sentence or two what the command does and why you need it; the approver reads it`},
		{"blank reason", `{"argv":["ls"],"reason":" \n\t "}`, `reason is blank (only spaces or line breaks): say in a sentence or two what the command does and why you need it; the approver reads it`},
		{"zero timeout", `{"argv":["ls"],"reason":"r","timeout":0}`, `timeout must be more than 0 seconds (got 0); leave it out for rootgated's own limit`},
		{"negative timeout", `{"argv":["ls"],"reason":"r","timeout":-0.5}`, `timeout must be more than 0 seconds (got -0.5); leave it out for rootgated's own limit`},
		{"huge timeout", `{"argv":["ls"],"reason":"r","timeout":1e9}`, `timeout must be at most 31536000 seconds (a year; got 1e+09); rootgated lowers it to its own limit (300 s by default) anyway, so leave it out for that limit`},
		{"long reason", `{"argv":["ls"],"reason":"` + strings.Repeat("a", 5000) + `"}`,
			`invalid arguments: validating /properties/reason: maxLength: "` + strings.Repeat("a", 64) + `… (5000 characters in all)" contains 5000 Unicode code points, more than 4096 (see the input schema's descriptions)`},
		{"long host", `{"argv":["ls"],"reason":"r","host":"` + strings.Repeat("h", 5000) + `"}`,
			`invalid arguments: validating /properties/host: enum: ` + strings.Repeat("h", 64) + `… (5000 characters in all) does not equal any of: [local] (see the input schema's descriptions)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, cs, "execute", json.RawMessage(tc.args))
			r := checkInputError(t, res)
			if r.Message != tc.want {
				t.Errorf("message %q\nwant    %q", r.Message, tc.want)
			}
			validate(t, execTool, res.StructuredContent)
		})
	}
	// The schema itself catches the rest, in its own words.
	for _, tc := range []struct{ name, args, want string }{
		{"empty stage", `{"pipeline":[["ls"],[]],"reason":"r"}`, "minItems"},
		{"null in argv", `{"argv":["ls",null],"reason":"r"}`, "type"},
		{"null env", `{"argv":["ls"],"env":null,"reason":"r"}`, "type"},
		{"number as argv", `{"argv":"ls -l","reason":"r"}`, "type"},
		{"unknown field", `{"argv":["ls"],"reason":"r","shell":true}`, "shell"},
		{"look-alike field", `{"argv":["ls"],"reason":"r","Privileged":false}`, "Privileged"},
		{"repeated field", `{"argv":["id"],"argv":["ls"],"reason":"r"}`, `duplicate field "argv"`},
		{"lone surrogate", `{"argv":["ls","\ud800"],"reason":"r"}`, `argv[1] contains an escaped lone surrogate`},
		{"unknown host", `{"argv":["ls"],"reason":"r","host":"web9"}`, "enum"},
		{"17 stages", `{"pipeline":[["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"],["a"]],"reason":"r"}`, "maxItems"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := checkInputError(t, call(t, cs, "execute", json.RawMessage(tc.args)))
			if !strings.HasPrefix(r.Message, "invalid arguments: ") || !strings.Contains(r.Message, tc.want) {
				t.Errorf("message %q, want one about %s", r.Message, tc.want)
			}
		})
	}
}

// checkInputError asserts a result refusing the arguments, in text and
// structured form, with nothing sent to the daemon.
func checkInputError(t *testing.T, res *mcp.CallToolResult) mcpserver.Result {
	t.Helper()
	var r mcpserver.Result
	remarshal(t, res.StructuredContent, &r)
	if !res.IsError || r.Status != "error" || r.ID != "" || r.Host != "" || r.Stages != nil {
		t.Errorf("result: isError %v, %+v", res.IsError, r)
	}
	const next = "Nothing was sent to rootgated. Fix the arguments as the message says and call execute again."
	if r.Next != next {
		t.Errorf("next %q", r.Next)
	}
	if want := "status: error: " + r.Message + "\nnext: " + next + "\n"; text(t, res) != want {
		t.Errorf("text %q\nwant %q", text(t, res), want)
	}
	return r
}

func call(t *testing.T, cs *mcp.ClientSession, tool string, args json.RawMessage) *mcp.CallToolResult {
	t.Helper()
	p := &mcp.CallToolParams{Name: tool}
	if len(args) > 0 {
		p.Arguments = args
	}
	res, err := cs.CallTool(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	if len(res.Content) != 1 {
		t.Fatalf("content: %v", res.Content)
	}
	return res.Content[0].(*mcp.TextContent).Text
}

func TestPingWithoutDaemon(t *testing.T) {
	sock := noDaemon(t)
	cs := connect(t, mcpserver.Config{Socket: sock})
	res := call(t, cs, "ping", nil)
	var r mcpserver.PingResult
	remarshal(t, res.StructuredContent, &r)
	if !res.IsError || len(r.Daemons) != 1 {
		t.Fatalf("%+v", r)
	}
	d := r.Daemons[0]
	if d.Host != "local" || d.Socket != sock || d.Reachable || d.Approver != "unknown" ||
		d.Message != "cannot connect to "+sock+": dial unix "+sock+": connect: no such file or directory" ||
		!strings.HasPrefix(d.Next, "No rootgated socket at "+sock+". Ask the user to start rootgated") {
		t.Errorf("%+v", d)
	}
	if want := "local: not reachable on " + sock + ": " + d.Message + "\nnext: " + d.Next + "\n"; text(t, res) != want {
		t.Errorf("text %q\nwant %q", text(t, res), want)
	}
	// Argument errors carry a structured result too, valid by the schema.
	res = call(t, cs, "ping", json.RawMessage(`{"host":"web1"}`))
	var bad mcpserver.PingResult
	remarshal(t, res.StructuredContent, &bad)
	wantMsg := "invalid arguments: validating /properties/host: enum: web1 does not equal any of: [local]"
	wantNext := `Nothing was asked. Call ping with {} for every host, or with {"host": one of local}.`
	if !res.IsError || bad.Daemons == nil || len(bad.Daemons) != 0 || bad.Message != wantMsg || bad.Next != wantNext ||
		text(t, res) != "status: error: "+wantMsg+"\nnext: "+wantNext+"\n" {
		t.Errorf("unknown host: %+v\n%s", bad, text(t, res))
	}
	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	validate(t, tools.Tools[slices.IndexFunc(tools.Tools, func(t *mcp.Tool) bool { return t.Name == "ping" })], res.StructuredContent)
}

// fakeSocket listens on a fresh socket and answers every connection with
// answer once it has read a line ("" never answers). It stands for what a
// real rootgated cannot be made to do here: be another program, another
// protocol version, or stuck.
func fakeSocket(t *testing.T, answer string) string {
	t.Helper()
	dir := testutil.ShortDir(t)
	sock := dir + "/s"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); close(done) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = bufio.NewReader(c).ReadString('\n')
				if answer == "" {
					<-done // hold the connection, answering nothing
					return
				}
				_, _ = c.Write([]byte(answer))
			}()
		}
	}()
	return sock
}

func TestConnectionErrors(t *testing.T) {
	stuck := fakeSocket(t, "")
	other := fakeSocket(t, "220 smtp.example ESMTP ready\n")
	older := fakeSocket(t, `{"id":"","status":"error","code":"unknown_field","message":"unknown field \"cwd\"","version":"0.9"}`+"\n")
	cs := connect(t, mcpserver.Config{Socket: stuck, PingTimeout: 200 * time.Millisecond,
		Hosts: map[string]string{"other": other, "older": older}})

	t.Run("ping: not answering, another program, an older daemon", func(t *testing.T) {
		res := call(t, cs, "ping", nil)
		var r mcpserver.PingResult
		remarshal(t, res.StructuredContent, &r)
		want := []mcpserver.DaemonStatus{
			{Host: "local", Socket: stuck, Approver: "unknown", Message: "no answer within 200ms",
				Next: "rootgated accepted the connection on " + stuck + " but did not answer; it may be stuck or overloaded. Ask the user to check it (`journalctl -u rootgate`)."},
			{Host: "older", Socket: older, Approver: "unknown", Message: `rootgated answered error: unknown field "cwd"`,
				Next: "rootgated on " + older + " is older than this rootgate mcp and does not know a field the message names: leave out that argument, or ask the user to upgrade rootgated."},
			{Host: "other", Socket: other, Approver: "unknown",
				Message: "daemon answered something that is not a rootgate response: invalid character 's' after top-level value",
				Next:    "Whatever listens on " + other + " does not speak rootgate's protocol. Ask the user to check that it is a rootgated request socket and that rootgate and rootgated are the same release."},
		}
		gb, _ := json.MarshalIndent(r.Daemons, "", " ")
		wb, _ := json.MarshalIndent(want, "", " ")
		if !res.IsError || string(gb) != string(wb) {
			t.Errorf("isError %v, got\n%s\nwant\n%s", res.IsError, gb, wb)
		}
	})
	t.Run("execute: an older daemon", func(t *testing.T) {
		res := call(t, cs, "execute", json.RawMessage(`{"argv":["ls"],"cwd":"/tmp","reason":"r","host":"older"}`))
		var r mcpserver.Result
		remarshal(t, res.StructuredContent, &r)
		if !res.IsError || r.Status != "error" || r.Message != `unknown field "cwd"` ||
			r.Next != "rootgated on "+older+" is older than this rootgate mcp and does not know a field the message names: leave out that argument, or ask the user to upgrade rootgated." {
			t.Errorf("%+v", r)
		}
	})
	t.Run("execute: another program", func(t *testing.T) {
		res := call(t, cs, "execute", json.RawMessage(`{"argv":["ls"],"reason":"r","host":"other"}`))
		var r mcpserver.Result
		remarshal(t, res.StructuredContent, &r)
		if !res.IsError || r.Status != "error" || r.ID != "" || !strings.HasPrefix(r.Next, "Whatever listens on "+other+" does not speak rootgate's protocol.") {
			t.Errorf("%+v", r)
		}
	})
}
