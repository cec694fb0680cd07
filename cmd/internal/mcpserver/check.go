package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/wire"
)

// CheckInput is the check tool's arguments: a request as execute takes
// it, without what only matters to a person or a run.
type CheckInput struct {
	Argv         []string          `json:"argv,omitempty"`
	Pipeline     [][]string        `json:"pipeline,omitempty"`
	Privileged   *bool             `json:"privileged,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Cwd          string            `json:"cwd,omitempty"`
	ForwardAgent bool              `json:"forward_agent,omitempty"`
	Host         string            `json:"host,omitempty"`
	User         string            `json:"user,omitempty"`
}

var checkShape = wire.ShapeOf(reflect.TypeFor[CheckInput]())

// CheckResult is the check tool's structured result.
type CheckResult struct {
	Status    string     `json:"status" jsonschema:"ok: rootgated answered the check; error: it could not be asked, or it refused the request before its policy (see message)"`
	Check     string     `json:"check,omitempty" jsonschema:"allow: execute would run this exact request without asking anyone; ask: a person would be asked; deny: the policy refuses it"`
	Host      string     `json:"host,omitempty" jsonschema:"the host whose rootgated was asked"`
	DecidedBy *DecidedBy `json:"decided_by,omitempty" jsonschema:"the policy rule that matched, when one did, or the standing grant that allows the request"`
	Message   string     `json:"message,omitempty" jsonschema:"rootgated's words"`
	Next      string     `json:"next,omitempty" jsonschema:"what to do next"`
	Pipeline  [][]string `json:"pipeline,omitempty" jsonschema:"the commands checked"`
}

const checkDescription = `Ask rootgated whether it would run a command (or pipeline) without asking anyone (its policy, or a standing grant a person gave this user), put it to a person, or deny it, for this MCP server's own user. Nothing is shown to the operator and nothing runs.

Use it to prefer forms the operator has pre-approved: a request runs without asking only when it matches an allow rule exactly (the same command, arguments, privileged, user, env), or a standing grant more exactly still (also the same cwd, and no stdin), so check the exact form you will send to execute. The answer is for this moment's policy and grants and this user; the person's decision, when one is asked, is theirs.`

func checkTool(cfg *Config) *mcp.Tool {
	exec := executeSchema(cfg)
	props := map[string]*jsonschema.Schema{}
	for _, name := range []string{"argv", "pipeline", "privileged", "env", "cwd", "forward_agent", "host", "user"} {
		props[name] = exec.Properties[name]
	}
	out := outputSchemaOf[CheckResult]()
	out.Properties["status"].Enum = []any{wire.StatusOK, wire.StatusError}
	out.Properties["check"].Enum = []any{wire.CheckAllow, wire.CheckAsk, wire.CheckDeny}
	return &mcp.Tool{
		Name:        "check",
		Title:       "What the policy would do with a request",
		Description: checkDescription,
		InputSchema: &jsonschema.Schema{
			Type:                 "object",
			Properties:           props,
			AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		},
		OutputSchema: out,
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}
}

// parseCheck checks raw arguments and decodes them.
func parseCheck(raw json.RawMessage, resolved *jsonschema.Resolved) (*CheckInput, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, &inputError{"the arguments must be a JSON object"}
	}
	_, hasArgv := fields["argv"]
	_, hasPipeline := fields["pipeline"]
	switch {
	case hasArgv && hasPipeline:
		return nil, &inputError{`give either argv (one command) or pipeline (commands joined by pipes), not both`}
	case !hasArgv && !hasPipeline:
		return nil, &inputError{`no command given: set argv to the command as a list of words, e.g. {"argv": ["systemctl", "status", "nginx"]}, or pipeline to a list of such lists`}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, &inputError{"the arguments are not valid JSON"}
	}
	if err := resolved.Validate(v); err != nil {
		return nil, &inputError{"invalid arguments: " + cutValues(strings.TrimPrefix(err.Error(), "validating root: "), v) + " (see the input schema's descriptions)"}
	}
	if err := checkUser(fields); err != nil {
		return nil, err
	}
	if err := wire.CheckKeys(raw, checkShape); err != nil {
		return nil, &inputError{"invalid arguments: " + err.Error()}
	}
	var in CheckInput
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, &inputError{"invalid arguments: " + err.Error()}
	}
	return &in, nil
}

// check handles a call of the check tool.
func (h *handler) check(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	in, err := parseCheck(req.Params.Arguments, h.checkResolved)
	if err != nil {
		return checkResultOf(&CheckResult{Status: wire.StatusError, Message: err.Error(),
			Next: "Nothing was sent to rootgated. Fix the arguments as the message says and call check again."}), nil
	}
	host := in.Host
	if host == "" {
		host = LocalHost
	}
	socket, err := h.cfg.socketOf(host)
	if err != nil {
		return checkResultOf(&CheckResult{Status: wire.StatusError, Message: fmt.Sprintf("unknown host %q: use one of %s", host, strings.Join(h.cfg.hostNames(), ", "))}), nil
	}
	ex := &ExecuteInput{Argv: in.Argv, Pipeline: in.Pipeline, Privileged: in.Privileged, Env: in.Env, Cwd: in.Cwd, ForwardAgent: in.ForwardAgent, User: in.User}
	out := h.buildRequest(req, ex)
	out.Check = true
	ctx, cancel := context.WithTimeout(ctx, h.cfg.PingTimeout)
	defer cancel()
	resp, err := client.Do(ctx, socket, out)
	if err != nil {
		if ctx.Err() != nil && ctx.Err() != context.DeadlineExceeded {
			return nil, ctx.Err()
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s", h.cfg.PingTimeout)
		}
		return checkResultOf(&CheckResult{Status: wire.StatusError, Host: host, Pipeline: out.Pipeline, Message: err.Error(), Next: connectionHint(host, socket, err)}), nil
	}
	r := &CheckResult{Status: wire.StatusOK, Check: resp.Check, Host: host, DecidedBy: decidedBy(resp.DecidedBy), Message: resp.Message, Pipeline: out.Pipeline}
	switch {
	case resp.Status != wire.StatusOK:
		r.Status = wire.StatusError
		r.Check = ""
		r.Next = errorHint(host, socket, resp)
		if resp.Code == wire.CodeEnvNotAllowed {
			r.Next = envHint(in.Env)
		}
	case resp.Check == wire.CheckAllow && resp.DecidedBy != nil && resp.DecidedBy.By == wire.DecidedByGrant:
		r.Next = "execute runs this without asking anyone while the standing grant lasts (it may be revoked sooner), sent in exactly this form (same command, arguments, privileged, user, env, cwd and host, and no stdin)."
	case resp.Check == wire.CheckAllow:
		r.Next = "execute runs this without asking anyone, sent in exactly this form (same command, arguments, privileged, user, env and host)."
	case resp.Check == wire.CheckAsk:
		r.Next = "execute would put this to a person, who may take a while to answer. If a form the policy allows does the job, prefer it; otherwise send it with an honest reason."
	case resp.Check == wire.CheckDeny:
		r.Next = "Do not send this, and do not try to reach the same effect another way (through sh -c, another program or a script): the operator's policy forbids it. Tell the user what you wanted to do and ask how to proceed."
	default:
		r.Status = wire.StatusError
		r.Message = "rootgated did not answer the check: it may be older than this rootgate mcp"
		r.Next = fmt.Sprintf("rootgated on %s (version %q) does not know check requests; ask the user to upgrade it. Nothing was asked or run.", socket, resp.Version)
	}
	return checkResultOf(r), nil
}

// checkResultOf wraps a check result as a tool result.
func checkResultOf(r *CheckResult) *mcp.CallToolResult {
	raw, err := json.Marshal(r)
	if err != nil {
		panic("mcpserver: check result does not marshal: " + err.Error()) // plain fields only
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: r.text()}},
		StructuredContent: json.RawMessage(raw),
		IsError:           r.Status != wire.StatusOK,
	}
}

// text renders a check's result for a model to read.
func (r *CheckResult) text() string {
	var sb strings.Builder
	if r.Status == wire.StatusOK {
		fmt.Fprintf(&sb, "check: %s: %s\n", r.Check, r.Message)
	} else {
		fmt.Fprintf(&sb, "status: error: %s\n", r.Message)
	}
	if r.Host != "" {
		fmt.Fprintf(&sb, "host: %s\n", r.Host)
	}
	switch {
	case r.DecidedBy == nil:
	case r.DecidedBy.By == wire.DecidedByGrant:
		fmt.Fprintf(&sb, "allowed by: %s\n", r.DecidedBy.text())
	default:
		fmt.Fprintf(&sb, "matching rule: %s\n", r.DecidedBy.text())
	}
	if r.Next != "" {
		fmt.Fprintf(&sb, "next: %s\n", r.Next)
	}
	return sb.String()
}
