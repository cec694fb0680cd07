// Command rootgate is rootgate's client: it asks rootgated to run commands,
// sends raw requests and checks that the daemon answers.
//
// Output rules: a run's own stdout and stderr go to stdout and stderr as
// they are; everything rootgate says itself goes to stderr as one line
// "rootgate: KIND: text", lowercase, optionally followed by
// "rootgate: hint: what to do". Commands write these lines only through
// [errorf], [warningf], [hintf], [errorWithHint] and [sayf].
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/version"
)

// Exit codes besides a run's own.
const (
	exitOK      = 0
	exitUsage   = 2
	exitError   = 70  // EX_SOFTWARE: the request could not be made or was refused as invalid
	exitDenied  = 77  // EX_NOPERM: a person or a policy said no
	exitTimeout = 124 // as timeout(1): no decision in time, or the run hit its limit
)

// usageHead and usageTail frame the command list, which comes from
// [commands].
const (
	usageHead = `usage: rootgate COMMAND [flags] [args]

Commands:
`
	usageTail = `
"rootgate COMMAND -h" lists a command's flags; the manual is rootgate(1).

Examples:
  rootgate run --reason "install nginx" -- apt-get install -y nginx
  rootgate run --no-privilege -- ls -l /var/log '|' wc -l
  echo '{"time":"2026-02-13T14:30:00Z","pipeline":[["id"]]}' | rootgate send

Exit codes of run: the last stage's exit code; 77 denied, 124 timeout, 70 error.
The socket is --socket, else $ROOTGATE_SOCKET, else ` + client.DefaultSocket + `;
for approve, $ROOTGATE_APPROVER_SOCKET, else ` + client.DefaultApproverSocket + `.
`
)

// command is one rootgate subcommand. The dispatcher, the usage text, the
// manual page and the shell completions all read [commands], so a command
// is added in one place and documented everywhere.
type command struct {
	name    string   // "run"; a nested command is "parent child"
	args    string   // what follows the flags in a synopsis
	summary string   // one line
	hidden  bool     // left out of the usage, the manual page and completions
	words   []string // the words its arguments may be, for completion
	// run runs the command with the arguments after its name. It must make
	// its flag set with [newFlags] and parse it with [parseFlags], which is
	// how the manual page learns its flags.
	run func(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int
}

// commands is rootgate's command table.
func commands() []command {
	return []command{
		{name: "run", args: "-- CMD ARGS... ['|' CMD ARGS...]", summary: "run a pipeline once approved", run: cmdRun},
		{name: "send", summary: "one raw request line from stdin, the raw answer to stdout", run: cmdSend},
		{name: "ping", summary: "check that rootgated answers", run: func(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
			return cmdPing(ctx, args, stdout, stderr)
		}},
		{name: "approve", summary: "approve requests on this terminal or desktop", run: func(ctx context.Context, args []string, _ io.Reader, _, stderr io.Writer) int {
			return cmdApprove(ctx, args, stderr)
		}},
		{name: "mcp", summary: "serve the MCP tools (execute, wait, cancel, output, ping) on stdio", run: cmdMCP},
		{name: "audit", args: "verify|show", summary: "check or print the audit log", hidden: true, run: func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
			return cmdAudit(args, stdout, stderr)
		}},
		{name: "audit verify", summary: "check the audit log's hash chain, across rotated files", run: func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
			return auditVerify(args, stdout, stderr)
		}},
		{name: "audit show", summary: "print audit records readably", run: func(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
			return auditShow(args, stdout, stderr, time.Now)
		}},
		{name: "version", summary: "print rootgate's version", run: cmdVersion},
		{name: "completion", args: "bash|zsh|fish", summary: "print a shell completion script", words: []string{"bash", "zsh", "fish"}, run: cmdCompletion},
		{name: "man", summary: "print the rootgate(1) manual page in roff", run: cmdMan},
	}
}

// usage is the help text.
func usage() string {
	b := &strings.Builder{}
	b.WriteString(usageHead)
	for _, c := range commands() {
		if c.hidden {
			continue
		}
		syn := c.name
		if c.args != "" {
			syn += " " + c.args
		}
		fmt.Fprintf(b, "  %-45s  %s\n", syn, c.summary)
	}
	b.WriteString(usageTail)
	return b.String()
}

// lookup finds the command args start with, the longest name first, and
// returns it with the arguments after its name.
func lookup(args []string) (command, []string, bool) {
	var best command
	n := 0
	for _, c := range commands() {
		words := strings.Fields(c.name)
		if len(words) > n && len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			best, n = c, len(words)
		}
	}
	return best, args[n:], n > 0
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage())
		return exitOK
	case "-version", "--version":
		return cmdVersion(ctx, args[1:], stdin, stdout, stderr)
	}
	if c, rest, ok := lookup(args); ok {
		return c.run(ctx, rest, stdin, stdout, stderr)
	}
	errorWithHint(stderr, fmt.Sprintf("unknown command %q", args[0]), "run \"rootgate help\" for the list")
	return exitUsage
}

func cmdVersion(_ context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("version", stderr)
	if code, ok := parseNoArgs(fs, args, stderr); !ok {
		return code
	}
	fmt.Fprintln(stdout, "rootgate", version.String())
	return exitOK
}

// fail reports err on stderr (with the hint of a connection error) and
// returns exitError.
func fail(stderr io.Writer, err error) int {
	errorf(stderr, "%v", err)
	var ce *client.ConnectError
	if errors.As(err, &ce) && ce.Hint != "" {
		hintf(stderr, "%s", ce.Hint)
	}
	return exitError
}
