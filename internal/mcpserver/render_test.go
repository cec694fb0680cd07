package mcpserver

import (
	"strings"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// TestCutKeepsCharacters: the head and tail of a long stream are cut at
// character boundaries, so no character is split into invalid bytes.
func TestCutKeepsCharacters(t *testing.T) {
	b := []byte(strings.Repeat("é", 3000)) // 6000 bytes, 2 each
	s := decodeStream(b, false, 1025)      // halves of 512.5 bytes fall mid-character
	if s.InvalidUTF8Bytes != 0 || s.OmittedBytes != 6000-512-512 || s.Bytes != 6000 {
		t.Fatalf("%+v", s)
	}
	head, tail, ok := strings.Cut(s.Text, "\n[... 4976 bytes cut here by rootgate mcp (bytes 513 to 5488 of 6000); the first 512 and the last 512 bytes are shown ...]\n")
	if !ok || head != strings.Repeat("é", 256) || tail != strings.Repeat("é", 256) {
		t.Fatalf("text %q", s.Text)
	}
}

// TestDaemonTruncation: a stream rootgated cut at 16 MiB says so, in
// the text and the structured result.
func TestDaemonTruncation(t *testing.T) {
	r := render(LocalHost, "/s", [][]string{{"yes"}}, &wire.Response{ID: "x", Status: wire.StatusOK,
		Stages: []wire.StageResult{{ExitCode: 141, Signal: "SIGPIPE", Stderr: []byte("oops\n"), StderrTruncated: true}},
		Stdout: []byte("y\ny\n"), StdoutTruncated: true}, DefaultMaxText)
	if !r.Stdout.DaemonTruncated || !r.Stages[0].Stderr.DaemonTruncated || !r.isError() {
		t.Fatalf("%+v", r)
	}
	want := `status: ok: approved and run, but the last command exited with code 141
host: local, request id: x
stage 1 yes: exit code 141 (killed by SIGPIPE)
--- stdout: 4 bytes ---
y
y
--- end of stdout ---
stdout was cut by rootgated at 16 MiB: only the first 16777216 bytes were captured, the rest was discarded
--- stderr: 5 bytes ---
oops
--- end of stderr ---
stderr was cut by rootgated at 16 MiB: only the first 16777216 bytes were captured, the rest was discarded
`
	if got := r.text(); got != want {
		t.Fatalf("text:\n%s\nwant:\n%s", got, want)
	}
}

// TestUnknownStatus: an answer from another protocol version is an error
// saying so.
func TestUnknownStatus(t *testing.T) {
	r := render(LocalHost, "/s", [][]string{{"id"}}, &wire.Response{ID: "x", Status: "queued", Version: "9.0"}, DefaultMaxText)
	if r.Status != "error" || r.Message != `rootgated answered an unknown status "queued"` || !strings.Contains(r.Next, `(it says it is "9.0")`) {
		t.Fatalf("%+v", r)
	}
}
