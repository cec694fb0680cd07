package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// mcpEnv is a real rootgated on a private socket, and the real rootgate
// (rgtest.Binaries, which every user may run).
type mcpEnv struct {
	dir, sock, asock, bin string
	daemon                *rgtest.Daemon
}

const mcpPolicy = `deny  any  rm ...
ask   any  env ASKME=1 ...
allow any,env=LANG
`

func startMCPEnv(t *testing.T) *mcpEnv {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("rootgated needs root: run the tests as root")
	}
	dir := testutil.ShortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil { // nobody runs rootgate mcp from here
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + dir}
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: dir, Policy: mcpPolicy, Env: env, Args: []string{"--kill-grace", "1s", "--prompt-timeout", "60s"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rootgated said:\n%s", d.Stderr)
		}
	})
	e := &mcpEnv{dir: dir, sock: d.Sock, asock: d.ApproverSock(), bin: rgtest.Rootgate(t), daemon: d}
	if err := os.Chmod(e.sock, 0o666); err != nil { // nobody is a requester too
		t.Fatal(err)
	}
	return e
}

// progressLog collects the progress notifications a client receives.
type progressLog struct {
	mu    sync.Mutex
	notes []*mcp.ProgressNotificationParams
}

func (p *progressLog) add(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notes = append(p.notes, req.Params)
}

func (p *progressLog) of(token any) []*mcp.ProgressNotificationParams {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*mcp.ProgressNotificationParams
	for _, n := range p.notes {
		if fmt.Sprint(n.ProgressToken) == fmt.Sprint(token) {
			out = append(out, n)
		}
	}
	return out
}

// mcpClient is `rootgate mcp` run by the SDK's CommandTransport.
type mcpClient struct {
	cs       *mcp.ClientSession
	progress *progressLog
	tools    map[string]*mcp.Tool
	stderr   *syncBuffer
}

// startMCP runs `rootgate mcp --socket SOCK ARGS...` as uid (0 or nobody)
// and connects the SDK client to it over its stdin and stdout.
func (e *mcpEnv) startMCP(t *testing.T, uid uint32, args ...string) *mcpClient {
	t.Helper()
	cmd := exec.Command(e.bin, append([]string{"mcp", "--socket", e.sock}, args...)...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}
	}
	c := &mcpClient{progress: &progressLog{}, tools: map[string]*mcp.Tool{}, stderr: &syncBuffer{}}
	cmd.Stderr = c.stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "1"},
		&mcp.ClientOptions{ProgressNotificationHandler: c.progress.add})
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.cs = cs
	t.Cleanup(func() {
		cs.Close()
		if t.Failed() {
			t.Logf("rootgate mcp said:\n%s", c.stderr.String())
		}
	})
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range lt.Tools {
		c.tools[tl.Name] = tl
	}
	return c
}

// execute calls the execute tool and decodes the structured result,

// startMCPPipes starts `rootgate mcp` on e's daemon with args, its stdin
// and stdout left to the test (a client that dies is its stdin closed).
func (e *mcpEnv) startMCPPipes(t *testing.T, args ...string) (*exec.Cmd, io.WriteCloser, io.ReadCloser) {
	t.Helper()
	cmd := exec.Command(e.bin, append([]string{"mcp", "--socket", e.sock}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdin, stdout
}

// mcpAnswer is an execute call's result, as executeAsync delivers it.
type mcpAnswer struct {
	res  *mcp.CallToolResult
	text string
	r    mcpserver.Result
}

// executeAsync calls execute with args in the background.
func (c *mcpClient) executeAsync(t *testing.T, args map[string]any) <-chan mcpAnswer {
	done := make(chan mcpAnswer, 1)
	go func() {
		res, text, r := c.execute(t, args)
		done <- mcpAnswer{res, text, r}
	}()
	return done
}

// checking it against the declared output schema.
func (c *mcpClient) execute(t *testing.T, args map[string]any) (*mcp.CallToolResult, string, mcpserver.Result) {
	t.Helper()
	res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var r mcpserver.Result
	structured(t, c.tools["execute"], res, &r)
	if len(res.Content) != 1 {
		t.Fatalf("content: %v", res.Content)
	}
	return res, res.Content[0].(*mcp.TextContent).Text, r
}

func structured(t *testing.T, tool *mcp.Tool, res *mcp.CallToolResult, into any) {
	t.Helper()
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	var s jsonschema.Schema
	b, _ := json.Marshal(tool.OutputSchema)
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	_ = json.Unmarshal(raw, &v)
	if err := rs.Validate(v); err != nil {
		t.Errorf("structured result does not match the output schema: %v\n%s", err, raw)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// textStream is what a text stream of captured output decodes to.
func textStream(s string) mcpserver.Stream {
	return mcpserver.Stream{Bytes: len(s), SHA256: sha(s), Text: s}
}

var uuidRe = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// checkResult compares a result field by field with want and the text
// with wantText. An empty want.ID stands for any UUID, which ID in
// wantText then stands for; "none" wants no id. A policy rule in
// want.DecidedBy adds its "decided by" line after wantText's first.
func checkResult(t *testing.T, res *mcp.CallToolResult, text string, got, want mcpserver.Result, wantText string, wantError bool) {
	t.Helper()
	if d := want.DecidedBy; d != nil && d.By == "policy" {
		first, rest, _ := strings.Cut(wantText, "\n")
		wantText = first + "\ndecided by: the policy rule at " + d.Source + ": " + d.Rule + "\n" + rest
	}
	if want.ID == "" { // a request the daemon saw: any fresh UUID
		if !uuidRe.MatchString(got.ID) {
			t.Errorf("id %q is not a UUID", got.ID)
		}
		want.ID = got.ID
	} else if want.ID == "none" {
		want.ID = ""
	}
	gb, _ := json.MarshalIndent(got, "", " ")
	wb, _ := json.MarshalIndent(want, "", " ")
	if string(gb) != string(wb) {
		t.Errorf("structured result:\n%s\nwant:\n%s", gb, wb)
	}
	if wantText = strings.ReplaceAll(wantText, "ID", got.ID); text != wantText {
		t.Errorf("text:\n%s\nwant:\n%s", text, wantText)
	}
	if res.IsError != wantError {
		t.Errorf("isError %v, want %v", res.IsError, wantError)
	}
}

func ptrTo[T any](v T) *T { return &v }

// rule is the decided_by of line n of mcpPolicy.
func (e *mcpEnv) rule(n int) *mcpserver.DecidedBy {
	text := strings.TrimSpace(strings.Split(mcpPolicy, "\n")[n-1])
	return &mcpserver.DecidedBy{By: "policy", Rule: text, Source: e.dir + "/policy:" + strconv.Itoa(n)}
}

func TestMCPExecute(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	c := e.startMCP(t, 0, "--max-text", "4096", "--host", "gone="+e.dir+"/nothing-here")

	t.Run("single command", func(t *testing.T) {
		res, text, r := c.execute(t, map[string]any{"argv": []string{"sh", "-c", "echo out; echo err >&2"}, "reason": "e2e: one command"})
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "ok", Host: "local", ExitCode: ptrTo(0), DecidedBy: e.rule(3),
			Stages:   []mcpserver.Stage{{ExitCode: 0, Stderr: textStream("err\n")}},
			Stdout:   ptrTo(textStream("out\n")),
			Pipeline: [][]string{{"sh", "-c", "echo out; echo err >&2"}},
		}, `status: ok: approved and run; exit code 0
host: local, request id: ID
stage 1 sh -c 'echo out; echo err >&2': exit code 0
--- stdout: 4 bytes ---
out
--- end of stdout ---
--- stderr: 4 bytes ---
err
--- end of stderr ---
`, false)
	})

	t.Run("pipeline whose last stage fails", func(t *testing.T) {
		pipe := [][]string{{"printf", `b\na\n`}, {"sort"}, {"sh", "-c", "cat; echo last >&2; exit 3"}}
		res, text, r := c.execute(t, map[string]any{"pipeline": pipe, "reason": "e2e: pipeline"})
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "ok", Host: "local", ExitCode: ptrTo(3), DecidedBy: e.rule(3),
			Stages: []mcpserver.Stage{
				{ExitCode: 0, Stderr: textStream("")},
				{ExitCode: 0, Stderr: textStream("")},
				{ExitCode: 3, Stderr: textStream("last\n")},
			},
			Stdout:   ptrTo(textStream("a\nb\n")),
			Pipeline: pipe,
		}, `status: ok: approved and run, but the last command exited with code 3
host: local, request id: ID
stage 1 printf 'b\na\n': exit code 0
stage 2 sort: exit code 0
stage 3 sh -c 'cat; echo last >&2; exit 3': exit code 3
--- stdout: 4 bytes ---
a
b
--- end of stdout ---
stderr of stage 1: empty
stderr of stage 2: empty
--- stderr of stage 3: 5 bytes ---
last
--- end of stderr of stage 3 ---
`, true)
	})

	t.Run("stdin, cwd and env", func(t *testing.T) {
		argv := []string{"sh", "-c", `pwd; echo "$LANG"; cat`}
		res, text, r := c.execute(t, map[string]any{"argv": argv, "reason": "e2e: stdin", "cwd": "/tmp",
			"stdin": "fed through MCP", "env": map[string]string{"LANG": "C.UTF-8"}})
		out := "/tmp\nC.UTF-8\nfed through MCP"
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "ok", Host: "local", ExitCode: ptrTo(0), DecidedBy: e.rule(3),
			Stages:   []mcpserver.Stage{{Stderr: textStream("")}},
			Stdout:   ptrTo(textStream(out)),
			Pipeline: [][]string{argv},
		}, `status: ok: approved and run; exit code 0
host: local, request id: ID
stage 1 sh -c 'pwd; echo "$LANG"; cat': exit code 0
--- stdout: 28 bytes ---
/tmp
C.UTF-8
fed through MCP
[no newline at the end]
--- end of stdout ---
stderr: empty
`, false)
	})

	t.Run("denied by policy", func(t *testing.T) {
		res, text, r := c.execute(t, map[string]any{"argv": []string{"rm", "-rf", "/nonexistent"}, "reason": "e2e: denied"})
		next := "The operator's policy forbids this. Do not try to reach the same effect another way (through sh -c, another program, a script, or by splitting it into steps): that is what the rule forbids. Tell the user what you wanted to do and why, and ask them how to proceed."
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "denied", Host: "local", Message: "denied by policy rule at " + e.dir + "/policy:1: deny  any  rm ...", Next: next, DecidedBy: e.rule(1),
			Pipeline: [][]string{{"rm", "-rf", "/nonexistent"}},
		}, "status: denied: denied by policy rule at "+e.dir+"/policy:1: deny  any  rm ...\nhost: local, request id: ID\nnext: "+next+"\n", true)
	})

	t.Run("time limit", func(t *testing.T) {
		argv := []string{"sh", "-c", "echo started; exec sleep 30"}
		res, text, r := c.execute(t, map[string]any{"argv": argv, "reason": "e2e: too slow", "timeout": 0.5})
		next := "The run was killed at its time limit; the output is what it wrote before. Ask again with a larger timeout only if the command really needs longer (rootgated's own limit still applies)."
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "timeout", Host: "local", Message: "run exceeded its time limit of 500ms", Next: next, TimeLimitHit: true, DecidedBy: e.rule(3),
			ExitCode: ptrTo(143),
			Stages:   []mcpserver.Stage{{ExitCode: 143, Signal: "SIGTERM", Stderr: textStream("")}},
			Stdout:   ptrTo(textStream("started\n")),
			Pipeline: [][]string{argv},
		}, `status: timeout: run exceeded its time limit of 500ms
host: local, request id: ID
the run hit its time limit and was killed; below is what it wrote before
stage 1 sh -c 'echo started; exec sleep 30': exit code 143 (killed by SIGTERM)
--- stdout: 8 bytes ---
started
--- end of stdout ---
stderr: empty
next: `+next+"\n", true)
	})

	t.Run("output over the text limit", func(t *testing.T) {
		var sb strings.Builder
		for i := 1; i <= 3000; i++ {
			fmt.Fprintf(&sb, "%d\n", i)
		}
		full := sb.String() // 13893 bytes
		res, text, r := c.execute(t, map[string]any{"argv": []string{"seq", "3000"}, "reason": "e2e: long"})
		// --max-text 4096, for the whole result: whole lines, up to 2048
		// bytes from the start, the rest of the budget from the end.
		head := strings.LastIndex(full[:2048], "\n") + 1
		tail := len(full) - (4096 - head)
		tail += strings.Index(full[tail-1:], "\n")
		first, last := strings.Count(full[:head], "\n")+1, strings.Count(full[:tail], "\n")
		marker := fmt.Sprintf(`[... lines %d to %d of 3000 (%d bytes) cut here by rootgate mcp; read them with the output tool: {"id": %q, "stream": "stdout", "from": %d, "count": %d} ...]`+"\n",
			first, last, tail-head, r.ID, first, last-first+1)
		shown := full[:head] + marker + full[tail:]
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "ok", Host: "local", ID: r.ID, ExitCode: ptrTo(0), DecidedBy: e.rule(3),
			Stages:   []mcpserver.Stage{{Stderr: textStream("")}},
			Stdout:   &mcpserver.Stream{Bytes: 13893, SHA256: sha(full), Text: shown, OmittedBytes: tail - head, OmittedLines: last - first + 1},
			Pipeline: [][]string{{"seq", "3000"}},
		}, fmt.Sprintf(`status: ok: approved and run; exit code 0
host: local, request id: ID
stage 1 seq 3000: exit code 0
--- stdout: 13893 bytes; %d bytes cut from the middle, see the marker ---
`, tail-head)+shown+`--- end of stdout ---
stderr: empty
`, false)

		// The output tool reads what was cut, in pieces within the budget,
		// without running anything again.
		var got strings.Builder
		for from := first; from <= last; {
			res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "output", Arguments: map[string]any{
				"id": r.ID, "stream": "stdout", "from": from, "count": last - from + 1}})
			if err != nil {
				t.Fatal(err)
			}
			var o mcpserver.OutputResult
			structured(t, c.tools["output"], res, &o)
			if res.IsError || o.From != from || len(o.Text) > 4096 || o.Text == "" {
				t.Fatalf("output from %d: %+v", from, o)
			}
			got.WriteString(o.Text)
			from = o.To + 1
		}
		if full[:head]+got.String()+full[tail:] != full {
			t.Error("the ranges read do not fill the cut")
		}
		// A byte range, anywhere.
		res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "output", Arguments: map[string]any{
			"id": r.ID, "unit": "bytes", "from": 5001, "count": 10}})
		if err != nil {
			t.Fatal(err)
		}
		var o mcpserver.OutputResult
		structured(t, c.tools["output"], res, &o)
		if o.Text != full[5000:5010] || o.From != 5001 || o.To != 5010 || o.Total != 13893 || o.NextFrom != 5011 {
			t.Errorf("bytes 5001 to 5010: %+v", o)
		}
	})

	t.Run("binary output", func(t *testing.T) {
		png := "\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"
		argv := []string{"printf", `\211PNG\r\n\032\n\000\000\000\rIHDR`}
		res, text, r := c.execute(t, map[string]any{"argv": argv, "reason": "e2e: binary"})
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "ok", Host: "local", ExitCode: ptrTo(0), DecidedBy: e.rule(3),
			Stages:   []mcpserver.Stage{{Stderr: textStream("")}},
			Stdout:   &mcpserver.Stream{Bytes: 16, SHA256: sha(png), Binary: true, ContentType: "image/png"},
			Pipeline: [][]string{argv},
		}, `status: ok: approved and run; exit code 0
host: local, request id: ID
stage 1 printf '\211PNG\r\n\032\n\000\000\000\rIHDR': exit code 0
stdout: binary output (image/png), 16 bytes, sha256 `+sha(png)+`; not shown
stderr: empty
`, false)

		zeros := strings.Repeat("\x00", 4096)
		res, text, r = c.execute(t, map[string]any{"argv": []string{"head", "-c", "4096", "/dev/zero"}, "reason": "e2e: zeros"})
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "ok", Host: "local", ExitCode: ptrTo(0), DecidedBy: e.rule(3),
			Stages:   []mcpserver.Stage{{Stderr: textStream("")}},
			Stdout:   &mcpserver.Stream{Bytes: 4096, SHA256: sha(zeros), Binary: true, ContentType: "application/octet-stream"},
			Pipeline: [][]string{{"head", "-c", "4096", "/dev/zero"}},
		}, `status: ok: approved and run; exit code 0
host: local, request id: ID
stage 1 head -c 4096 /dev/zero: exit code 0
stdout: binary output (application/octet-stream), 4096 bytes, sha256 `+sha(zeros)+`; not shown
stderr: empty
`, false)
	})

	t.Run("non-UTF-8 output", func(t *testing.T) {
		argv := []string{"printf", `caf\351 cr\350me\n`}
		res, text, r := c.execute(t, map[string]any{"argv": argv, "reason": "e2e: latin-1"})
		raw := "caf\xe9 cr\xe8me\n"
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "ok", Host: "local", ExitCode: ptrTo(0), DecidedBy: e.rule(3),
			Stages:   []mcpserver.Stage{{Stderr: textStream("")}},
			Stdout:   &mcpserver.Stream{Bytes: 11, SHA256: sha(raw), Text: `caf\xe9 cr\xe8me` + "\n", InvalidUTF8Bytes: 2},
			Pipeline: [][]string{argv},
		}, `status: ok: approved and run; exit code 0
host: local, request id: ID
stage 1 printf 'caf\351 cr\350me\n': exit code 0
--- stdout: 11 bytes; 2 bytes not UTF-8, shown as \xNN ---
caf\xe9 cr\xe8me
--- end of stdout ---
stderr: empty
`, false)
	})

	t.Run("daemon refuses the request", func(t *testing.T) {
		res, text, r := c.execute(t, map[string]any{"argv": []string{"no-such-program-rg"}, "reason": "e2e: typo"})
		next := "Programs are looked up in /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin, not in your PATH: check the name, give an absolute path, or check that the program is installed."
		checkResult(t, res, text, r, mcpserver.Result{
			Status: "error", Host: "local", Message: `stage 1: executable not found: "no-such-program-rg"`, Next: next,
			Pipeline: [][]string{{"no-such-program-rg"}},
		}, "status: error: stage 1: executable not found: \"no-such-program-rg\"\nhost: local, request id: ID\nnext: "+next+"\n", true)
	})

	t.Run("no daemon on the host", func(t *testing.T) {
		sock := e.dir + "/nothing-here"
		res, text, r := c.execute(t, map[string]any{"argv": []string{"id"}, "reason": "e2e: elsewhere", "host": "gone"})
		msg := "cannot connect to " + sock + ": dial unix " + sock + ": connect: no such file or directory"
		next := "Host gone's socket " + sock + " does not answer: the forward to that machine (e.g. its ssh -L) is down, or rootgated there is not running. Ask the user to restore the forward or start rootgated on gone, then check with ping."
		checkResult(t, res, text, r, mcpserver.Result{Status: "error", Host: "gone", ID: "none", Message: msg, Next: next},
			"status: error: "+msg+"\nhost: gone\nnext: "+next+"\n", true)
	})

	t.Run("ping with and without a daemon", func(t *testing.T) {
		res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ping", Arguments: map[string]any{}})
		if err != nil {
			t.Fatal(err)
		}
		var r mcpserver.PingResult
		structured(t, c.tools["ping"], res, &r)
		sock := e.dir + "/nothing-here"
		noApprover := "No approver is attached: requests the policy does not allow will be denied. Ask the user to run `sudo rootgate approve` in a terminal before such a request."
		want := []mcpserver.DaemonStatus{
			{Host: "local", Socket: e.sock, Reachable: true, Version: "dev", Approver: "no", Next: noApprover},
			{Host: "gone", Socket: sock, Approver: "unknown",
				Message: "cannot connect to " + sock + ": dial unix " + sock + ": connect: no such file or directory",
				Next:    "Host gone's socket " + sock + " does not answer: the forward to that machine (e.g. its ssh -L) is down, or rootgated there is not running. Ask the user to restore the forward or start rootgated on gone, then check with ping."},
		}
		gb, _ := json.Marshal(r.Daemons)
		wb, _ := json.Marshal(want)
		if string(gb) != string(wb) {
			t.Errorf("ping:\n%s\nwant\n%s", gb, wb)
		}
		wantText := "local: rootgated dev answers on " + e.sock + "; approver attached: no\nnext: " + noApprover + "\n" +
			"gone: not reachable on " + sock + ": " + want[1].Message + "\nnext: " + want[1].Next + "\n"
		if got := res.Content[0].(*mcp.TextContent).Text; got != wantText || !res.IsError {
			t.Errorf("ping text (isError %v):\n%s\nwant\n%s", res.IsError, got, wantText)
		}
		res, err = c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ping", Arguments: map[string]any{"host": "local"}})
		if err != nil {
			t.Fatal(err)
		}
		if got := res.Content[0].(*mcp.TextContent).Text; res.IsError || got != "local: rootgated dev answers on "+e.sock+"; approver attached: no\nnext: "+noApprover+"\n" {
			t.Errorf("ping local (isError %v): %s", res.IsError, got)
		}
	})
}

// TestMCPUnprivileged runs rootgate mcp as nobody: an unprivileged request
// runs as nobody, and a socket nobody may not use is a clear error.
func TestMCPUnprivileged(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	const nobody = 65534
	// The approver socket is 0600 root: connecting to it is refused just
	// as a request socket is to a user outside group rootgate.
	c := e.startMCP(t, nobody, "--host", "locked="+e.asock)
	argv := []string{"id", "-un"}
	res, text, r := c.execute(t, map[string]any{"argv": argv, "reason": "e2e: who am I", "privileged": false})
	checkResult(t, res, text, r, mcpserver.Result{
		Status: "ok", Host: "local", ExitCode: ptrTo(0), DecidedBy: e.rule(3),
		Stages:   []mcpserver.Stage{{Stderr: textStream("")}},
		Stdout:   ptrTo(textStream("nobody\n")),
		Pipeline: [][]string{argv},
	}, `status: ok: approved and run; exit code 0
host: local, request id: ID
stage 1 id -un: exit code 0
--- stdout: 7 bytes ---
nobody
--- end of stdout ---
stderr: empty
`, false)

	res, text, r = c.execute(t, map[string]any{"argv": argv, "reason": "e2e: not allowed", "host": "locked"})
	msg := "cannot connect to " + e.asock + ": dial unix " + e.asock + ": connect: permission denied"
	next := "This user may not use " + e.asock + ": " + client.PermissionHint(e.asock) + ". Ask the user to do so, then restart this MCP server from a new login session."
	checkResult(t, res, text, r, mcpserver.Result{Status: "error", Host: "locked", ID: "none", Message: msg, Next: next},
		"status: error: "+msg+"\nhost: locked\nnext: "+next+"\n", true)
}

// testApprover is an approver client speaking the approver protocol on the
// daemon's approver socket; it answers pings and hands on everything else.
type testApprover struct {
	conn net.Conn
	msgs chan *remote.Message
	mu   sync.Mutex // guards writes
}

func attachApprover(t *testing.T, asock string) *testApprover {
	t.Helper()
	conn, err := net.Dial("unix", asock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	a := &testApprover{conn: conn, msgs: make(chan *remote.Message, 16)}
	a.send(t, &remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Client: "e2e", Name: "e2e", Capabilities: []string{"terminal"}})
	go func() {
		defer close(a.msgs)
		br := bufio.NewReader(conn)
		for {
			m, err := remote.ReadMessage(br, remote.MaxDaemonLine)
			if err != nil {
				return
			}
			if m.Type == remote.MsgPing {
				a.mu.Lock()
				_ = remote.WriteMessage(conn, &remote.Message{Type: remote.MsgPong})
				a.mu.Unlock()
				continue
			}
			a.msgs <- m
		}
	}()
	if m := a.next(t); m.Type != remote.MsgWelcome {
		t.Fatalf("approver got %+v, want welcome", m)
	}
	return a
}

func (a *testApprover) send(t *testing.T, m *remote.Message) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := remote.WriteMessage(a.conn, m); err != nil {
		t.Fatal(err)
	}
}

func (a *testApprover) next(t *testing.T) *remote.Message {
	t.Helper()
	select {
	case m, ok := <-a.msgs:
		if !ok {
			t.Fatal("the daemon closed the approver connection")
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("the approver got nothing within 30s")
	}
	return nil
}

// TestMCPWaitAndCancel: progress notifications arrive while the prompt is
// pending; cancelling the call kills the run; a client that goes away
// withdraws its prompt.
func TestMCPWaitAndCancel(t *testing.T) {
	t.Parallel()
	e := startMCPEnv(t)
	c := e.startMCP(t, 0, "--progress-interval", "100ms")
	a := attachApprover(t, e.asock)

	// ping tells the model that a person can be asked now.
	res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ping", Arguments: map[string]any{}})
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Content[0].(*mcp.TextContent).Text; res.IsError || got != "local: rootgated dev answers on "+e.sock+"; approver attached: yes\n" {
		t.Errorf("ping with an approver (isError %v): %s", res.IsError, got)
	}

	pidFile := e.dir + "/pid"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const token = "tok-1"
	done := make(chan error, 1)
	go func() {
		p := &mcp.CallToolParams{Name: "execute", Arguments: map[string]any{
			"argv":   []string{"env", "ASKME=1", "sh", "-c", "echo $$ > " + pidFile + "; exec sleep 300"},
			"reason": "e2e: wait, then be cancelled",
		}}
		p.SetProgressToken(token)
		_, err := c.cs.CallTool(ctx, p)
		done <- err
	}()

	prompt := a.next(t)
	if prompt.Type != remote.MsgPrompt {
		t.Fatalf("approver got %+v, want a prompt", prompt)
	}
	if prompt.Request.Reason != "e2e: wait, then be cancelled" || prompt.Request.Session != "mcp: e2e-agent" {
		t.Errorf("prompt: %+v", prompt.Request)
	}
	// While the prompt is pending, progress arrives, naming the phase,
	// its counter rising.
	// (The daemon may take a while to reach the prompt on a loaded machine:
	// wait for the phase, not for a number of notifications.)
	waitFor(t, "progress to say a person is asked", func() bool {
		notes := c.progress.of(token)
		return len(notes) >= 3 && strings.HasPrefix(notes[len(notes)-1].Message, "waiting for a person to approve it")
	})
	notes := c.progress.of(token)
	phases := regexp.MustCompile(`^(sent to rootgated \(host local, \d+s ago\); no decision yet|waiting for a person to approve it \(host local, sent \d+s ago\))$`)
	for i, n := range notes {
		if !phases.MatchString(n.Message) {
			t.Errorf("progress message %q", n.Message)
		}
		if i > 0 && n.Progress <= notes[i-1].Progress {
			t.Errorf("progress did not rise: %v then %v", notes[i-1].Progress, n.Progress)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the call ended while the prompt was pending: %v", err)
	default:
	}
	// Calls are served concurrently: the model may ping while it waits.
	if res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "ping", Arguments: map[string]any{}}); err != nil || res.IsError {
		t.Errorf("ping while execute waits: %v %v", err, res)
	}

	// Approved, the run starts; cancelling the call kills it.
	yes := true
	a.send(t, &remote.Message{Type: remote.MsgDecision, ID: prompt.ID, Hash: prompt.Hash, Approve: &yes})
	var pid int
	waitFor(t, "the run to write its pid", func() bool {
		b, err := os.ReadFile(pidFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	procDir := fmt.Sprintf("/proc/%d", pid)
	waitFor(t, "the run to exec sleep 300", func() bool { // the shell wrote its pid just before exec
		cmdline, _ := os.ReadFile(procDir + "/cmdline")
		return strings.HasPrefix(string(cmdline), "sleep\x00300")
	})
	waitFor(t, "progress to say the command runs", func() bool {
		notes := c.progress.of(token)
		return strings.HasPrefix(notes[len(notes)-1].Message, "approved and running (host local, sent ")
	})
	// Cancelling execute before it returned the call's id withdraws the
	// request: the model never learnt the id to wait for or cancel.
	cancel()
	if err := <-done; err == nil {
		t.Error("a cancelled call returned no error")
	}
	waitFor(t, "the run's process to be gone", func() bool {
		_, err := os.Stat(procDir)
		return os.IsNotExist(err)
	})

	// The approver is told how the approved run ended.
	if m := a.next(t); m.Type != remote.MsgResult || m.ID != prompt.ID {
		t.Errorf("approver got %+v, want the result of %s", m, prompt.ID)
	}

	// A client that goes away takes its request with it: the prompt is
	// withdrawn, and rootgate mcp exits 0. (The SDK's ClientSession.Close
	// waits for calls in flight, so the client's end of the pipe is closed
	// here by hand, as a client that dies would leave it.)
	cmd, stdin, stdout := e.startMCPPipes(t)
	exited := make(chan error, 1)
	cs2, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-agent", Version: "1"}, nil).
		Connect(context.Background(), &mcp.IOTransport{Reader: stdout, Writer: stdin}, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		_, _ = cs2.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute", Arguments: map[string]any{
			"argv": []string{"env", "ASKME=1", "true"}, "reason": "e2e: abandoned"}})
	}()
	prompt = a.next(t)
	if prompt.Type != remote.MsgPrompt || prompt.Request.Reason != "e2e: abandoned" {
		t.Fatalf("approver got %+v, want the abandoned prompt", prompt)
	}
	stdin.Close()
	go func() { exited <- cmd.Wait() }()
	if m := a.next(t); m.Type != remote.MsgWithdraw || m.ID != prompt.ID || m.Reason != "client went away" {
		t.Errorf("approver got %+v, want the prompt withdrawn", m)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("rootgate mcp exited with %v when its client left", err)
		}
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Error("rootgate mcp did not exit when its client left")
	}
}
