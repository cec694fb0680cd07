package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/wire"
)

// runFlags are rootgate run's flags.
var runFlags = []clidoc.Flag{
	socketFlag,
	{Name: "no-privilege", Default: false, Usage: "run as yourself instead of root"},
	{Name: "reason", Default: "", Usage: "why, shown to the approver"},
	{Name: "session", Default: "", Usage: "session name, shown to the approver"},
	{Name: "cwd", Default: "", Usage: "working `directory` (absolute; default /)"},
	{Name: "stdin-file", Default: "", Usage: "`file` fed to the first stage (- for standard input)"},
	{Name: "timeout", Default: 0.0, Usage: "run time limit in `seconds` (may only lower the daemon's)"},
	{Name: "forward-agent", Default: false, Usage: "forward the operator's SSH agent (needs --no-privilege)"},
	{Name: "user", Default: "", Usage: "run as this account `name` (or #UID) instead of root, as sudo -u does"},
	{Name: "group", Default: "", Usage: "run with this primary `group` (or #GID); without --user, as yourself with it, as sudo -g does"},
	{Name: "env", Default: clidoc.List(nil), Usage: "`KEY=VALUE` for the run (repeatable; allowlisted keys only)"},
}

func cmdRun(ctx context.Context, e *env, fl clidoc.Values, args []string) int {
	stderr := e.stderr
	pipeline, err := splitPipeline(args)
	if err != nil {
		errorWithHint(stderr, err.Error(), "rootgate run -- ls -l '|' wc -l")
		return exitUsage
	}
	noPriv, agent := fl.Bool("no-privilege"), fl.Bool("forward-agent")
	if agent && !noPriv {
		errorf(stderr, "--forward-agent needs --no-privilege")
		return exitUsage
	}
	runAs, runGroup := fl.String("user"), fl.String("group")
	if noPriv && (runAs != "" || runGroup != "") {
		errorWithHint(stderr, "--user and --group cannot go with --no-privilege: such a run is yours", "rootgate run --user postgres -- psql -l")
		return exitUsage
	}
	req := client.NewRequest(fl.String("session"))
	req.Pipeline = pipeline
	req.Reason = fl.String("reason")
	req.Cwd = fl.String("cwd")
	req.Timeout = fl.Float("timeout")
	req.ForwardAgent = agent
	req.RunAs, req.RunAsGroup = runAs, runGroup
	priv := !noPriv
	req.Privileged = &priv
	for _, kv := range fl.List("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			errorf(stderr, "--env %q is not KEY=VALUE", kv)
			return exitUsage
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	switch f := fl.String("stdin-file"); f {
	case "":
	case "-":
		req.Stdin, err = io.ReadAll(io.LimitReader(e.stdin, wire.MaxLine))
	default:
		req.Stdin, err = os.ReadFile(f)
	}
	if err != nil {
		return fail(stderr, fmt.Errorf("read stdin: %w", err))
	}

	resp, err := streamed(ctx, e, client.Socket(fl.String("socket")), req, nil)
	if err != nil {
		return failRun(ctx, stderr, err)
	}
	return report(resp, e.stdout, stderr)
}

// streamed sends req, a run, asking for its output as it is written
// (client.DoStream): its stdout and every stage's stderr go to e's stdout
// and stderr as they come, every byte. When rootgate's stdout is a pipe
// whose reader is gone (| head -1), the run's stdout ends as that reader
// ended rootgate's: the last stage's next write fails (SIGPIPE), the rest
// of the run goes on, and its stderr and exit codes come as under a
// shell (for that, SIGPIPE does not kill rootgate while the run is
// streamed: its write to stdout fails with EPIPE). A write to stderr
// that fails ends the call and the run. onProgress gets the phases.
func streamed(ctx context.Context, e *env, socket string, req *wire.Outgoing, onProgress func(string)) (*wire.Response, error) {
	pipes := make(chan os.Signal, 1)
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	return client.DoStream(ctx, socket, req, onProgress, client.WriteFrames(e.stdout, e.stderr))
}

// exitInterrupted is the exit code of a run ended by SIGINT or SIGTERM:
// the request was withdrawn, and its run killed.
const exitInterrupted = 130

// failRun reports the error that ended a run's request, err; a request
// ended by SIGINT or SIGTERM (ctx) is told so and exits exitInterrupted.
func failRun(ctx context.Context, stderr io.Writer, err error) int {
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		sayf(stderr, "interrupted", "the request was withdrawn; a run it had started was killed")
		return exitInterrupted
	}
	return fail(stderr, err)
}

// outputCut reports whether some of resp's output was cut.
func outputCut(resp *wire.Response) bool {
	if resp.StdoutTruncated {
		return true
	}
	for _, st := range resp.Stages {
		if st.StderrTruncated {
			return true
		}
	}
	return false
}

// splitPipeline cuts args at each "|" argument into stages.
func splitPipeline(args []string) ([][]string, error) {
	if len(args) == 0 {
		return nil, errors.New("no command given")
	}
	var stages [][]string
	var cur []string
	for _, a := range args {
		if a == "|" {
			if len(cur) == 0 {
				return nil, errors.New("empty stage in pipeline")
			}
			stages = append(stages, cur)
			cur = nil
			continue
		}
		cur = append(cur, a)
	}
	if len(cur) == 0 {
		return nil, errors.New("empty stage in pipeline")
	}
	return append(stages, cur), nil
}

// report writes a run's output, when the answer holds it (an older
// rootgated, without streamed output), and turns the response into an
// exit code. Output cut at the answer's caps is never passed off as
// whole: it is said on stderr and the exit code is exitError.
func report(resp *wire.Response, stdout, stderr io.Writer) int {
	if resp.HasRun() {
		_, _ = stdout.Write(resp.Stdout)
		for _, st := range resp.Stages {
			_, _ = stderr.Write(st.Stderr)
		}
		for i, st := range resp.Stages {
			if st.StderrTruncated {
				warningf(stderr, "stage %d's stderr was cut: the stages' stderr keep %d MiB together", i+1, wire.MaxCapture>>20)
			}
		}
		if resp.StdoutTruncated {
			warningf(stderr, "stdout was cut at %d MiB", wire.MaxCapture>>20)
		}
	}
	if resp.Status == wire.StatusOK && resp.HasRun() && outputCut(resp) {
		errorf(stderr, "the run's output was cut (rootgated did not stream it, and its answer holds at most %d MiB of stdout and of stderr): exit code %d is the command's; update rootgated to get every byte",
			wire.MaxCapture>>20, resp.Stages[len(resp.Stages)-1].ExitCode)
		return exitError
	}
	switch resp.Status {
	case wire.StatusOK:
		if len(resp.Stages) == 0 {
			return fail(stderr, errors.New("daemon answered ok without a result"))
		}
		return resp.Stages[len(resp.Stages)-1].ExitCode
	case wire.StatusDenied:
		sayf(stderr, "denied", "%s", resp.Message)
		if d := resp.DecidedBy; d != nil && d.Note != "" {
			sayf(stderr, "note", "%s wrote: %q", d.Approver, d.Note)
		}
		return exitDenied
	case wire.StatusTimeout:
		sayf(stderr, "timeout", "%s", resp.Message)
		return exitTimeout
	}
	errorf(stderr, "%s", resp.Message)
	if resp.Code == wire.CodeStaleTime && resp.DaemonTime != "" {
		hintf(stderr, "rootgated's clock says %s, this machine's %s: if they differ, check time synchronisation (timedatectl) on both machines",
			resp.DaemonTime, time.Now().UTC().Format(time.RFC3339))
	}
	return exitError
}

func cmdSend(ctx context.Context, e *env, fl clidoc.Values, _ []string) int {
	stdin, stdout, stderr := e.stdin, e.stdout, e.stderr
	// Sent as read, up to a byte past the limit, so the daemon itself
	// judges size and framing.
	line, err := io.ReadAll(io.LimitReader(stdin, wire.MaxLine+1))
	if err != nil {
		return fail(stderr, fmt.Errorf("read stdin: %w", err))
	}
	if i := strings.IndexByte(string(line), '\n'); i >= 0 {
		line = line[:i+1]
	}
	resp, err := client.RoundTrip(ctx, client.Socket(fl.String("socket")), line)
	if err != nil {
		return fail(stderr, err)
	}
	_, _ = stdout.Write(resp)
	return exitOK
}

func cmdPing(ctx context.Context, e *env, fl clidoc.Values, _ []string) int {
	stdout, stderr := e.stdout, e.stderr
	req := client.NewRequest("")
	req.Action = wire.ActionPing
	resp, err := client.Do(ctx, client.Socket(fl.String("socket")), req)
	if err != nil {
		return fail(stderr, err)
	}
	if resp.Status != wire.StatusOK {
		errorf(stderr, "%s", resp.Message)
		return exitError
	}
	fmt.Fprintf(stdout, "%s (rootgated %s)\n", resp.Message, resp.Version)
	return exitOK
}
