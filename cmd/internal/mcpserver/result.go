package mcpserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/wire"
)

// Result is the execute tool's structured result.
type Result struct {
	Status       string     `json:"status" jsonschema:"ok: approved and run, whatever the exit codes; denied: a person or a policy rule said no (final for this request); timeout: no decision in time, or the run passed its time limit; error: anything else"`
	Host         string     `json:"host,omitempty" jsonschema:"the host whose rootgated was asked (absent when the arguments were refused)"`
	ID           string     `json:"id,omitempty" jsonschema:"the request's id, as the approver and the audit log show it"`
	Message      string     `json:"message,omitempty" jsonschema:"why the request did not run to completion, in rootgated's words or this server's"`
	Next         string     `json:"next,omitempty" jsonschema:"what to do next"`
	TimeLimitHit bool       `json:"time_limit_hit,omitempty" jsonschema:"the run was killed at its time limit; stages and stdout hold what it wrote before"`
	ExitCode     *int       `json:"exit_code,omitempty" jsonschema:"the last stage's exit code (128+N when killed by signal N)"`
	Stages       []Stage    `json:"stages,omitempty" jsonschema:"one entry per command of the pipeline, in order, when it ran"`
	Stdout       *Stream    `json:"stdout,omitempty" jsonschema:"the last stage's standard output, when it ran"`
	Pipeline     [][]string `json:"pipeline,omitempty" jsonschema:"the commands as sent"`
	// Phase: a pending call's (runs.go).
	Phase string `json:"phase,omitempty" jsonschema:"while status is pending: sent (no word from rootgated yet), approval (a person is asked) or running (approved, the command runs)"`

	// What happened, said plainly (issue 14).
	DecidedBy      *DecidedBy `json:"decided_by,omitempty" jsonschema:"who decided the request: a policy rule (pre-approved forms run without asking: prefer them) or a person, with the note they typed when denying"`
	KilledStopping bool       `json:"killed_stopping,omitempty" jsonschema:"the command had started and was killed because rootgated stopped; stages and stdout hold what it wrote before. It may have done part of its work: do not assume it did not run"`
	DaemonTime     string     `json:"daemon_time,omitempty" jsonschema:"on a refusal for the request's time: rootgated's clock (RFC 3339, UTC)"`
	ClientTime     string     `json:"client_time,omitempty" jsonschema:"on a refusal for the request's time: this machine's clock when the answer came (RFC 3339, UTC)"`
}

// DecidedBy says who decided a request.
type DecidedBy struct {
	By       string `json:"by" jsonschema:"policy: a rule of the operator's policy file; person: someone at an approver; grant: a person's standing grant for exactly this request"`
	Rule     string `json:"rule,omitempty" jsonschema:"the policy rule's text"`
	Source   string `json:"source,omitempty" jsonschema:"the policy rule's file and line"`
	Approver string `json:"approver,omitempty" jsonschema:"the person who decided, with their uid and where they sat"`
	Via      string `json:"via,omitempty" jsonschema:"terminal (the daemon's own --tty) or remote (an attached approver client)"`
	Note     string `json:"note,omitempty" jsonschema:"what the person who denied wrote to you"`
	Grant    string `json:"grant,omitempty" jsonschema:"the standing grant's id"`
	Ends     string `json:"ends,omitempty" jsonschema:"when the standing grant ends (RFC 3339); after it a person is asked again"`
}

// decidedBy converts the daemon's decided_by.
func decidedBy(d *wire.DecidedBy) *DecidedBy {
	if d == nil {
		return nil
	}
	return &DecidedBy{By: d.By, Rule: d.Rule, Source: d.Source, Approver: d.Approver, Via: d.Via, Note: d.Note, Grant: d.Grant, Ends: d.Ends}
}

// text says who decided, in one line.
func (d *DecidedBy) text() string {
	switch d.By {
	case wire.DecidedByPolicy:
		return fmt.Sprintf("the policy rule at %s: %s", d.Source, d.Rule)
	case wire.DecidedByPerson:
		s := d.Approver
		if d.Via != "" {
			s += " (" + d.Via + ")"
		}
		return s
	case wire.DecidedByGrant:
		return fmt.Sprintf("standing grant %s from %s, until %s", d.Grant, d.Approver, d.Ends)
	}
	return d.By
}

// Stage is one command's outcome.
type Stage struct {
	ExitCode int    `json:"exit_code" jsonschema:"exit code; 128+N when killed by signal N"`
	Signal   string `json:"signal,omitempty" jsonschema:"the signal that killed it, e.g. SIGKILL"`
	Stderr   Stream `json:"stderr" jsonschema:"its standard error"`
}

// Stream is one captured output stream, decoded for reading. The figures
// in DaemonTruncated's description are MaxOutput and wire.MaxCapture in
// MiB: a tag is a literal, so TestCaptureCapFigures holds it to them.
type Stream struct {
	Bytes            int    `json:"bytes" jsonschema:"how many bytes rootgated captured"`
	SHA256           string `json:"sha256" jsonschema:"SHA-256 of the captured bytes, hex"`
	DaemonTruncated  bool   `json:"daemon_truncated,omitempty" jsonschema:"only the first bytes were kept, the rest was discarded: this server keeps 64 MiB of stdout and 64 MiB of all the stages' stderr together (a rootgated that does not stream output keeps 16 MiB of each)"`
	Binary           bool   `json:"binary,omitempty" jsonschema:"the stream is binary: text is empty, see bytes, sha256 and content_type"`
	ContentType      string `json:"content_type,omitempty" jsonschema:"for binary output, its sniffed media type"`
	Text             string `json:"text" jsonschema:"the output as UTF-8 text; invalid bytes appear as \\xNN"`
	InvalidUTF8Bytes int    `json:"invalid_utf8_bytes,omitempty" jsonschema:"how many bytes were not valid UTF-8 and are shown as \\xNN"`
	OmittedBytes     int    `json:"omitted_bytes,omitempty" jsonschema:"bytes cut from the middle of text to keep the result short; text holds the head and the tail with a marker line between"`
	OmittedLines     int    `json:"omitted_lines,omitempty" jsonschema:"lines cut from the middle of text, when the cuts fall between lines; the output tool reads them"`
}

// resultOf wraps a result as a tool result: text for the model, the same
// in structured form, isError as the issue defines it.
func resultOf(r *Result) *mcp.CallToolResult {
	raw, err := json.Marshal(r)
	if err != nil {
		panic("mcpserver: result does not marshal: " + err.Error()) // plain fields only
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: r.text()}},
		StructuredContent: json.RawMessage(raw),
		IsError:           r.isError(),
	}
}

func (r *Result) isError() bool {
	if r.Status == StatusPending {
		return false
	}
	if r.Status != wire.StatusOK {
		return true
	}
	return r.ExitCode == nil || *r.ExitCode != 0
}

// inputResult reports arguments the tool cannot use.
func inputResult(err error) *Result {
	return &Result{Status: wire.StatusError, Message: err.Error(),
		Next: "Nothing was sent to rootgated. Fix the arguments as the message says and call execute again."}
}

// render turns the daemon's answer into a result.
func render(host, socket string, pipeline [][]string, resp *wire.Response, maxText int) *Result {
	r := &Result{Status: resp.Status, Host: host, ID: resp.ID, Message: resp.Message, Pipeline: pipeline, DecidedBy: decidedBy(resp.DecidedBy)}
	switch resp.Status {
	case wire.StatusOK, wire.StatusDenied, wire.StatusTimeout, wire.StatusError:
	default:
		r.Status = wire.StatusError
		r.Message = fmt.Sprintf("rootgated answered an unknown status %q", resp.Status)
		r.Next = fmt.Sprintf("rootgated on %s speaks another version of the protocol (it says it is %q). Ask the user to install the same release of rootgate and rootgated.", socket, resp.Version)
		return r
	}
	if resp.HasRun() {
		// The budget is the whole result's (output.go).
		sizes := []int{textSize(resp.Stdout)}
		for _, st := range resp.Stages {
			sizes = append(sizes, textSize(st.Stderr))
		}
		budget := shares(sizes, maxText)
		for i, st := range resp.Stages {
			r.Stages = append(r.Stages, Stage{ExitCode: st.ExitCode, Signal: st.Signal, Stderr: decodeStream(st.Stderr, st.StderrTruncated, budget[i+1], streamRef{resp.ID, i + 1})})
		}
		out := decodeStream(resp.Stdout, resp.StdoutTruncated, budget[0], streamRef{resp.ID, 0})
		r.Stdout = &out
		if n := len(r.Stages); n > 0 {
			r.ExitCode = ptr(r.Stages[n-1].ExitCode)
		}
	}
	switch resp.Status {
	case wire.StatusOK:
		if len(r.Stages) == 0 {
			r.Status = wire.StatusError
			r.Message = "rootgated answered ok without a result"
			r.Next = "This is a bug in rootgated; tell the user."
		}
	case wire.StatusDenied:
		switch resp.Code {
		case wire.CodeNoApprover:
			r.Next = "No one is there to approve. Ask the user to run `sudo rootgate approve` in a terminal, then send the request again."
		case wire.CodeNoEligibleApprover:
			if strings.Contains(resp.Message, wire.RunAsControlsApprovers) {
				r.Next = "The account you asked to run as may approve rootgate requests and can control every attached approver, so a run as it is put to none of them (it could answer for the user). Do not retry: tell the user what you wanted to do as that account, and ask them how to proceed."
				break
			}
			r.Next = "Every attached approver is in a terminal or session your own account can control, so rootgate will not ask them (you could answer for the user). Do not retry: tell the user to run you under an account of your own (README \"Secure setup\"), or to approve with a passkey (README \"Approving your own account's agent with a passkey\")."
		case wire.CodeDeniedByPolicy:
			r.Next = "The operator's policy forbids this. Do not try to reach the same effect another way (through sh -c, another program, a script, or by splitting it into steps): that is what the rule forbids. Tell the user what you wanted to do and why, and ask them how to proceed."
		default:
			r.Next = "This denial is final for this request: do not send it again unchanged, and do not try to reach the same effect another way (through sh -c, another program or a script). Tell the user what you wanted to do and why, and ask how to proceed."
			if r.DecidedBy != nil && r.DecidedBy.Note != "" {
				r.Next = "The person who denied it wrote a note (in decided_by): take it into account. " + r.Next
			}
		}
	case wire.StatusTimeout:
		if resp.Code == wire.CodeRunTimeout || resp.Code == "" && resp.HasRun() {
			r.TimeLimitHit = true
			r.Next = "The run was killed at its time limit; the output is what it wrote before. Ask again with a larger timeout only if the command really needs longer (rootgated's own limit still applies)."
		} else {
			r.Next = "No one decided in time. Ask the user whether they saw the request before sending it again."
		}
	case wire.StatusError:
		r.Next = errorHint(host, socket, resp)
		switch resp.Code {
		case wire.CodeKilledStopping:
			r.KilledStopping = true
			r.Next = "rootgated stopped while the command ran and killed it: the command HAD STARTED and may have done part of its work; below is what it wrote. Do not assume it did not run: check the state it changes (e.g. with a read-only command) before deciding whether to send it again, once ping says rootgated is back."
		case wire.CodeStaleTime:
			r.DaemonTime = resp.DaemonTime
			r.ClientTime = time.Now().UTC().Format(time.RFC3339)
			if r.DaemonTime != "" {
				r.Next = staleHint(r.DaemonTime, r.ClientTime)
			}
		}
	}
	return r
}

// staleHint says what to do about a request refused for its time, with
// both clocks.
func staleHint(daemonTime, clientTime string) string {
	return fmt.Sprintf("rootgated's clock says %s, this machine's %s. If they differ by more than a few seconds, the clocks are out of sync: ask the user to check time synchronisation (timedatectl, NTP) on both machines. If they agree, the request was delayed on its way: send it again.", daemonTime, clientTime)
}

// envHint says which of the env keys sent rootgated's default allowlist
// refuses, and which keys it allows.
func envHint(env map[string]string) string {
	allow := wire.DefaultEnvAllow()
	var refused []string
	for k := range env {
		if wire.CodeOf(wire.EnvPolicy(allow).Check(map[string]string{k: env[k]})) == wire.CodeEnvNotAllowed {
			refused = append(refused, k)
		}
	}
	slices.Sort(refused)
	s := "Only allowlisted environment variables may be set. "
	if len(refused) > 0 {
		s += "Refused: " + strings.Join(refused, ", ") + ". "
	}
	return s + "Allowed: " + strings.Join(allow, ", ") + ". Never PATH, LD_* or SSH_AUTH_SOCK (use forward_agent). Leave the refused keys out and send the request again."
}

// errorHint says what to do about an error answer, by its code.
func errorHint(host, socket string, resp *wire.Response) string {
	switch resp.Code {
	case "":
		return fmt.Sprintf("rootgated on %s is older than this rootgate mcp (its answer carries no code). Correct the request as the message says, or ask the user to install the same release of rootgate and rootgated.", socket)
	case wire.CodeUnknownField:
		return fmt.Sprintf("rootgated on %s is older than this rootgate mcp and does not know a field the message names: leave out that argument, or ask the user to upgrade rootgated.", socket)
	case wire.CodeEnvNotAllowed:
		return envHint(nil)
	case wire.CodeNotFound:
		return "Programs are looked up in /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin, not in your PATH: check the name, give an absolute path, or check that the program is installed."
	case wire.CodeTooLarge:
		return "The request is over 1 MiB, most likely because of stdin: send less (about 700 KiB of stdin fit), or let the command read a file instead."
	case wire.CodeStopping:
		return "rootgated is shutting down. Wait until it is started again (check with ping), then send the request again."
	case wire.CodeBusy:
		return "rootgated has too many connections in flight. Wait a little, then try again."
	case wire.CodeRateLimit:
		return "Too many of your requests are waiting for a person, or you asked too often. Wait until the requests already sent are decided, then retry later; do not send more meanwhile."
	case wire.CodeStaleTime:
		return "This machine's clock and rootgated's differ by more than rootgated allows. Ask the user to check time synchronisation (timedatectl, NTP) on both machines."
	case wire.CodeNoAgent:
		return "forward_agent needs an approver who offers an SSH agent: ask the user to start `rootgate approve --forward-agent`, or do without forward_agent."
	}
	return "rootgated refused the request before anything ran. Correct it as the message says and try again."
}

// decodeStream makes a captured stream readable: binary output is only
// summarised, text is decoded with invalid bytes escaped, and text over
// maxText bytes keeps its head and tail around a marker (output.go).
func decodeStream(b []byte, daemonTruncated bool, maxText int, ref streamRef) Stream {
	sum := sha256.Sum256(b)
	s := Stream{Bytes: len(b), SHA256: hex.EncodeToString(sum[:]), DaemonTruncated: daemonTruncated}
	if len(b) == 0 {
		return s
	}
	if ct, binary := sniff(b); binary {
		s.Binary = true
		s.ContentType = ct
		return s
	}
	if len(b) <= maxText {
		s.Text, s.InvalidUTF8Bytes = escapeInvalid(b)
		return s
	}
	head, tail, atLines := cut(b, maxText)
	s.OmittedBytes = tail - head
	if atLines {
		s.OmittedLines = lineOf(b, tail) - lineOf(b, head)
	}
	h, n1 := escapeInvalid(b[:head])
	t, n2 := escapeInvalid(b[tail:])
	s.InvalidUTF8Bytes = n1 + n2
	s.Text = h + cutMarker(b, head, tail, atLines, ref) + t
	return s
}

// sniff tells binary output from text: what the WHATWG sniffing algorithm
// calls binary (control bytes, or a known binary signature), or output
// more than a quarter of which is not UTF-8.
func sniff(b []byte) (contentType string, binary bool) {
	ct := http.DetectContentType(b)
	if !strings.HasPrefix(ct, "text/") {
		return ct, true
	}
	if invalidBytes(b)*4 > len(b) {
		return "application/octet-stream", true
	}
	return ct, false
}

// invalidBytes counts the bytes of b that are not part of a valid UTF-8
// sequence, as escapeInvalid does, without building the text.
func invalidBytes(b []byte) int {
	if utf8.Valid(b) {
		return 0
	}
	bad := 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			bad++
		}
		b = b[size:]
	}
	return bad
}

// escapeInvalid decodes b as UTF-8, writing each byte that is not part of
// a valid sequence as \xNN, and counts them.
func escapeInvalid(b []byte) (string, int) {
	if utf8.Valid(b) {
		return string(b), 0
	}
	var sb strings.Builder
	bad := 0
	for len(b) > 0 {
		r, size := utf8.DecodeRune(b)
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(&sb, `\x%02x`, b[0])
			bad++
		} else {
			sb.Write(b[:size])
		}
		b = b[size:]
	}
	return sb.String(), bad
}

// runeStartBefore moves i back (at most 3 bytes) to the start of a rune.
func runeStartBefore(b []byte, i int) int {
	for j := i; j > i-utf8.UTFMax && j > 0; j-- {
		if utf8.RuneStart(b[j]) {
			return j
		}
	}
	return i
}

// runeStartAfter moves i forward (at most 3 bytes) to the start of a rune.
func runeStartAfter(b []byte, i int) int {
	for j := i; j < i+utf8.UTFMax && j < len(b); j++ {
		if utf8.RuneStart(b[j]) {
			return j
		}
	}
	return i
}

// text renders r for a model to read.
func (r *Result) text() string {
	var sb strings.Builder
	switch r.Status {
	case wire.StatusOK:
		failed := r.failedStages()
		switch {
		case *r.ExitCode == 0 && failed == "":
			fmt.Fprintf(&sb, "status: ok: approved and run; exit code 0\n")
		case *r.ExitCode == 0:
			fmt.Fprintf(&sb, "status: ok: approved and run; the last command exited with code 0, but %s\n", failed)
		default:
			fmt.Fprintf(&sb, "status: ok: approved and run, but the last command exited with code %d\n", *r.ExitCode)
		}
	default:
		fmt.Fprintf(&sb, "status: %s: %s\n", r.Status, r.Message)
	}
	if r.DecidedBy != nil {
		fmt.Fprintf(&sb, "decided by: %s\n", r.DecidedBy.text())
		if r.DecidedBy.Note != "" {
			fmt.Fprintf(&sb, "note from %s: %q\n", r.DecidedBy.Approver, r.DecidedBy.Note)
		}
	}
	if r.KilledStopping {
		sb.WriteString("the command had started when rootgated stopped and killed it; below is what it wrote before\n")
	}
	if r.DaemonTime != "" {
		fmt.Fprintf(&sb, "rootgated's clock: %s; this machine's clock: %s\n", r.DaemonTime, r.ClientTime)
	}
	switch {
	case r.ID != "":
		fmt.Fprintf(&sb, "host: %s, request id: %s\n", r.Host, r.ID)
	case r.Host != "":
		fmt.Fprintf(&sb, "host: %s\n", r.Host)
	}
	if r.TimeLimitHit {
		sb.WriteString("the run hit its time limit and was killed; below is what it wrote before\n")
	}
	for i, st := range r.Stages {
		cmd := ""
		if i < len(r.Pipeline) {
			cmd = " " + shellQuote(r.Pipeline[i])
		}
		fmt.Fprintf(&sb, "stage %d%s: exit code %d", i+1, cmd, st.ExitCode)
		if st.Signal != "" {
			fmt.Fprintf(&sb, " (killed by %s)", st.Signal)
		}
		sb.WriteString("\n")
	}
	if r.Stdout != nil {
		writeStream(&sb, "stdout", r.Stdout)
	}
	for i := range r.Stages {
		name := "stderr"
		if len(r.Stages) > 1 {
			name = fmt.Sprintf("stderr of stage %d", i+1)
		}
		writeStream(&sb, name, &r.Stages[i].Stderr)
	}
	if r.Next != "" {
		fmt.Fprintf(&sb, "next: %s\n", r.Next)
	}
	return sb.String()
}

func writeStream(sb *strings.Builder, name string, s *Stream) {
	switch {
	case s.Bytes == 0:
		fmt.Fprintf(sb, "%s: empty\n", name)
	case s.Binary:
		fmt.Fprintf(sb, "%s: binary output (%s), %d bytes, sha256 %s; not shown\n", name, s.ContentType, s.Bytes, s.SHA256)
	default:
		fmt.Fprintf(sb, "--- %s: %d bytes", name, s.Bytes)
		if s.InvalidUTF8Bytes > 0 {
			fmt.Fprintf(sb, "; %s not UTF-8, shown as \\xNN", plural(s.InvalidUTF8Bytes, "byte"))
		}
		if s.OmittedBytes > 0 {
			fmt.Fprintf(sb, "; %s cut from the middle, see the marker", plural(s.OmittedBytes, "byte"))
		}
		sb.WriteString(" ---\n")
		sb.WriteString(s.Text)
		if !strings.HasSuffix(s.Text, "\n") {
			sb.WriteString("\n[no newline at the end]\n")
		}
		fmt.Fprintf(sb, "--- end of %s ---\n", name)
	}
	if s.DaemonTruncated {
		fmt.Fprintf(sb, "%s was cut: only the first %d bytes were kept (rootgate mcp keeps %d MiB of stdout, and %[3]d MiB of all the stages' stderr together; a rootgated that does not stream output keeps %d MiB of each), the rest was discarded\n", name, s.Bytes, MaxOutput>>20, wire.MaxCapture>>20)
	}
}

// failedStages names the stages before the last that failed (a non-zero
// exit code or a signal), e.g. "stage 1 exited with code 2", or "".
func (r *Result) failedStages() string {
	var parts []string
	for i, st := range r.Stages {
		if i == len(r.Stages)-1 {
			break
		}
		switch {
		case st.Signal != "":
			parts = append(parts, fmt.Sprintf("stage %d was killed by %s (exit code %d)", i+1, st.Signal, st.ExitCode))
		case st.ExitCode != 0:
			parts = append(parts, fmt.Sprintf("stage %d exited with code %d", i+1, st.ExitCode))
		}
	}
	return strings.Join(parts, " and ")
}

// plural writes n and the noun, with an s unless n is 1.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

var plainWord = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)

// shellQuote shows argv as a shell would need it typed.
func shellQuote(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if plainWord.MatchString(a) {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
