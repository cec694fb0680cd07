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

// wantCapFigures fails unless what says the capture cap at least once and
// every MiB figure in it is wire.MaxCapture.
func wantCapFigures(t *testing.T, where, what string) {
	t.Helper()
	m := mib.FindAllStringSubmatch(what, -1)
	if len(m) == 0 {
		t.Errorf("%s names no MiB figure: %q", where, what)
	}
	for _, f := range m {
		if n, _ := strconv.Atoi(f[1]); n<<20 != wire.MaxCapture {
			t.Errorf("%s says %s; rootgated keeps wire.MaxCapture, %d bytes: %q", where, f[0], wire.MaxCapture, what)
		}
	}
}

// TestCaptureCapFigures: what the MCP server tells an agent about
// rootgated's capture cap, in the output schema (a struct tag, which
// cannot be computed) and in a cut stream's text, is wire.MaxCapture.
func TestCaptureCapFigures(t *testing.T) {
	if wire.MaxCapture%(1<<20) != 0 {
		t.Fatalf("wire.MaxCapture is %d bytes, not a whole number of MiB, as the texts give it", wire.MaxCapture)
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
