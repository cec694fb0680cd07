package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/wire"
)

// HandleInput is the arguments of the wait and cancel tools.
type HandleInput struct {
	ID   string  `json:"id"`
	Wait float64 `json:"wait,omitempty"`
}

var handleShape = wire.ShapeOf(reflect.TypeFor[HandleInput]())

func waitTool(cfg *Config) *mcp.Tool {
	return &mcp.Tool{
		Name:  "wait",
		Title: "Wait for a pending execute call",
		Description: fmt.Sprintf("Wait for a call that execute answered with status pending (it waits for a person's decision, or runs), and return its result: "+
			"the same result execute gives, or pending again after at most %s (or the wait given). "+
			"The call goes on whatever happens to this tool call: when your client gives up on it, call wait again. "+
			"Returns at once for a finished call, so it also shows a result again.", cfg.Wait),
		InputSchema: &jsonschema.Schema{
			Type: "object",
			Properties: map[string]*jsonschema.Schema{
				"id":   {Type: "string", MinLength: ptr(1), Description: "The call's id, as execute returned it (not empty)."},
				"wait": {Type: "number", ExclusiveMinimum: ptr(0.0), Maximum: ptr(MaxWait.Seconds()), Description: fmt.Sprintf("Seconds to wait at most before answering pending, more than 0 and at most %g; default %g.", MaxWait.Seconds(), cfg.Wait.Seconds())},
			},
			Required:             []string{"id"},
			AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		},
		OutputSchema: executeOutputSchema(),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}
}

func cancelTool() *mcp.Tool {
	return &mcp.Tool{
		Name:  "cancel",
		Title: "Cancel a pending execute call",
		Description: "Cancel a call that execute answered with status pending: a prompt is withdrawn, a running command is killed with all its processes. " +
			"Returns the call's final result (a call that finished already is left as it was).",
		InputSchema: &jsonschema.Schema{
			Type: "object",
			Properties: map[string]*jsonschema.Schema{
				"id": {Type: "string", MinLength: ptr(1), Description: "The call's id, as execute returned it (not empty)."},
			},
			Required:             []string{"id"},
			AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		},
		OutputSchema: executeOutputSchema(),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}
}

// wait handles a call of the wait tool. Its cancellation, or its client
// giving up, leaves the call going.
func (h *handler) wait(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in HandleInput
	if err := parseArgs(req.Params.Arguments, h.waitResolved, handleShape, &in); err != nil {
		return resultOf(handleInputResult(err.Error(), "wait")), nil
	}
	c := h.sessionOf(req.Session).get(in.ID)
	if c == nil {
		return resultOf(handleInputResult(unknownCall(in.ID), "wait")), nil
	}
	d := h.cfg.Wait
	if in.Wait > 0 {
		d = time.Duration(in.Wait * float64(time.Second))
	}
	if err := h.await(ctx, req, c, d); err != nil {
		return nil, err
	}
	return resultOf(h.result(c)), nil
}

// cancelWithin bounds how long cancel waits for the call to end.
const cancelWithin = 10 * time.Second

// cancel handles a call of the cancel tool.
func (h *handler) cancelCall(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in HandleInput
	if err := parseArgs(req.Params.Arguments, h.cancelResolved, handleShape, &in); err != nil {
		return resultOf(handleInputResult(err.Error(), "cancel")), nil
	}
	c := h.sessionOf(req.Session).get(in.ID)
	if c == nil {
		return resultOf(handleInputResult(unknownCall(in.ID), "cancel")), nil
	}
	c.cancel(errCancelled)
	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(cancelWithin):
	}
	return resultOf(h.result(c)), nil
}

func handleInputResult(msg, tool string) *Result {
	return &Result{Status: wire.StatusError, Message: msg,
		Next: "Nothing was done. Fix the arguments as the message says and call " + tool + " again."}
}

// parseArgs checks raw arguments against the tool's schema and decodes
// them into v, with exact key names.
func parseArgs(raw json.RawMessage, resolved *jsonschema.Resolved, shape *wire.Shape, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		raw = json.RawMessage("{}")
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return errors.New("invalid arguments: not valid JSON")
	}
	if err := resolved.Validate(generic); err != nil {
		return errors.New("invalid arguments: " + strings.TrimPrefix(err.Error(), "validating root: "))
	}
	if err := wire.CheckKeys(raw, shape); err != nil {
		return errors.New("invalid arguments: " + err.Error())
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New("invalid arguments: " + err.Error())
	}
	return nil
}

// outputSchemaOf infers T's output schema and makes it portable.
func outputSchemaOf[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic("mcpserver: output schema: " + err.Error()) // a fixed type: cannot fail at run time
	}
	portable(s)
	return s
}

// portable rewrites a schema for clients that accept only the simplest
// forms: a single "type" per schema, never a list such as ["null",
// "integer"] (nothing this server sends is ever null).
func portable(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) > 0 {
		var keep []string
		for _, t := range s.Types {
			if t != "null" {
				keep = append(keep, t)
			}
		}
		if len(keep) == 1 {
			s.Type, s.Types = keep[0], nil
		} else {
			s.Types = keep
		}
	}
	for _, p := range s.Properties {
		portable(p)
	}
	portable(s.Items)
	portable(s.AdditionalProperties)
}
