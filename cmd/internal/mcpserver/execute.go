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
	User         string            `json:"user,omitempty"`
}

// executeShape is the keys the execute tool's arguments may have: the json
// names of ExecuteInput's fields.
var executeShape = wire.ShapeOf(reflect.TypeFor[ExecuteInput]())

func ptr[T any](v T) *T { return &v }

// executeSchema is the execute tool's input schema. It is written out by
// hand, not inferred, so it can tell the model how to use each field. It
// has no top-level oneOf (some clients refuse every tool call of a
// session when a schema has one): parseExecute enforces "exactly one of
// argv and pipeline", with messages of its own.
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
				Description: `One command as a list of words (at least one), the program first: ["systemctl", "restart", "nginx"]. No shell is involved: no globs, redirections or variables; for those run ["sh", "-c", "..."] explicitly. Give either argv or pipeline, not both.`,
			},
			"pipeline": {
				Type: "array", MinItems: ptr(1), MaxItems: ptr(wire.MaxStages), Items: words,
				Description: `Several commands joined by pipes (at least one command), each a list of words (at least one): [["journalctl", "-u", "nginx"], ["tail", "-n", "50"]] runs journalctl -u nginx | tail -n 50. At most 16 stages. Give either argv or pipeline, not both.`,
			},
			"reason": {
				Type: "string", MinLength: ptr(1), MaxLength: ptr(wire.MaxReasonLen),
				Description: "Why you need this, in one or two honest sentences (not empty, at most 4096 bytes). A person reads it, next to the exact command, before deciding.",
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
				Description: "Run time limit in seconds, more than 0 and at most 31536000 (365 days); the run is killed when it passes. It can only lower the daemon's own limit (300 s by default). The time waiting for approval does not count.",
			},
			"forward_agent": {
				Type: "boolean", Default: json.RawMessage("false"),
				Description: "Lend the run the operator's SSH agent (for git or ssh as the user). Needs privileged: false, and an approver who offers an agent.",
			},
			"user": {
				Type: "string", MinLength: ptr(1), MaxLength: ptr(wire.MaxAccountLen),
				Description: "Run as this account instead of root, as sudo -u does: a user name such as \"postgres\", or \"#UID\" (not empty, at most 256 bytes). Only with privileged true (the default). The person, or a policy rule naming that account, must allow it; a rule for root does not.",
			},
			"host": {
				Type: "string", Enum: hosts, Default: json.RawMessage(`"local"`),
				Description: "Which machine's rootgated runs the command: \"local\" (the default) or a name the operator configured.",
			},
		},
		Required:             []string{"reason"},
		AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
	}
}

const executeDescription = `Run a command, or a pipeline of commands, through rootgate: as root by default, after the operator's policy or a person approves this exact request.

A person may see the request (command, reason, working directory, environment, stdin preview) and decide; that can take a minute. A denial is final for this request: do not retry it unchanged; tell the user what you wanted and ask how to proceed.

A call that is not decided and run within a bounded wait (25 s by default) answers with status pending and the call's id: the request goes on, and the wait tool waits for its result (cancel withdraws it). Do not send such a request again.

The result gives the status (ok, denied, timeout, error or pending), each stage's exit code, and the output: standard output of the last command and standard error of each. It is an error result when the request was denied, timed out or failed, or when the last command exited non-zero. Very long output is shown as its beginning and end with the cut marked; binary output as its size and SHA-256.`

// executeOutputSchema is the output schema of execute, wait and cancel.
func executeOutputSchema() *jsonschema.Schema {
	out := outputSchemaOf[Result]()
	out.Properties["status"].Enum = []any{wire.StatusOK, wire.StatusDenied, wire.StatusTimeout, wire.StatusError, StatusPending}
	out.Properties["phase"].Enum = []any{PhaseSent, PhaseApproval, PhaseRunning}
	return out
}

func executeTool(cfg *Config) *mcp.Tool {
	return &mcp.Tool{
		Name:         "execute",
		Title:        "Run a command with approval",
		Description:  executeDescription,
		InputSchema:  executeSchema(cfg),
		OutputSchema: executeOutputSchema(),
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
	if err := checkUser(fields); err != nil {
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

// checkUser refuses user with privileged false: such a run is the MCP
// server's own user, and a run as another account is a privileged one.
func checkUser(fields map[string]json.RawMessage) error {
	var user string
	var priv bool
	if json.Unmarshal(fields["user"], &user) == nil && user != "" &&
		json.Unmarshal(fields["privileged"], &priv) == nil && !priv {
		return &inputError{`user needs privileged true (or leave privileged out): privileged false runs as this MCP server's own user`}
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

	// The request belongs to the session from here on. Until this call
	// returns its id, cancelling the call withdraws it (the model never
	// learnt the id, so it could neither wait for it nor cancel it).
	c := h.sessionOf(req.Session).start(host, socket, out)
	if err := h.await(ctx, req, c, h.cfg.Wait); err != nil {
		c.cancel(errCallCanceled)
		return nil, err
	}
	return resultOf(h.result(c)), nil
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
	out.RunAs = in.User
	return out
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
		return fmt.Sprintf("This user may not use %s: %s. Ask the user to do so, then restart this MCP server from a new login session.", socket, client.PermissionHint(socket))
	case errors.As(err, &ce) && errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("No rootgated socket at %s. Ask the user to start rootgated (`sudo systemctl start rootgate.socket`, or `sudo rootgated --tty` in a terminal), then try again.", socket)
	case errors.As(err, &ce) && errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Sprintf("Nothing listens on %s: rootgated is not running. Ask the user to start it (`sudo systemctl start rootgate.socket`, or `sudo rootgated --tty`), then try again.", socket)
	case errors.As(err, &ce):
		return "Ask the user to check that rootgated is running and that this MCP server points at its socket (--socket or --host)."
	case errors.As(err, new(*client.NoAnswerError)):
		return fmt.Sprintf("rootgated took the connection on %s but did not answer in time (the request was withdrawn): the service may have failed. Ask the user to check `systemctl status rootgate` and `journalctl -u rootgate -p err`, then try again.", socket)
	case errors.As(err, new(*client.ClosedError)):
		return fmt.Sprintf("rootgated on %s closed the connection without an answer: the service may have failed to start, or stopped. Ask the user to check `systemctl status rootgate` and `journalctl -u rootgate -p err`, then try again.", socket)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("rootgated accepted the connection on %s but did not answer; it may be stuck or overloaded. Ask the user to check it (`journalctl -u rootgate`).", socket)
	case errors.Is(err, client.ErrNotResponse):
		return fmt.Sprintf("Whatever listens on %s does not speak rootgate's protocol. Ask the user to check that it is a rootgated request socket and that rootgate and rootgated are the same release.", socket)
	}
	return fmt.Sprintf("rootgated on %s did not answer; it may have stopped or restarted. Check with the ping tool, then try again.", socket)
}
