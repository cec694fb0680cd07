package mcpserver

import (
	"encoding/json"
	"regexp"
	"strconv"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// mib finds the "N MiB" figures in a text.
var mib = regexp.MustCompile(`(\d+) MiB`)

// wantCapFigures fails unless what says both caps, this server's
// (MaxOutput) and rootgated's for an answer that is not streamed
// (wire.MaxCapture), and every MiB figure in it is one of them.
func wantCapFigures(t *testing.T, where, what string) {
	t.Helper()
	m := mib.FindAllStringSubmatch(what, -1)
	seen := map[int]bool{}
	for _, f := range m {
		n, _ := strconv.Atoi(f[1])
		seen[n<<20] = true
		if n<<20 != wire.MaxCapture && n<<20 != MaxOutput {
			t.Errorf("%s says %s; the caps are MaxOutput, %d bytes, and wire.MaxCapture, %d bytes: %q", where, f[0], MaxOutput, wire.MaxCapture, what)
		}
	}
	if !seen[MaxOutput] || !seen[wire.MaxCapture] {
		t.Errorf("%s does not name both caps (%d and %d MiB): %q", where, MaxOutput>>20, wire.MaxCapture>>20, what)
	}
}

// TestCaptureCapFigures: what the MCP server tells an agent about
// rootgated's capture cap, in the output schema (a struct tag, which
// cannot be computed) and in a cut stream's text, is wire.MaxCapture.
func TestCaptureCapFigures(t *testing.T) {
	if wire.MaxCapture%(1<<20) != 0 || MaxOutput%(1<<20) != 0 {
		t.Fatalf("wire.MaxCapture is %d bytes, MaxOutput %d: not whole numbers of MiB, as the texts give them", wire.MaxCapture, MaxOutput)
	}
	b, err := json.Marshal(executeOutputSchema())
	if err != nil {
		t.Fatal(err)
	}
	var schema any
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatal(err)
	}
	found := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if props, ok := v["properties"].(map[string]any); ok {
				if p, ok := props["daemon_truncated"].(map[string]any); ok {
					found++
					desc, _ := p["description"].(string)
					wantCapFigures(t, "the output schema's daemon_truncated", desc)
				}
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(schema)
	if found < 2 { // stdout, and each stage's stderr
		t.Errorf("the output schema has daemon_truncated %d times, want 2:\n%s", found, b)
	}

	r := render(LocalHost, "/s", [][]string{{"yes"}}, &wire.Response{ID: "x", Status: wire.StatusOK,
		Stages: []wire.StageResult{{ExitCode: 0, Stderr: []byte("e\n"), StderrTruncated: true}},
		Stdout: []byte("y\n"), StdoutTruncated: true}, DefaultMaxText)
	wantCapFigures(t, "a cut stream's text", r.text())
}
