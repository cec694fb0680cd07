package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/wire"
)

// ExecuteInput is the execute tool's arguments.
type ExecuteInput struct {
	Argv         []string          `json:"argv,omitempty"`
	Pipeline     [][]string        `json:"pipeline,omitempty"`
	Reason       string            `json:"reason"`
	Privileged   *bool             `json:"privileged,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	Cwd          string            `json:"cwd,omitempty"`
	Stdin        string            `json:"stdin,omitempty"`
	Timeout      float64           `json:"timeout,omitempty"`
	ForwardAgent bool              `json:"forward_agent,omitempty"`
	Host         string            `json:"host,omitempty"`
}

// executeShape is the keys the execute tool's arguments may have: the json
// names of ExecuteInput's fields.
var executeShape = wire.ShapeOf(reflect.TypeFor[ExecuteInput]())

func ptr[T any](v T) *T { return &v }

// executeSchema is the execute tool's input schema. It is written out by
// hand, not inferred, so it can say "exactly one of argv and pipeline" and
// tell the model how to use each field.
func executeSchema(cfg *Config) *jsonschema.Schema {
	words := &jsonschema.Schema{Type: "array", MinItems: ptr(1), Items: &jsonschema.Schema{Type: "string"}}
	hosts := make([]any, 0, len(cfg.Hosts)+1)
	for _, h := range cfg.hostNames() {
		hosts = append(hosts, h)
	}
	return &jsonschema.Schema{
		Type: "object",
		Properties: map[string]*jsonschema.Schema{
			"argv": {
				Type: "array", MinItems: ptr(1), Items: &jsonschema.Schema{Type: "string"},
				Description: `One command as a list of words, the program first: ["systemctl", "restart", "nginx"]. No shell is involved: no globs, redirections or variables; for those run ["sh", "-c", "..."] explicitly. Give either argv or pipeline, not both.`,
			},
			"pipeline": {
				Type: "array", MinItems: ptr(1), MaxItems: ptr(wire.MaxStages), Items: words,
				Description: `Several commands joined by pipes, each a list of words: [["journalctl", "-u", "nginx"], ["tail", "-n", "50"]] runs journalctl -u nginx | tail -n 50. At most 16 stages. Give either argv or pipeline, not both.`,
			},
			"reason": {
				Type: "string", MinLength: ptr(1), MaxLength: ptr(wire.MaxReasonLen),
				Description: "Why you need this, in one or two honest sentences. A person reads it, next to the exact command, before deciding.",
			},
			"privileged": {
				Type: "boolean", Default: json.RawMessage("true"),
				Description: "true (the default) runs as root; false runs as the user this MCP server runs as. Ask for root only when the command needs it.",
			},
			"env": {
				Type: "object", AdditionalProperties: &jsonschema.Schema{Type: "string"},
				Description: "Environment variables for the run, e.g. {\"DEBIAN_FRONTEND\": \"noninteractive\"}. The run starts from a clean environment; only allowlisted names (LANG, LC_*, TZ, TERM, DEBIAN_FRONTEND, proxies and a few more) are accepted, never PATH or LD_*.",
			},
			"cwd": {
				Type:        "string",
				Description: "Working directory, an absolute path to an existing directory. Default /.",
			},
			"stdin": {
				Type:        "string",
				Description: "Text fed to the first command's standard input (otherwise it reads nothing). The approver sees its size and a preview.",
			},
			"timeout": {
				Type: "number", ExclusiveMinimum: ptr(0.0), Maximum: ptr(float64(wire.MaxTimeoutSeconds)),
				Description: "Run time limit in seconds; the run is killed when it passes. It can only lower the daemon's own limit (300 s by default). The time waiting for approval does not count.",
			},
			"forward_agent": {
				Type: "boolean", Default: json.RawMessage("false"),
				Description: "Lend the run the operator's SSH agent (for git or ssh as the user). Needs privileged: false, and an approver who offers an agent.",
			},
			"host": {
				Type: "string", Enum: hosts, Default: json.RawMessage(`"local"`),
				Description: "Which machine's rootgated runs the command: \"local\" (the default) or a name the operator configured.",
			},
		},
		Required:             []string{"reason"},
		OneOf:                []*jsonschema.Schema{{Required: []string{"argv"}}, {Required: []string{"pipeline"}}},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
	}
}

const executeDescription = `Run a command, or a pipeline of commands, through rootgate: as root by default, after the operator's policy or a person approves this exact request.

A person may see the request (command, reason, working directory, environment, stdin preview) and decide; that can take a minute. A denial is final for this request: do not retry it unchanged; tell the user what you wanted and ask how to proceed.

The result gives the status (ok, denied, timeout or error), each stage's exit code, and the output: standard output of the last command and standard error of each. It is an error result when the request was denied, timed out or failed, or when the last command exited non-zero. Very long output is shown as its beginning and end with the cut marked; binary output as its size and SHA-256.`

func executeTool(cfg *Config) *mcp.Tool {
	out, err := jsonschema.For[Result](nil)
	if err != nil {
		panic("mcpserver: result schema: " + err.Error()) // a fixed type: cannot fail at run time
	}
	out.Properties["status"].Enum = []any{wire.StatusOK, wire.StatusDenied, wire.StatusTimeout, wire.StatusError}
	return &mcp.Tool{
		Name:         "execute",
		Title:        "Run a command with approval",
		Description:  executeDescription,
		InputSchema:  executeSchema(cfg),
		OutputSchema: out,
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(false)},
	}
}

// inputError is a problem with the tool's arguments, worded for the model.
type inputError struct{ msg string }

func (e *inputError) Error() string { return e.msg }

// parseExecute checks raw arguments and decodes them. The common mistakes
// get their own messages; anything else the schema refuses is reported
// with the schema's words.
func parseExecute(raw json.RawMessage, resolved *jsonschema.Resolved) (*ExecuteInput, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil || fields == nil {
		return nil, &inputError{"the arguments must be a JSON object"}
	}
	isNull := func(name string) bool { return string(bytes.TrimSpace(fields[name])) == "null" }
	_, hasArgv := fields["argv"]
	_, hasPipeline := fields["pipeline"]
	switch {
	case hasArgv && isNull("argv"), hasPipeline && isNull("pipeline"):
		return nil, &inputError{`argv and pipeline must not be null: give argv as a list of strings, e.g. {"argv": ["ls", "-l", "/var/log"]}, or pipeline as a list of such lists`}
	case hasArgv && hasPipeline:
		return nil, &inputError{`give either argv (one command) or pipeline (commands joined by pipes), not both: for one command use {"argv": ["ls", "-l"]}; for a pipeline put every stage in pipeline: {"pipeline": [["ls", "-l"], ["wc", "-l"]]}`}
	case !hasArgv && !hasPipeline:
		return nil, &inputError{`no command given: set argv to the command as a list of words, e.g. {"argv": ["systemctl", "status", "nginx"]}, or pipeline to a list of such lists`}
	case hasArgv && string(bytes.Join(bytes.Fields(fields["argv"]), nil)) == "[]":
		return nil, &inputError{`argv is empty: it must hold at least the program to run, e.g. ["id"]`}
	}
	if r, ok := fields["reason"]; !ok || isNull("reason") || string(bytes.TrimSpace(r)) == `""` {
		return nil, &inputError{"reason is missing: say in a sentence or two what the command does and why you need it; the approver reads it"}
	}
	if err := checkEarly(fields); err != nil {
		return nil, err
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, &inputError{"the arguments are not valid JSON"}
	}
	if err := resolved.Validate(v); err != nil {
		return nil, &inputError{"invalid arguments: " + cutValues(strings.TrimPrefix(err.Error(), "validating root: "), v) + " (see the input schema's descriptions)"}
	}
	// The schema saw the arguments as a generic value: a repeated key, or
	// an escaped lone surrogate (which decodes to U+FFFD), it cannot see.
	if err := wire.CheckKeys(raw, executeShape); err != nil {
		return nil, &inputError{"invalid arguments: " + err.Error()}
	}
	var in ExecuteInput
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, &inputError{"invalid arguments: " + err.Error()}
	}
	return &in, nil
}

// checkEarly gives the arguments whose schema errors would mislead their
// own messages: a reason of blanks only (the schema's minLength passes
// it), and a timeout out of range (the schema's words print a rational
// such as 0/1).
func checkEarly(fields map[string]json.RawMessage) error {
	var reason string
	if json.Unmarshal(fields["reason"], &reason) == nil && strings.TrimSpace(reason) == "" {
		return &inputError{"reason is blank (only spaces or line breaks): say in a sentence or two what the command does and why you need it; the approver reads it"}
	}
	raw, ok := fields["timeout"]
	if !ok {
		return nil
	}
	var f float64
	if json.Unmarshal(raw, &f) != nil {
		return nil // not a number: the schema says so
	}
	switch {
	case f <= 0:
		return &inputError{fmt.Sprintf("timeout must be more than 0 seconds (got %s); leave it out for rootgated's own limit", strconv.FormatFloat(f, 'g', -1, 64))}
	case f > wire.MaxTimeoutSeconds:
		return &inputError{fmt.Sprintf("timeout must be at most %d seconds (a year; got %s); rootgated lowers it to its own limit (300 s by default) anyway, so leave it out for that limit",
			wire.MaxTimeoutSeconds, strconv.FormatFloat(f, 'g', -1, 64))}
	}
	return nil
}

// maxEchoed is how many characters of a value an error message repeats.
const maxEchoed = 64

// cutValues shortens, in a schema error message, every string of the
// arguments v longer than maxEchoed characters: its head, and how long it
// is.
func cutValues(msg string, v any) string {
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			if utf8.RuneCountInString(v) > maxEchoed && strings.Contains(msg, v) {
				head := []rune(v)[:maxEchoed]
				msg = strings.ReplaceAll(msg, v, fmt.Sprintf("%s… (%d characters in all)", string(head), utf8.RuneCountInString(v)))
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				walk(k)
				walk(e)
			}
		}
	}
	walk(v)
	return msg
}

// execute handles a call of the execute tool.
func (h *handler) execute(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	in, err := parseExecute(req.Params.Arguments, h.executeResolved)
	if err != nil {
		return resultOf(inputResult(err)), nil
	}
	host := in.Host
	if host == "" {
		host = LocalHost
	}
	socket, err := h.cfg.socketOf(host)
	if err != nil {
		return resultOf(inputResult(&inputError{fmt.Sprintf("unknown host %q: use one of %s", host, strings.Join(h.cfg.hostNames(), ", "))})), nil
	}
	out := h.buildRequest(req, in)

	stop := h.progress(ctx, req, host)
	resp, err := client.Do(ctx, socket, out)
	stop()
	if err != nil {
		if ctx.Err() != nil {
			// The call was cancelled or the client left: the connection is
			// closed, so the daemon withdrew the prompt or killed the run.
			return nil, ctx.Err()
		}
		return resultOf(connectionResult(host, socket, err)), nil
	}
	r := render(host, socket, out.Pipeline, resp, h.cfg.MaxText)
	if resp.Code == wire.CodeEnvNotAllowed {
		r.Next = envHint(in.Env)
	}
	return resultOf(r), nil
}

// buildRequest turns the arguments into a wire request.
func (h *handler) buildRequest(req *mcp.CallToolRequest, in *ExecuteInput) *wire.Outgoing {
	// The session names the agent to the approver: the client's own name,
	// when the daemon would accept it as a session.
	session := "mcp"
	if p := req.Session.InitializeParams(); p != nil && p.ClientInfo != nil && p.ClientInfo.Name != "" {
		if s := "mcp: " + p.ClientInfo.Name; utf8.RuneCountInString(s) <= wire.MaxSessionLen && termsafe.String(s, false) {
			session = s
		}
	}
	out := client.NewRequest(session)
	if in.Argv != nil {
		out.Pipeline = [][]string{in.Argv}
	} else {
		out.Pipeline = in.Pipeline
	}
	out.Reason = in.Reason
	priv := in.Privileged == nil || *in.Privileged
	out.Privileged = &priv
	out.Env = in.Env
	out.Cwd = in.Cwd
	if in.Stdin != "" {
		out.Stdin = []byte(in.Stdin)
	}
	out.Timeout = in.Timeout
	out.ForwardAgent = in.ForwardAgent
	return out
}

// progress sends progress notifications while a call waits, if the client
// asked for them with a progress token. The daemon says nothing until its
// answer, so the messages can only tell the time waited. The returned
// function stops them.
func (h *handler) progress(ctx context.Context, req *mcp.CallToolRequest, host string) (stop func()) {
	token := req.Params.GetProgressToken()
	if token == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	start := time.Now()
	notify := func(msg string) {
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token,
			Progress:      time.Since(start).Seconds(),
			Message:       msg,
		})
	}
	go func() {
		defer close(done)
		notify(fmt.Sprintf("sent to rootgated (host %s): waiting for approval, then for the run to finish", host))
		t := time.NewTicker(h.cfg.ProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				notify(fmt.Sprintf("%s elapsed: waiting for approval or for the run to finish (rootgated does not say which until it answers)",
					time.Since(start).Round(time.Second)))
			}
		}
	}()
	return func() { cancel(); <-done }
}

// connectionResult explains a failure to reach the daemon or to read its
// answer.
// No id: the daemon never saw the request.
func connectionResult(host, socket string, err error) *Result {
	r := &Result{Status: wire.StatusError, Host: host, Message: err.Error()}
	r.Next = connectionHint(host, socket, err)
	return r
}

func connectionHint(host, socket string, err error) string {
	var ce *client.ConnectError
	switch {
	case host != "" && host != LocalHost && errors.As(err, &ce) && (errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED)):
		// A --host socket is most often a forward (ssh -L) to another
		// machine: starting the local daemon would not help.
		return fmt.Sprintf("Host %s's socket %s does not answer: the forward to that machine (e.g. its ssh -L) is down, or rootgated there is not running. Ask the user to restore the forward or start rootgated on %s, then check with ping.", host, socket, host)
	case errors.As(err, &ce) && errors.Is(err, os.ErrPermission):
		return fmt.Sprintf("This user may not use %s: only root and members of group rootgate may. Ask the user to run `sudo usermod -aG rootgate $USER`, then restart this MCP server from a new login session.", socket)
	case errors.As(err, &ce) && errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("No rootgated socket at %s. Ask the user to start rootgated (`sudo systemctl start rootgate.socket`, or `sudo rootgated --tty` in a terminal), then try again.", socket)
	case errors.As(err, &ce) && errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("Nothing listens on %s: rootgated is not running. Ask the user to start it (`sudo systemctl start rootgate.socket`, or `sudo rootgated --tty`), then try again.", socket)
	case errors.As(err, &ce):
		return "Ask the user to check that rootgated is running and that this MCP server points at its socket (--socket or --host)."
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("rootgated accepted the connection on %s but did not answer; it may be stuck or overloaded. Ask the user to check it (`journalctl -u rootgate`).", socket)
	case errors.Is(err, client.ErrNotResponse):
		return fmt.Sprintf("Whatever listens on %s does not speak rootgate's protocol. Ask the user to check that it is a rootgated request socket and that rootgate and rootgated are the same release.", socket)
	}
	return fmt.Sprintf("rootgated on %s did not answer; it may have stopped or restarted. Check with the ping tool, then try again.", socket)
}
