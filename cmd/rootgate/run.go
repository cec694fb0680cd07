package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/wire"
)

// newFlags makes a command's flag set, writing its errors to stderr. When
// stderr is a [*flagSets] (the manual page asking), the set is handed to it.
func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("rootgate "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	if c, ok := stderr.(*flagSets); ok {
		c.sets = append(c.sets, fs)
	}
	return fs
}

// parseFlags parses args; when parsing ends the command, ok is false and
// code is its exit code (0 for -h, 2 for a bad flag).
func parseFlags(fs *flag.FlagSet, args []string) (code int, ok bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, false
		}
		return exitUsage, false
	}
	return 0, true
}

// parseNoArgs is parseFlags for a command that takes no arguments besides
// its flags: one left over is a usage error.
func parseNoArgs(fs *flag.FlagSet, args []string, stderr io.Writer) (code int, ok bool) {
	if code, ok := parseFlags(fs, args); !ok {
		return code, false
	}
	if fs.NArg() > 0 {
		errorf(stderr, "unexpected argument %q", fs.Arg(0))
		return exitUsage, false
	}
	return 0, true
}

func cmdRun(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("run", stderr)
	socket := fs.String("socket", "", "request socket `path`")
	noPriv := fs.Bool("no-privilege", false, "run as yourself instead of root")
	reason := fs.String("reason", "", "why, shown to the approver")
	session := fs.String("session", "", "session name, shown to the approver")
	cwd := fs.String("cwd", "", "working `directory` (absolute; default /)")
	stdinFile := fs.String("stdin-file", "", "`file` fed to the first stage (- for standard input)")
	timeout := fs.Float64("timeout", 0, "run time limit in `seconds` (may only lower the daemon's)")
	agent := fs.Bool("forward-agent", false, "forward the operator's SSH agent (needs --no-privilege)")
	var env clidoc.List
	fs.Var(&env, "env", "`KEY=VALUE` for the run (repeatable; allowlisted keys only)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: rootgate run [flags] -- CMD ARGS... ['|' CMD ARGS...]\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	pipeline, err := splitPipeline(fs.Args())
	if err != nil {
		errorWithHint(stderr, err.Error(), "rootgate run -- ls -l '|' wc -l")
		return exitUsage
	}
	if *agent && !*noPriv {
		errorf(stderr, "--forward-agent needs --no-privilege")
		return exitUsage
	}
	req := client.NewRequest(*session)
	req.Pipeline = pipeline
	req.Reason = *reason
	req.Cwd = *cwd
	req.Timeout = *timeout
	req.ForwardAgent = *agent
	priv := !*noPriv
	req.Privileged = &priv
	for _, kv := range env {
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
	switch *stdinFile {
	case "":
	case "-":
		req.Stdin, err = io.ReadAll(io.LimitReader(stdin, wire.MaxLine))
	default:
		req.Stdin, err = os.ReadFile(*stdinFile)
	}
	if err != nil {
		return fail(stderr, fmt.Errorf("read stdin: %w", err))
	}

	resp, err := client.Do(ctx, client.Socket(*socket), req)
	if err != nil {
		return fail(stderr, err)
	}
	return report(resp, stdout, stderr)
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

// report writes a run's output and turns the response into an exit code.
func report(resp *wire.Response, stdout, stderr io.Writer) int {
	if resp.HasRun() {
		_, _ = stdout.Write(resp.Stdout)
		for _, st := range resp.Stages {
			_, _ = stderr.Write(st.Stderr)
		}
		for i, st := range resp.Stages {
			if st.StderrTruncated {
				warningf(stderr, "stage %d's stderr was cut at 16 MiB", i+1)
			}
		}
		if resp.StdoutTruncated {
			warningf(stderr, "stdout was cut at 16 MiB")
		}
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

func cmdSend(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("send", stderr)
	socket := fs.String("socket", "", "request socket `path`")
	if code, ok := parseNoArgs(fs, args, stderr); !ok {
		return code
	}
	// Sent as read, up to a byte past the limit, so the daemon itself
	// judges size and framing.
	line, err := io.ReadAll(io.LimitReader(stdin, wire.MaxLine+1))
	if err != nil {
		return fail(stderr, fmt.Errorf("read stdin: %w", err))
	}
	if i := strings.IndexByte(string(line), '\n'); i >= 0 {
		line = line[:i+1]
	}
	resp, err := client.RoundTrip(ctx, client.Socket(*socket), line)
	if err != nil {
		return fail(stderr, err)
	}
	_, _ = stdout.Write(resp)
	return exitOK
}

func cmdPing(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("ping", stderr)
	socket := fs.String("socket", "", "request socket `path`")
	if code, ok := parseNoArgs(fs, args, stderr); !ok {
		return code
	}
	req := client.NewRequest("")
	req.Action = wire.ActionPing
	resp, err := client.Do(ctx, client.Socket(*socket), req)
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
