package wire

import (
	"errors"
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
		ErrTimeMissing, ErrPipelineMissing, ErrNotUTF8, ErrServerBusy, ErrLacking, ErrStopping, invalidRequest(&DepthError{}),
		DuplicateError("ID"),
		NotFoundError(2, "foo"),
		NotFoundLeftOutError(1, "foo", "/usr/local/bin", "/usr/local/bin is owned by uid 1000, not by root"),
		envNotAllowed("FOO"),
		envNotAllowed("SSH_AUTH_SOCK"),
		tooOld(75, 60*time.Second),
		tooNew(75, 60*time.Second),
		charError("pipeline[0][2]"),
		TooManyPendingError(1000, 4),
		PromptRateError(1000, 20),
		ReplayFullError(1000, 20000, 2*time.Minute),
		TooManyConnsError(1000, 16),
		AuditBudgetError(1000, 8<<20, time.Date(2026, 2, 13, 15, 30, 0, 0, time.UTC)),
		FirstByteError(2 * time.Second),
		ReadTimeoutError(ReadTimeout),
		ErrInternal, ErrPeerCredentials, ErrReplayRecord, ErrAudit, ErrAuditFull, ErrNoAgent,
		NoUserError(1000), RunAsError("user", "postgres"), RunAsError("user", "#108"), RunAsError("group", "backup"), RunAsError("group", "#34"),
		CwdMissingError("/nope"), CwdDeniedError("/home/other/dir"),
		PromptTooLargeError(5000000, 4194304),
		ErrNoApprover, NoEligibleApproverError(1000, "alice"), NoEligibleApproverRunAsError(1001, "alice"), ApproversLeftError(""),
		PromptTimeoutError(60 * time.Second), DeniedByOperatorError("root", "pts/3"), DeniedByOperatorError("", "TTY"),
	} {
		if !quotes(doc, e.Error()) {
			t.Errorf("docs/protocol.md does not quote %q", e.Error())
		}
		if _, ok := CodeStatus(CodeOf(e)); !ok || CodeOf(e) == CodeInternal && !internal(e) {
			t.Errorf("%q has code %q", e.Error(), CodeOf(e))
		}
	}
	// The texts whose variable part the doc shows as … or N.
	for _, e := range []error{
		CwdError("DIR", errors.New("a symlink loop, …")), ResolveError(1, errors.New(`resolve "/root/tool": permission denied`)),
		AgentError(errors.New("…")), StartError(errors.New("…")),
	} {
		if !strings.Contains(doc, "`"+e.Error()) {
			t.Errorf("docs/protocol.md does not quote %q", e.Error())
		}
	}
	if m := DeniedByPolicyError("FILE:LINE", "TEXT").Error(); !strings.Contains(doc, "`"+m+"`") {
		t.Errorf("docs/protocol.md does not quote %q", m)
	}
	if !strings.Contains(doc, `"message":"`+RunTimeoutMessage(5*time.Minute)+`"`) {
		t.Errorf("docs/protocol.md does not quote %q", RunTimeoutMessage(5*time.Minute))
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
		`{"time":"x","pipeline":[["a"]],"run_as":""}`,
		`{"time":"x","pipeline":[["a"]],"run_as":"` + strings.Repeat("a", 257) + `"}`,
		`{"time":"x","pipeline":[["a"]],"run_as":"a\u001b"}`,
		`{"time":"x","pipeline":[["a"]],"run_as":"a b"}`,
		`{"time":"x","pipeline":[["a"]],"run_as_group":"a b"}`,
		`{"time":"x","pipeline":[["a"]],"run_as":"postgres","privileged":false}`,
	} {
		_, err := Decode([]byte(line))
		if err == nil || !strings.Contains(doc, "`"+err.Error()+"`") {
			t.Errorf("docs/protocol.md does not quote %v (from %s)", err, line)
		}
		if c := CodeOf(err); c != CodeInvalidJSON && c != CodeUnknownField && c != CodeInvalidRequest {
			t.Errorf("%v (from %s) has code %q", err, line, c)
		}
	}
}

// quotes reports whether doc quotes the message m: in backticks, or as
// the message of an example response.
func quotes(doc, m string) bool {
	return strings.Contains(doc, "`"+m+"`") || strings.Contains(doc, `"message":"`+strings.ReplaceAll(m, `"`, `\"`)+`"`)
}

// internal reports whether e is one of the texts of code internal: the
// daemon's faults.
func internal(e error) bool {
	switch e {
	case ErrInternal, ErrPeerCredentials, ErrReplayRecord:
		return true
	}
	return strings.HasPrefix(e.Error(), "the request is too large to show to an approver")
}

// TestDocsCodeTable holds the table of codes in docs/protocol.md to the
// code: a row for every code, with its status, and no row for a code the
// daemon does not have.
func TestDocsCodeTable(t *testing.T) {
	b, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "| code | status | the case |\n|---|---|---|\n")
	if !ok {
		t.Fatal("docs/protocol.md has no table of codes")
	}
	rows := map[string]string{}
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "| `") {
			break
		}
		cells := strings.Split(line, "|")
		code, status := strings.Trim(cells[1], " `"), strings.Trim(cells[2], " `")
		if _, dup := rows[code]; dup {
			t.Errorf("code %q has two rows", code)
		}
		rows[code] = status
	}
	for _, c := range Codes() {
		want, _ := CodeStatus(c)
		if got, ok := rows[c]; !ok || got != want {
			t.Errorf("code %q: the table says status %q, want %q", c, got, want)
		}
	}
	for c := range rows {
		if _, ok := CodeStatus(c); !ok {
			t.Errorf("the table has code %q, which the daemon does not", c)
		}
	}
}

// TestDocsQuoteApproverReasons holds the approver protocol's part of
// docs/protocol.md to the reasons an approver could not decide that it
// quotes, as the code writes them. (The messages the daemon sends an
// approver are approval/remote's, and its test holds the doc to them.)
func TestDocsQuoteApproverReasons(t *testing.T) {
	b, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, doc, ok := strings.Cut(string(b), "# Approver protocol")
	if !ok {
		t.Fatal("docs/protocol.md has no approver protocol")
	}
	for _, m := range []string{
		ApproverNoGroup("USER on WHERE"),
		ApproversLeftError(ApproverDisconnected("USER on WHERE")).Error(),
	} {
		if !strings.Contains(doc, "`"+m+"`") {
			t.Errorf("docs/protocol.md's approver protocol does not quote %q", m)
		}
	}
}
