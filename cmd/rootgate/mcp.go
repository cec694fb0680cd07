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

// cmdMCP serves the MCP tools execute, wait, cancel, output and ping on
// stdin and stdout until the client closes stdin; requests still pending
// then are withdrawn (their runs killed).
func cmdMCP(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("mcp", stderr)
	socket := fs.String("socket", "", "request `path` of the local daemon (host \"local\")")
	maxText := fs.Int("max-text", mcpserver.DefaultMaxText, "show at most this many `bytes` of output in a result, all streams together (heads and tails; the output tool reads the rest)")
	wait := fs.Duration("wait", mcpserver.DefaultWait, "answer execute and wait calls within this `duration`, with the request still pending if need be")
	every := fs.Duration("progress-interval", mcpserver.DefaultProgressEvery, "time between progress notifications while a call waits")
	var hosts clidoc.List
	fs.Var(&hosts, "host", "`NAME=SOCKET`: another daemon, e.g. one forwarded with ssh -L (repeatable)")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: rootgate mcp [--socket P] [--host NAME=SOCKET]... [--max-text BYTES] [--wait D] [--progress-interval D]\n\nServes the MCP tools execute, wait, cancel, output and ping over stdin and stdout.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if code, ok := parseNoArgs(fs, args, stderr); !ok {
		return code
	}
	if *every <= 0 {
		errorf(stderr, "--progress-interval must be positive")
		return exitUsage
	}
	if *wait <= 0 || *wait > mcpserver.MaxWait {
		errorf(stderr, "--wait must be positive and at most %s", mcpserver.MaxWait)
		return exitUsage
	}
	if *maxText < 1024 {
		errorf(stderr, "--max-text must be at least 1024")
		return exitUsage
	}
	cfg := mcpserver.Config{Socket: client.Socket(*socket), MaxText: *maxText, Wait: *wait, ProgressEvery: *every, Hosts: map[string]string{}}
	for _, h := range hosts {
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
	t := &mcp.IOTransport{Reader: io.NopCloser(stdin), Writer: nopWriteCloser{stdout}}
	err := mcpserver.New(cfg).Run(ctx, t)
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, io.EOF) {
		return fail(stderr, fmt.Errorf("mcp: %w", err))
	}
	return exitOK
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
