// Command rootgate is rootgate's client: it asks rootgated to run commands,
// sends raw requests and checks that the daemon answers.
//
// Output rules: a run's own stdout and stderr go to stdout and stderr as
// they are; everything rootgate says itself goes to stderr as one line
// "rootgate: KIND: text", lowercase, optionally followed by
// "rootgate: hint: what to do".
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/rootgate/rootgate/internal/client"
)

// Exit codes besides a run's own.
const (
	exitOK      = 0
	exitUsage   = 2
	exitError   = 70  // EX_SOFTWARE: the request could not be made or was refused as invalid
	exitDenied  = 77  // EX_NOPERM: a person or a policy said no
	exitTimeout = 124 // as timeout(1): no decision in time, or the run hit its limit
)

const usage = `usage: rootgate COMMAND [flags] [args]

Commands:
  run [flags] -- CMD ARGS... ['|' CMD ARGS...]   run a pipeline once approved
  send [--socket P]                              one raw request line from stdin, the raw answer to stdout
  ping [--socket P]                              check that rootgated answers
  approve [--socket P] [--desktop]               approve requests on this terminal or desktop
  mcp [--socket P] [--host NAME=SOCKET]...       serve the MCP tools execute and ping on stdio

Examples:
  rootgate run --reason "install nginx" -- apt-get install -y nginx
  rootgate run --no-privilege -- ls -l /var/log '|' wc -l
  echo '{"time":"2026-02-13T14:30:00Z","pipeline":[["id"]]}' | rootgate send

Exit codes of run: the last stage's exit code; 77 denied, 124 timeout, 70 error.
The socket is --socket, else $ROOTGATE_SOCKET, else /run/rootgate/rootgate.sock;
for approve, $ROOTGATE_APPROVER_SOCKET, else /run/rootgate/approve.sock.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return cmdRun(ctx, args[1:], stdin, stdout, stderr)
	case "send":
		return cmdSend(ctx, args[1:], stdin, stdout, stderr)
	case "ping":
		return cmdPing(ctx, args[1:], stdout, stderr)
	case "approve":
		return cmdApprove(ctx, args[1:], stderr)
	case "mcp":
		return cmdMCP(ctx, args[1:], stdin, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	fmt.Fprintf(stderr, "rootgate: error: unknown command %q\n", args[0])
	fmt.Fprint(stderr, "rootgate: hint: run \"rootgate help\" for the list\n")
	return exitUsage
}

// fail reports err on stderr (with the hint of a connection error) and
// returns exitError.
func fail(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "rootgate: error: %v\n", err)
	var ce *client.ConnectError
	if errors.As(err, &ce) && ce.Hint != "" {
		fmt.Fprintf(stderr, "rootgate: hint: %s\n", ce.Hint)
	}
	return exitError
}
