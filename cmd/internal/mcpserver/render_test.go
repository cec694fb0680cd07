package mcpserver

import (
	"strings"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// TestCutKeepsCharacters: the head and tail of a long stream are cut at
// character boundaries, so no character is split into invalid bytes.
func TestCutKeepsCharacters(t *testing.T) {
	b := []byte(strings.Repeat("é", 3000))               // 6000 bytes, 2 each
	s := decodeStream(b, false, 1025, streamRef{"x", 0}) // halves of 512.5 bytes fall mid-character
	if s.InvalidUTF8Bytes != 0 || s.OmittedBytes != 6000-512-512 || s.Bytes != 6000 {
		t.Fatalf("%+v", s)
	}
	head, tail, ok := strings.Cut(s.Text, `
[... bytes 513 to 5488 of 6000 cut here by rootgate mcp (inside a line too long to show whole); read them with the output tool: {"id": "x", "stream": "stdout", "unit": "bytes", "from": 513, "count": 4976} ...]
`)
	if !ok || head != strings.Repeat("é", 256) || tail != strings.Repeat("é", 256) {
		t.Fatalf("text %q", s.Text)
	}
}

// TestDaemonTruncation: a stream rootgated cut at its cap says so, in
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
stdout was cut: only the first 4 bytes were kept (rootgate mcp keeps 64 MiB of stdout, and 64 MiB of all the stages' stderr together; a rootgated that does not stream output keeps 16 MiB of each), the rest was discarded
--- stderr: 5 bytes ---
oops
--- end of stderr ---
stderr was cut: only the first 5 bytes were kept (rootgate mcp keeps 64 MiB of stdout, and 64 MiB of all the stages' stderr together; a rootgated that does not stream output keeps 16 MiB of each), the rest was discarded
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

// TestHintsByCode: the hint for an answer follows its code, not its
// message: each answer here carries a message no daemon sends, and is
// still told apart by its code; an answer without a code gets neither
// code's hint.
func TestHintsByCode(t *testing.T) {
	const msg = "a wording this client has never seen"
	for _, tc := range []struct {
		status, code, next string
		run                bool
	}{
		{wire.StatusError, wire.CodeUnknownField, "rootgated on /s is older than this rootgate mcp and does not know a field the message names: leave out that argument, or ask the user to upgrade rootgated.", false},
		{wire.StatusError, wire.CodeNotFound, "Programs are looked up in /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin, not in your PATH: check the name, give an absolute path, or check that the program is installed.", false},
		{wire.StatusError, wire.CodeEnvNotAllowed, "Only allowlisted environment variables may be set. Allowed: LANG, LANGUAGE, LC_*, TZ, TERM, COLUMNS, LINES, NO_COLOR, DEBIAN_FRONTEND, DEBCONF_NONINTERACTIVE_SEEN, APT_LISTCHANGES_FRONTEND, SYSTEMD_COLORS, http_proxy, https_proxy, no_proxy, HTTP_PROXY, HTTPS_PROXY, NO_PROXY. Never PATH, LD_* or SSH_AUTH_SOCK (use forward_agent). Leave the refused keys out and send the request again.", false},
		{wire.StatusError, wire.CodeTooLarge, "The request is over 1 MiB, most likely because of stdin: send less (about 700 KiB of stdin fit), or let the command read a file instead.", false},
		{wire.StatusError, wire.CodeStopping, "rootgated is shutting down. Wait until it is started again (check with ping), then send the request again.", false},
		{wire.StatusError, wire.CodeBusy, "rootgated has too many connections in flight. Wait a little, then try again.", false},
		{wire.StatusError, wire.CodeRateLimit, "Too many of your requests are waiting for a person, or you asked too often. Wait until the requests already sent are decided, then retry later; do not send more meanwhile.", false},
		{wire.StatusError, wire.CodeStaleTime, "This machine's clock and rootgated's differ by more than rootgated allows. Ask the user to check time synchronisation (timedatectl, NTP) on both machines.", false},
		{wire.StatusError, wire.CodeNoAgent, "forward_agent needs an approver who offers an SSH agent: ask the user to start `rootgate approve --forward-agent`, or do without forward_agent.", false},
		{wire.StatusError, wire.CodeInvalidRequest, "rootgated refused the request before anything ran. Correct it as the message says and try again.", false},
		{wire.StatusError, "", "rootgated on /s is older than this rootgate mcp (its answer carries no code). Correct the request as the message says, or ask the user to install the same release of rootgate and rootgated.", false},
		{wire.StatusDenied, wire.CodeNoApprover, "No one is there to approve. Ask the user to run `sudo rootgate approve` in a terminal, then send the request again.", false},
		{wire.StatusDenied, wire.CodeNoEligibleApprover, "Every attached approver is in a terminal or session your own account can control, so rootgate will not ask them (you could answer for the user). Do not retry: tell the user to run you under an account of your own (README \"Secure setup\"), or to approve with a passkey (README \"Approving your own account's agent with a passkey\").", false},
		{wire.StatusDenied, wire.CodeDeniedByOperator, "This denial is final for this request: do not send it again unchanged, and do not try to reach the same effect another way (through sh -c, another program or a script). Tell the user what you wanted to do and why, and ask how to proceed.", false},
		{wire.StatusDenied, wire.CodeDeniedByPolicy, "The operator's policy forbids this. Do not try to reach the same effect another way (through sh -c, another program, a script, or by splitting it into steps): that is what the rule forbids. Tell the user what you wanted to do and why, and ask them how to proceed.", false},
		{wire.StatusTimeout, wire.CodePromptTimeout, "No one decided in time. Ask the user whether they saw the request before sending it again.", false},
		{wire.StatusTimeout, wire.CodeRunTimeout, "The run was killed at its time limit; the output is what it wrote before. Ask again with a larger timeout only if the command really needs longer (rootgated's own limit still applies).", true},
	} {
		resp := &wire.Response{ID: "x", Status: tc.status, Code: tc.code, Message: msg}
		if tc.run {
			resp.Stages = []wire.StageResult{{ExitCode: 143, Signal: "SIGTERM"}}
		}
		r := render(LocalHost, "/s", [][]string{{"id"}}, resp, DefaultMaxText)
		if r.Next != tc.next || r.Message != msg || r.TimeLimitHit != tc.run {
			t.Errorf("%s %q: next %q, time limit %v", tc.status, tc.code, r.Next, r.TimeLimitHit)
		}
	}
}
