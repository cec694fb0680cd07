package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/wire"
)

// PingResult is the ping tool's structured result.
type PingResult struct {
	Daemons []DaemonStatus `json:"daemons" jsonschema:"one entry per host asked; empty when the arguments were refused"`
	Message string         `json:"message,omitempty" jsonschema:"why the arguments were refused (nothing was asked)"`
	Next    string         `json:"next,omitempty" jsonschema:"what to do about it"`
}

// DaemonStatus is what a ping learnt about one daemon.
type DaemonStatus struct {
	Host      string `json:"host" jsonschema:"the host name, as execute's host argument takes it"`
	Socket    string `json:"socket" jsonschema:"the request socket asked"`
	Reachable bool   `json:"reachable" jsonschema:"rootgated answered the ping"`
	Version   string `json:"version,omitempty" jsonschema:"rootgated's version, when it answered"`
	Approver  string `json:"approver" jsonschema:"yes: a person can be asked about this server's requests now; no: no approver is attached, so anything the policy does not allow is denied; unknown: the daemon does not say (older rootgated, or not reachable)"`
	Message   string `json:"message,omitempty" jsonschema:"why it is not reachable"`
	Next      string `json:"next,omitempty" jsonschema:"what to do about it"`
}

func pingTool(cfg *Config) *mcp.Tool {
	hosts := make([]any, 0, len(cfg.Hosts)+1)
	for _, h := range cfg.hostNames() {
		hosts = append(hosts, h)
	}
	out, err := jsonschema.For[PingResult](nil)
	if err != nil {
		panic("mcpserver: ping schema: " + err.Error()) // a fixed type: cannot fail at run time
	}
	return &mcp.Tool{
		Name:  "ping",
		Title: "Check that rootgated answers",
		Description: "Check whether rootgated is reachable (on one host, or on every configured host when host is left out) and which version it runs. " +
			"Nothing is shown to the operator and nothing runs. It also tells whether an approver is attached who could be asked about your requests.",
		InputSchema: &jsonschema.Schema{
			Type: "object",
			Properties: map[string]*jsonschema.Schema{
				"host": {Type: "string", Enum: hosts, Description: "The host to check; leave out to check all of them."},
			},
			AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		},
		OutputSchema: out,
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}
}

// ping handles a call of the ping tool.
func (h *handler) ping(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct {
		Host *string `json:"host"`
	}
	if a := req.Params.Arguments; len(a) > 0 {
		var v any
		err := json.Unmarshal(a, &v)
		if err == nil {
			err = h.pingResolved.Validate(v)
		}
		if err == nil {
			err = json.Unmarshal(a, &in)
		}
		if err != nil {
			res := PingResult{Daemons: []DaemonStatus{},
				Message: "invalid arguments: " + cutValues(strings.TrimPrefix(err.Error(), "validating root: "), v),
				Next:    fmt.Sprintf("Nothing was asked. Call ping with {} for every host, or with {\"host\": one of %s}.", strings.Join(h.cfg.hostNames(), ", "))}
			raw, err := json.Marshal(&res)
			if err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{IsError: true, StructuredContent: json.RawMessage(raw), Content: []mcp.Content{&mcp.TextContent{
				Text: "status: error: " + res.Message + "\nnext: " + res.Next + "\n",
			}}}, nil
		}
	}
	hosts := h.cfg.hostNames()
	if in.Host != nil {
		hosts = []string{*in.Host}
	}
	var res PingResult
	for _, host := range hosts {
		socket, _ := h.cfg.socketOf(host) // the schema admits known hosts only
		res.Daemons = append(res.Daemons, pingOne(ctx, host, socket, h.cfg.PingTimeout))
	}
	raw, err := json.Marshal(&res)
	if err != nil {
		return nil, err
	}
	text, failed := res.text()
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(raw), IsError: failed}, nil
}

// text renders a ping's result for the model; failed is true when a
// daemon could not be reached.
func (res *PingResult) text() (text string, failed bool) {
	var sb strings.Builder
	for _, d := range res.Daemons {
		if d.Reachable {
			fmt.Fprintf(&sb, "%s: rootgated %s answers on %s; approver attached: %s\n", d.Host, d.Version, d.Socket, d.Approver)
			if d.Next != "" {
				fmt.Fprintf(&sb, "next: %s\n", d.Next)
			}
		} else {
			failed = true
			fmt.Fprintf(&sb, "%s: not reachable on %s: %s\nnext: %s\n", d.Host, d.Socket, d.Message, d.Next)
		}
	}
	return sb.String(), failed
}

func pingOne(ctx context.Context, host, socket string, timeout time.Duration) DaemonStatus {
	d := DaemonStatus{Host: host, Socket: socket, Approver: "unknown"}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := client.NewRequest("mcp")
	req.Action = wire.ActionPing
	resp, err := client.Do(ctx, socket, req)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s", timeout)
			d.Message = err.Error()
			d.Next = connectionHint(host, socket, context.DeadlineExceeded)
			return d
		}
		d.Message = err.Error()
		d.Next = connectionHint(host, socket, err)
		return d
	}
	if resp.Status != wire.StatusOK {
		d.Message = fmt.Sprintf("rootgated answered %s: %s", resp.Status, resp.Message)
		d.Next = errorHint(host, socket, resp)
		return d
	}
	d.Reachable = true
	d.Version = resp.Version
	switch {
	case resp.Approver == nil:
	case *resp.Approver:
		d.Approver = "yes"
	default:
		d.Approver = "no"
		d.Next = "No approver is attached: requests the policy does not allow will be denied. Ask the user to run `sudo rootgate approve` in a terminal before such a request."
	}
	return d
}
