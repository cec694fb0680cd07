package mcpserver

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/wire"
)

const exampleID = "6f1c0d5e-2b7a-4c1e-9a53-0c8f4e2d7b11"

// docExamples are the blocks of docs/mcp.md that the code generates, by
// the name of the marker before each block.
func docExamples(t *testing.T) map[string]string {
	t.Helper()
	cfg := &Config{Socket: client.DefaultSocket, Hosts: map[string]string{"web1": "/run/user/1000/rootgate-web1.sock"}}
	indent := func(v any) string {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\n"
	}
	result := func(pipeline [][]string, resp *wire.Response) *Result {
		resp.ID = exampleID
		return render(LocalHost, cfg.Socket, pipeline, resp, DefaultMaxText)
	}
	pipe := [][]string{{"ls", "/var/log"}, {"wc", "-l"}}
	ok := result(pipe, &wire.Response{Status: wire.StatusOK, Stages: []wire.StageResult{{}, {}}, Stdout: []byte("23\n")})
	failed := result([][]string{{"systemctl", "restart", "nginx"}}, &wire.Response{Status: wire.StatusOK,
		Stages: []wire.StageResult{{ExitCode: 1, Stderr: []byte("Job for nginx.service failed because the control process exited with error code.\n")}}})
	latin1 := result([][]string{{"cat", "/etc/motd.latin1"}}, &wire.Response{Status: wire.StatusOK,
		Stages: []wire.StageResult{{}}, Stdout: []byte("Bienvenue \xe0 bord\n")})
	binary := result([][]string{{"cat", "/var/lib/app/logo.png"}}, &wire.Response{Status: wire.StatusOK,
		Stages: []wire.StageResult{{}}, Stdout: []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10")})
	denied := result([][]string{{"rm", "-rf", "/var/lib/app"}}, &wire.Response{Status: wire.StatusDenied, Code: wire.CodeDeniedByOperator, Message: "denied by operator root on pts/3",
		DecidedBy: &wire.DecidedBy{By: wire.DecidedByPerson, Approver: "root (uid 0) on pts/3", Via: "remote", Note: "not the data dir: clean /var/cache/app instead"}})
	policyDenied := result([][]string{{"rm", "-rf", "/"}}, &wire.Response{Status: wire.StatusDenied, Code: wire.CodeDeniedByPolicy, Message: "denied by policy rule at /etc/rootgate/policy:1: deny any rm -rf /",
		DecidedBy: &wire.DecidedBy{By: wire.DecidedByPolicy, Rule: "deny any rm -rf /", Source: "/etc/rootgate/policy:1"}})
	earlier := result([][]string{{"journalctl", "-u", "nginx"}, {"tail", "-n", "1"}}, &wire.Response{Status: wire.StatusOK,
		Stages:    []wire.StageResult{{ExitCode: 1, Stderr: []byte("Failed to open journal: Permission denied\n")}, {}},
		DecidedBy: &wire.DecidedBy{By: wire.DecidedByPolicy, Rule: "allow unprivileged ...", Source: "/etc/rootgate/policy:3"}})
	killed := result([][]string{{"apt-get", "upgrade", "-y"}}, &wire.Response{Status: wire.StatusError, Code: wire.CodeKilledStopping, Message: wire.ErrKilledStopping.Error(),
		Stages: []wire.StageResult{{ExitCode: 143, Signal: "SIGTERM"}}, Stdout: []byte("Unpacking libc6 (2.39-0ubuntu8.4) over (2.39-0ubuntu8.3) ...\n"),
		DecidedBy: &wire.DecidedBy{By: wire.DecidedByPerson, Approver: "root (uid 0) on pts/3", Via: "remote"}})
	stale := result([][]string{{"id"}}, &wire.Response{Status: wire.StatusError, Code: wire.CodeStaleTime, Message: "request too old: 95s (max 60s)", DaemonTime: "2026-02-13T14:31:35Z"})
	stale.ClientTime = "2026-02-13T14:30:00Z"
	stale.Next = staleHint(stale.DaemonTime, stale.ClientTime)
	checked := &CheckResult{Status: wire.StatusOK, Check: wire.CheckAllow, Host: LocalHost, Message: "the policy allows this request without asking",
		DecidedBy: &DecidedBy{By: wire.DecidedByPolicy, Rule: "allow privileged systemctl status [a-z0-9]*", Source: "/etc/rootgate/policy:4"},
		Next:      "execute runs this without asking anyone, sent in exactly this form (same command, arguments, privileged, user, env and host).",
		Pipeline:  [][]string{{"systemctl", "status", "nginx"}}}
	noApprover := result([][]string{{"apt-get", "install", "-y", "nginx"}}, &wire.Response{Status: wire.StatusDenied, Code: wire.CodeNoApprover, Message: `no approver attached: run "sudo rootgate approve" in a terminal`})
	slow := result([][]string{{"apt-get", "upgrade", "-y"}}, &wire.Response{Status: wire.StatusTimeout, Message: "run exceeded its time limit of 1m0s",
		Stages: []wire.StageResult{{ExitCode: 143, Signal: "SIGTERM"}}, Stdout: []byte("Reading package lists...\n")})
	connErr := connectionResult(LocalHost, cfg.Socket, &client.ConnectError{Socket: cfg.Socket,
		Err: fmt.Errorf("dial unix %s: connect: %w", cfg.Socket, syscall.ENOENT)})
	if !strings.HasPrefix(connErr.Next, "No rootgated socket") {
		t.Fatalf("example connection error: %+v", connErr)
	}
	_, inErr := parseExecute(json.RawMessage(`{"argv":["ls"],"pipeline":[["ls"]],"reason":"r"}`), mustResolve(executeTool(cfg)))
	if inErr == nil {
		t.Fatal("example input error: accepted")
	}
	ping := &PingResult{Daemons: []DaemonStatus{
		{Host: "local", Socket: cfg.Socket, Reachable: true, Version: "1.0.0", Approver: "yes"},
		{Host: "web1", Socket: cfg.Hosts["web1"], Approver: "unknown",
			Message: "cannot connect to " + cfg.Hosts["web1"] + ": dial unix " + cfg.Hosts["web1"] + ": connect: connection refused",
			Next:    connectionHint("web1", cfg.Hosts["web1"], &client.ConnectError{Err: syscall.ECONNREFUSED})},
	}}
	pingText, _ := ping.text()
	h := &handler{cfg: Config{Wait: DefaultWait, MaxText: DefaultMaxText}}
	pending := h.result(&call{id: exampleID, host: LocalHost, pipeline: [][]string{{"apt-get", "upgrade", "-y"}},
		sent: time.Now(), done: make(chan struct{}), phase: PhaseApproval, changed: make(chan struct{})})
	var seq strings.Builder
	for i := 1; i <= 300; i++ {
		fmt.Fprintf(&seq, "%d\n", i)
	}
	seqResp := &wire.Response{ID: exampleID, Status: wire.StatusOK, Stages: []wire.StageResult{{}}, Stdout: []byte(seq.String())}
	cutExample := render(LocalHost, cfg.Socket, [][]string{{"seq", "300"}}, seqResp, 200)
	outputExample := readRange(seqResp, OutputInput{ID: exampleID, From: 25, Count: 5}, DefaultMaxText)
	return map[string]string{
		"result-pending":       pending.text(),
		"result-pending-json":  indent(pending),
		"result-cut":           cutExample.text(),
		"wait-input-schema":    indent(waitTool(&h.cfg).InputSchema),
		"output-input-schema":  indent(outputTool().InputSchema),
		"output":               outputExample.text(),
		"output-json":          indent(outputExample),
		"execute-input-schema": indent(executeSchema(cfg)),
		"ping-input-schema":    indent(pingTool(cfg).InputSchema),
		"instructions":         Instructions + "\n",
		"result-ok":            ok.text(),
		"result-ok-json":       indent(ok),
		"result-failed":        failed.text(),
		"result-latin1":        latin1.text(),
		"result-binary":        binary.text(),
		"result-denied":        denied.text(),
		"result-policy-denied": policyDenied.text(),
		"result-earlier-stage": earlier.text(),
		"result-killed":        killed.text(),
		"result-stale-time":    stale.text(),
		"check-input-schema":   indent(checkTool(cfg).InputSchema),
		"check":                checked.text(),
		"check-json":           indent(checked),
		"result-no-approver":   noApprover.text(),
		"result-time-limit":    slow.text(),
		"result-no-daemon":     connErr.text(),
		"result-input-error":   inputResult(inErr).text(),
		"ping":                 pingText,
		"ping-json":            indent(ping),
	}
}

var update = flag.Bool("update", false, "rewrite the generated blocks of docs/mcp.md")

var marker = regexp.MustCompile("(?s)<!-- generated: ([a-z0-9-]+) -->\n(```[a-z]*\n)(.*?)```\n")

// TestDocs holds docs/mcp.md to the code: every block marked as generated
// is what the code makes today, and every field of the results is
// described.
func TestDocs(t *testing.T) {
	b, err := os.ReadFile("../../../docs/mcp.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	want := docExamples(t)
	if *update {
		doc = marker.ReplaceAllStringFunc(doc, func(block string) string {
			m := marker.FindStringSubmatch(block)
			if w, ok := want[m[1]]; ok {
				return "<!-- generated: " + m[1] + " -->\n" + m[2] + w + "```\n"
			}
			return block
		})
		if err := os.WriteFile("../../../docs/mcp.md", []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	for _, m := range marker.FindAllStringSubmatch(doc, -1) {
		name, got := m[1], m[3]
		seen[name] = true
		w, ok := want[name]
		if !ok {
			t.Errorf("docs/mcp.md: unknown generated block %q", name)
			continue
		}
		if got != w {
			t.Errorf("docs/mcp.md: block %q is out of date; it should read:\n%s", name, w)
		}
	}
	for name, w := range want {
		if !seen[name] {
			t.Errorf("docs/mcp.md lacks the generated block %q:\n<!-- generated: %s -->\n%s", name, name, w)
		}
	}
	for _, v := range []any{Result{}, Stage{}, Stream{}, DaemonStatus{}, DecidedBy{}, CheckResult{}, OutputResult{}} {
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			if !strings.Contains(doc, "| `"+name+"` |") {
				t.Errorf("docs/mcp.md does not describe the result field %s of %s", name, rt.Name())
			}
		}
	}
}
