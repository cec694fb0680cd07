package wire

import (
	"os"
	"strings"
	"testing"
	"time"
)

// TestDocsQuoteErrors holds docs/protocol.md to the code: every error text
// the package makes appears there, as the code writes it.
func TestDocsQuoteErrors(t *testing.T) {
	b, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, e := range []error{
		ErrTooLarge, ErrNoNewline, ErrReadTimeout, ErrAgentNeedsUnprivileged,
		ErrTimeMissing, ErrPipelineMissing, ErrNotUTF8, ErrServerBusy, ErrStopping,
		DuplicateError("ID"),
		NotFoundError(2, "foo"),
		envNotAllowed("FOO"),
		envNotAllowed("SSH_AUTH_SOCK"),
		tooOld(75, 60*time.Second),
		tooNew(75, 60*time.Second),
		charError("pipeline[0][2]"),
		TooManyPendingError(1000, 4),
		PromptRateError(1000, 20),
		TooManyConnsError(1000, 16),
		FirstByteError(2 * time.Second),
	} {
		if !strings.Contains(doc, "`"+e.Error()+"`") {
			t.Errorf("docs/protocol.md does not quote %q", e.Error())
		}
	}
	// The messages Decode makes for the examples the doc gives.
	for _, line := range []string{
		`{"time":"x","pipeline":[["a"]],"NAME":1}`,
		`{"time":"x","pipeline":[]}`,
		`{"time":"x","pipeline":[["a"],[]]}`,
		`{"time":"x","pipeline":[[""]]}`,
		`{"time":"x","pipeline":[["a"]],"cwd":"a"}`,
		`{"time":"x","pipeline":[["a"]],"env":{"1A":""}}`,
		`{"time":"x","pipeline":[["a"]],"id":""}`,
		`{"time":"x","pipeline":[["a"]],"stdin":"!"}`,
		`{"time":"x","pipeline":[["a"]],"action":"x"}`,
		`{"time":"x","pipeline":"x"}`,
		`{"time":"x","pipeline":[["a"]],"env":1}`,
		`["x"]`,
		`{} {}`,
		`{"time":`,
		`{"time":"x","pipeline":[["a"]],"env":{"KEY":"C","KEY":"C"}}`,
		`{"time":"x","pipeline":[["a","\ud800"]]}`,
		`{"time":"x","pipeline":[["a"]],"cwd":"/` + strings.Repeat("a", 4096) + `"}`,
	} {
		_, err := Decode([]byte(line))
		if err == nil || !strings.Contains(doc, "`"+err.Error()+"`") {
			t.Errorf("docs/protocol.md does not quote %v (from %s)", err, line)
		}
	}
}
