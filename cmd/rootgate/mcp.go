package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/cmd/internal/mcpserver"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
)

// mcpAbout is rootgate mcp's help.
const mcpAbout = "Serves the MCP tools execute, ping and check over stdin and stdout."

// mcpFlags are rootgate mcp's flags.
var mcpFlags = []clidoc.Flag{
	{Name: "socket", Default: "", Usage: "request `path` of the local daemon (host \"local\")"},
	{Name: "max-text", Default: mcpserver.DefaultMaxText, Usage: "show at most this many `bytes` of each output stream (head and tail)"},
	{Name: "progress-interval", Default: mcpserver.DefaultProgressEvery, Usage: "time between progress notifications while a call waits"},
	{Name: "host", Default: clidoc.List(nil), Usage: "`NAME=SOCKET`: another daemon, e.g. one forwarded with ssh -L (repeatable)"},
}

// cmdMCP serves the MCP tools execute, ping and check on stdin and stdout until
// the client closes stdin.
func cmdMCP(ctx context.Context, e *env, fl clidoc.Values, _ []string) int {
	stderr := e.stderr
	every, maxText := fl.Duration("progress-interval"), fl.Int("max-text")
	if every <= 0 {
		errorf(stderr, "--progress-interval must be positive")
		return exitUsage
	}
	if maxText < 1024 {
		errorf(stderr, "--max-text must be at least 1024")
		return exitUsage
	}
	cfg := mcpserver.Config{Socket: client.Socket(fl.String("socket")), MaxText: maxText, ProgressEvery: every, Hosts: map[string]string{}}
	for _, h := range fl.List("host") {
		name, sock, err := mcpserver.ParseHost(h)
		if err == nil {
			if _, dup := cfg.Hosts[name]; dup {
				err = fmt.Errorf("--host %q: %s is given twice", h, name)
			}
		}
		if err != nil {
			errorf(stderr, "%v", err)
			return exitUsage
		}
		cfg.Hosts[name] = sock
	}
	t := &mcp.IOTransport{Reader: io.NopCloser(e.stdin), Writer: nopWriteCloser{e.stdout}}
	err := mcpserver.New(cfg).Run(ctx, t)
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return fail(stderr, fmt.Errorf("mcp: %w", err))
	}
	return exitOK
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
