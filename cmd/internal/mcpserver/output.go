package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/wire"
)

// The text budget (Config.MaxText) is shared by the whole result: every
// stream gets an equal share, and a stream shorter than its share leaves
// the rest to the others. A stream over its share keeps whole lines from
// its beginning (up to half the share) and its end (the rest), and a
// marker between them says what was cut and how to read it with the
// output tool. A line longer than its half is cut inside, at a character
// boundary.

// shares divides budget among streams of the given sizes: smallest first,
// each gets what it needs up to an equal share of what is left.
func shares(sizes []int, budget int) []int {
	order := make([]int, len(sizes))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return sizes[a] - sizes[b] })
	out := make([]int, len(sizes))
	for n, i := range order {
		share := budget / (len(order) - n)
		out[i] = min(sizes[i], share)
		budget -= out[i]
	}
	return out
}

// textSize is how much of the budget b could use: nothing when it is
// binary, which is only summarised.
func textSize(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	if _, binary := sniff(b); binary {
		return 0
	}
	return len(b)
}

// streamRef names a stream in the output tool's arguments.
type streamRef struct {
	id    string
	stage int // 0 for stdout, else the stage (1-based) whose stderr it is
}

func (r streamRef) args(unit string, from, count int) string {
	s := fmt.Sprintf(`{"id": %q, "stream": "stdout"`, r.id)
	if r.stage > 0 {
		s = fmt.Sprintf(`{"id": %q, "stream": "stderr", "stage": %d`, r.id, r.stage)
	}
	if unit == "bytes" {
		s += `, "unit": "bytes"`
	}
	return s + fmt.Sprintf(`, "from": %d, "count": %d}`, from, count)
}

// lineOf is the 1-based number of the line holding byte offset off.
func lineOf(b []byte, off int) int { return bytes.Count(b[:off], []byte("\n")) + 1 }

// lineCount is how many lines b has; a last line without a newline counts.
func lineCount(b []byte) int {
	n := bytes.Count(b, []byte("\n"))
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	return n
}

// cut chooses what of b to show within budget bytes: b[:head] and
// b[tail:]. atLines is true when both cuts fall at line starts.
func cut(b []byte, budget int) (head, tail int, atLines bool) {
	if len(b) <= budget {
		return len(b), len(b), true
	}
	atLines = true
	half := budget / 2
	head = bytes.LastIndexByte(b[:half], '\n') + 1
	if head == 0 && half > 0 {
		head = runeStartBefore(b, half)
		atLines = false
	}
	start := len(b) - (budget - head) // the tail may start here at the earliest
	tail = len(b)
	if j := bytes.IndexByte(b[start-1:len(b)-1], '\n'); j >= 0 {
		tail = start + j
	} else if start < len(b) && budget-head > 0 {
		tail = runeStartAfter(b, start)
		atLines = false
	}
	return head, tail, atLines
}

// cutMarker is the line between the head and the tail of a cut stream.
func cutMarker(b []byte, head, tail int, atLines bool, ref streamRef) string {
	if atLines {
		first, last := lineOf(b, head), lineOf(b, tail)-1
		return fmt.Sprintf("[... lines %d to %d of %d (%d bytes) cut here by rootgate mcp; read them with the output tool: %s ...]\n",
			first, last, lineCount(b), tail-head, ref.args("lines", first, last-first+1))
	}
	return fmt.Sprintf("\n[... bytes %d to %d of %d cut here by rootgate mcp (inside a line too long to show whole); read them with the output tool: %s ...]\n",
		head+1, tail, len(b), ref.args("bytes", head+1, tail-head))
}

// OutputInput is the output tool's arguments.
type OutputInput struct {
	ID     string `json:"id"`
	Stream string `json:"stream,omitempty"`
	Stage  int    `json:"stage,omitempty"`
	Unit   string `json:"unit,omitempty"`
	From   int    `json:"from,omitempty"`
	Count  int    `json:"count,omitempty"`
}

var outputShape = wire.ShapeOf(reflect.TypeFor[OutputInput]())

// OutputResult is the output tool's structured result.
type OutputResult struct {
	ID               string `json:"id" jsonschema:"the call's id"`
	Stream           string `json:"stream,omitempty" jsonschema:"stdout or stderr"`
	Stage            int    `json:"stage,omitempty" jsonschema:"for stderr, the stage (1 is the first command)"`
	Unit             string `json:"unit,omitempty" jsonschema:"lines or bytes: what from and to count"`
	From             int    `json:"from,omitempty" jsonschema:"the first line (or byte) shown, counted from 1"`
	To               int    `json:"to,omitempty" jsonschema:"the last line (or byte) shown, whole; from-1 when nothing is shown"`
	Total            int    `json:"total,omitempty" jsonschema:"how many lines (or bytes) the stream has"`
	Bytes            int    `json:"bytes,omitempty" jsonschema:"how many bytes the stream has"`
	Text             string `json:"text,omitempty" jsonschema:"the range as UTF-8 text; invalid bytes appear as \\xNN"`
	InvalidUTF8Bytes int    `json:"invalid_utf8_bytes,omitempty" jsonschema:"how many bytes of the range were not valid UTF-8 and are shown as \\xNN"`
	NextFrom         int    `json:"next_from,omitempty" jsonschema:"where to go on reading: the text budget or the count ended the range before the stream's end"`
	Error            string `json:"error,omitempty" jsonschema:"why nothing could be read"`
}

func outputTool() *mcp.Tool {
	return &mcp.Tool{
		Name:  "output",
		Title: "Read a call's captured output",
		Description: "Read any range of a finished execute call's output, by lines or bytes, without running anything again: " +
			"the result of execute shows long output only as its beginning and end, and its cut marker gives the arguments to read the rest. " +
			"The server keeps the output of the last 32 calls of this session (256 MiB in all).",
		InputSchema: &jsonschema.Schema{
			Type: "object",
			Properties: map[string]*jsonschema.Schema{
				"id":     {Type: "string", MinLength: ptr(1), Description: "The call's id, as execute returned it (not empty)."},
				"stream": {Type: "string", Enum: []any{"stdout", "stderr"}, Default: json.RawMessage(`"stdout"`), Description: "stdout (the last command's standard output) or stderr (one command's standard error)."},
				"stage":  {Type: "integer", Minimum: ptr(1.0), Default: json.RawMessage("1"), Description: "For stderr: which command of the pipeline, 1 for the first."},
				"unit":   {Type: "string", Enum: []any{"lines", "bytes"}, Default: json.RawMessage(`"lines"`), Description: "What from and count count: lines (the default) or bytes."},
				"from":   {Type: "integer", Minimum: ptr(1.0), Default: json.RawMessage("1"), Description: "The first line (or byte) to show, counted from 1."},
				"count":  {Type: "integer", Minimum: ptr(1.0), Description: "How many lines (or bytes) to show, at least 1; default: up to the end. The text budget may end the range sooner; next_from then says where to go on."},
			},
			Required:             []string{"id"},
			AdditionalProperties: &jsonschema.Schema{Not: &jsonschema.Schema{}},
		},
		OutputSchema: outputSchemaOf[OutputResult](),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}
}

// output handles a call of the output tool.
func (h *handler) output(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in OutputInput
	if err := parseArgs(req.Params.Arguments, h.outputResolved, outputShape, &in); err != nil {
		return outputResultOf(&OutputResult{Error: err.Error() + " (see the input schema)"}), nil
	}
	c := h.sessionOf(req.Session).get(in.ID)
	switch {
	case c == nil:
		return outputResultOf(&OutputResult{ID: in.ID, Error: unknownCall(in.ID)}), nil
	case !c.finished():
		return outputResultOf(&OutputResult{ID: in.ID, Error: fmt.Sprintf(`the call is still pending: call wait with {"id": %q} first`, in.ID)}), nil
	case c.resp == nil || !c.resp.HasRun():
		return outputResultOf(&OutputResult{ID: in.ID, Error: "the call has no output: it did not run (see its result)"}), nil
	}
	return outputResultOf(readRange(c.resp, in, h.cfg.MaxText)), nil
}

// readRange reads the range in asks for, within budget bytes.
func readRange(resp *wire.Response, in OutputInput, budget int) *OutputResult {
	r := &OutputResult{ID: in.ID, Stream: in.Stream, Unit: in.Unit, From: max(in.From, 1)}
	if r.Stream == "" {
		r.Stream = "stdout"
	}
	if r.Unit == "" {
		r.Unit = "lines"
	}
	var b []byte
	switch {
	case r.Stream == "stdout" && in.Stage != 0:
		r.Error = "stage is for stderr only: stdout is the last command's"
		return r
	case r.Stream == "stdout":
		b = resp.Stdout
	case in.Stage > len(resp.Stages):
		r.Error = fmt.Sprintf("stage %d does not exist: the pipeline has %d", in.Stage, len(resp.Stages))
		return r
	default:
		r.Stage = max(in.Stage, 1)
		b = resp.Stages[r.Stage-1].Stderr
	}
	r.Bytes = len(b)
	var start, end int // the byte range to show
	if r.Unit == "bytes" {
		r.Total = len(b)
		start = min(r.From-1, len(b))
		end = len(b)
		if in.Count > 0 { // start <= len(b): no overflow however large Count is
			end = min(end, start+min(in.Count, len(b)))
		}
		if end-start > budget {
			end = runeStartBefore(b, start+budget)
		}
		r.To = end
		if end < len(b) {
			r.NextFrom = end + 1
		}
	} else {
		r.Total = lineCount(b)
		start = lineStart(b, r.From)
		end = len(b)
		if in.Count > 0 && r.From <= r.Total { // no overflow however large Count is
			end = lineStart(b, r.From+min(in.Count, r.Total))
		}
		if end-start > budget {
			end = start + bytes.LastIndexByte(b[start:start+budget], '\n') + 1
			if end == start { // one line longer than the budget
				r.Error = fmt.Sprintf("line %d alone is longer than the text budget (%d bytes): read it by bytes: %s",
					r.From, budget, streamRef{in.ID, r.Stage}.args("bytes", start+1, budget))
				return r
			}
		}
		r.To = r.From - 1 + lineCount(b[start:end])
		if end < len(b) {
			r.NextFrom = r.To + 1
		}
	}
	r.Text, r.InvalidUTF8Bytes = escapeInvalid(b[start:end])
	return r
}

// lineStart is the offset where line n (1-based) starts; len(b) past the
// last line.
func lineStart(b []byte, n int) int {
	off := 0
	for i := 1; i < n; i++ {
		j := bytes.IndexByte(b[off:], '\n')
		if j < 0 {
			return len(b)
		}
		off += j + 1
	}
	return off
}

func outputResultOf(r *OutputResult) *mcp.CallToolResult {
	raw, err := json.Marshal(r)
	if err != nil {
		panic("mcpserver: output result does not marshal: " + err.Error()) // plain fields only
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: r.text()}},
		StructuredContent: json.RawMessage(raw),
		IsError:           r.Error != "",
	}
}

func (r *OutputResult) text() string {
	if r.Error != "" {
		return "error: " + r.Error + "\n"
	}
	var sb strings.Builder
	name := r.Stream
	if r.Stage > 0 {
		name = fmt.Sprintf("stderr of stage %d", r.Stage)
	}
	fmt.Fprintf(&sb, "--- %s of %s: %s %d to %d of %d", name, r.ID, r.Unit, r.From, r.To, r.Total)
	if r.InvalidUTF8Bytes > 0 {
		fmt.Fprintf(&sb, "; %s not UTF-8, shown as \\xNN", plural(r.InvalidUTF8Bytes, "byte"))
	}
	sb.WriteString(" ---\n")
	sb.WriteString(r.Text)
	if r.Text != "" && !strings.HasSuffix(r.Text, "\n") {
		sb.WriteString("\n[no newline here]\n")
	}
	fmt.Fprintf(&sb, "--- end of %s %d to %d ---\n", r.Unit, r.From, r.To)
	if r.NextFrom > 0 {
		fmt.Fprintf(&sb, "next: more follows; call output with \"from\": %d to go on.\n", r.NextFrom)
	}
	return sb.String()
}
