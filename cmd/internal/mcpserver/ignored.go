package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// IgnoredArguments are the arguments some MCP clients add to every tool
// call on their own, which mean nothing to rootgate and change nothing
// about a request: Gemini CLI adds "wait_for_previous" (a boolean telling
// its own scheduler to run the call after the previous ones) to every
// tool's schema and passes it on when its model sets it. A tool call drops
// them, with a boolean value, before its arguments are checked; any other
// argument a tool does not know is refused.
var IgnoredArguments = []string{"wait_for_previous"}

// withoutIgnored returns raw without its top-level members named in
// IgnoredArguments whose value is true or false. Everything else is kept
// byte for byte (a repeated key, an escape in a name), so the checks that
// follow see what the client sent; raw that is not a JSON object comes
// back unchanged, for those checks to refuse.
func withoutIgnored(raw json.RawMessage) json.RawMessage {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return raw
	}
	var kept [][]byte
	dropped := false
	for dec.More() {
		start := dec.InputOffset()
		key, err := dec.Token()
		if err != nil {
			return raw
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return raw
		}
		member := bytes.TrimLeft(raw[start:dec.InputOffset()], " \t\r\n,")
		name, _ := key.(string)
		if v := string(value); slices.Contains(IgnoredArguments, name) && (v == "true" || v == "false") {
			dropped = true
			continue
		}
		kept = append(kept, member)
	}
	if t, err := dec.Token(); err != nil || t != json.Delim('}') || dec.More() || !dropped {
		return raw
	}
	return json.RawMessage("{" + string(bytes.Join(kept, []byte(","))) + "}")
}

// ignoring wraps a tool handler so that it never sees IgnoredArguments.
func ignoring(h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if req.Params != nil && len(req.Params.Arguments) > 0 {
			req.Params.Arguments = withoutIgnored(req.Params.Arguments)
		}
		return h(ctx, req)
	}
}
