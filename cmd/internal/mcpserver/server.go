// Package mcpserver is rootgate's MCP server: it offers an AI agent the
// tools execute, wait, cancel, output, ping and check, turns each execute
// call into one request to a rootgated socket, and renders the answer for
// a model to read.
//
// Build a server with [New] and run it on a transport (stdio for
// `rootgate mcp`). A request belongs to the MCP session: execute answers
// within Config.Wait, with the result or with the request still pending
// and its id, and wait, cancel and output take that id. The daemon
// connection stays open until the answer comes; cancel, cancelling
// execute before it returned the id, or the session's end closes it, and
// the daemon then withdraws the prompt or kills the run.
package mcpserver

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rootgate/rootgate/internal/version"
)

// LocalHost is the host name that stands for the daemon on Config.Socket.
const LocalHost = "local"

// DefaultMaxText is how many bytes of output a result shows in all (every
// stream together) when Config.MaxText is zero: about what clients show
// inline (Claude Code keeps some 25,000 tokens of a tool result).
const DefaultMaxText = 40000

// DefaultProgressEvery is the progress interval when Config.ProgressEvery
// is zero.
const DefaultProgressEvery = 5 * time.Second

// DefaultPingTimeout is Config.PingTimeout when it is zero.
const DefaultPingTimeout = 10 * time.Second

// Config says which daemons a server talks to and how it renders results.
// The zero value talks to nothing; set Socket at least.
type Config struct {
	// Socket is the local daemon's request socket (host "local").
	Socket string
	// Hosts maps more host names to request sockets, e.g. sockets forwarded
	// from other machines with ssh -L.
	Hosts map[string]string
	// MaxText is how many bytes of captured output a result shows, all
	// streams together (heads and tails kept, the cuts said); the output
	// tool reads the rest. DefaultMaxText if zero.
	MaxText int
	// Wait is how long execute and wait hold a tool call before they
	// answer with the request still pending; DefaultWait if zero.
	Wait time.Duration
	// ProgressEvery is the interval of progress notifications while a call
	// waits; DefaultProgressEvery if zero.
	ProgressEvery time.Duration
	// PingTimeout bounds a ping: a daemon that accepts the connection but
	// does not answer within it is reported as not answering;
	// DefaultPingTimeout if zero.
	PingTimeout time.Duration
}

var hostName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// ParseHost parses a --host value NAME=SOCKET.
func ParseHost(v string) (name, socket string, err error) {
	name, socket, ok := strings.Cut(v, "=")
	switch {
	case !ok || socket == "":
		return "", "", fmt.Errorf("--host %q is not NAME=SOCKET", v)
	case !hostName.MatchString(name):
		return "", "", fmt.Errorf("--host %q: the name must be letters, digits, '.', '_' or '-' (at most 63)", v)
	case name == LocalHost:
		return "", "", fmt.Errorf("--host %q: %q is the daemon of --socket", v, LocalHost)
	}
	return name, socket, nil
}

// hostNames lists the host names a tool accepts: local first, then the
// others sorted.
func (c *Config) hostNames() []string {
	names := make([]string, 0, len(c.Hosts))
	for n := range c.Hosts {
		names = append(names, n)
	}
	slices.Sort(names)
	return append([]string{LocalHost}, names...)
}

// socketOf returns the socket of a host name ("" is local).
func (c *Config) socketOf(host string) (string, error) {
	if host == "" || host == LocalHost {
		return c.Socket, nil
	}
	if s, ok := c.Hosts[host]; ok {
		return s, nil
	}
	return "", errors.New("unknown host")
}

// Instructions is what the server tells the model about itself.
const Instructions = `rootgate runs commands on this machine (or on the hosts listed in the execute tool's "host" field) only after the operator's standing policy or a person at the operator's terminal approves each request.

Use the execute tool instead of your own shell when a command needs root (installing packages, managing services, editing files under /etc, reading protected logs), or when the operator has asked you to run commands through rootgate so they can approve them. Commands run without a shell: give argv as a list of words, or a pipeline as a list of argv lists; for shell syntax, run ["sh", "-c", "..."] explicitly.

A person reads every request: give an honest, specific reason saying what the command does and why you need it. A denial is final for that request: never send the same request again unchanged. Explain what you wanted to the user and ask how to proceed. If no approver is attached, ask the user to run "sudo rootgate approve" in a terminal.

When execute answers with status pending, the request goes on (a person is deciding, or the command runs): call the wait tool with its id, again while it stays pending; never send the request again. Output too long to show is cut in the middle: read the rest with the output tool, never by running the command again.

Use the ping tool to check that rootgated is reachable and an approver is attached before your first request, or when execute reports a connection error. Use the check tool to learn whether the policy runs a command without asking, asks a person, or denies it, and prefer the forms it allows.`

// New returns an MCP server offering execute, ping and check with cfg.
func New(cfg Config) *mcp.Server {
	if cfg.MaxText <= 0 {
		cfg.MaxText = DefaultMaxText
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = DefaultProgressEvery
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = DefaultPingTimeout
	}
	if cfg.Wait <= 0 {
		cfg.Wait = DefaultWait
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "rootgate", Title: "rootgate", Version: version.String()},
		&mcp.ServerOptions{Instructions: Instructions})
	exec, ping, check := executeTool(&cfg), pingTool(&cfg), checkTool(&cfg)
	wait, cancel, output := waitTool(&cfg), cancelTool(), outputTool()
	h := &handler{cfg: cfg, executeResolved: mustResolve(exec), pingResolved: mustResolve(ping), checkResolved: mustResolve(check),
		waitResolved: mustResolve(wait), cancelResolved: mustResolve(cancel), outputResolved: mustResolve(output),
		sessions: map[*mcp.ServerSession]*session{}}
	s.AddTool(exec, ignoring(h.execute))
	s.AddTool(wait, ignoring(h.wait))
	s.AddTool(cancel, ignoring(h.cancelCall))
	s.AddTool(output, ignoring(h.output))
	s.AddTool(ping, ignoring(h.ping))
	s.AddTool(check, ignoring(h.check))
	return s
}

func mustResolve(t *mcp.Tool) *jsonschema.Resolved {
	r, err := t.InputSchema.(*jsonschema.Schema).Resolve(nil)
	if err != nil {
		panic("mcpserver: " + t.Name + " input schema: " + err.Error()) // fixed schemas: a bug if it fails
	}
	return r
}

// handler serves the tools.
type handler struct {
	cfg             Config
	executeResolved *jsonschema.Resolved
	pingResolved    *jsonschema.Resolved
	checkResolved   *jsonschema.Resolved
	waitResolved    *jsonschema.Resolved
	cancelResolved  *jsonschema.Resolved
	outputResolved  *jsonschema.Resolved

	mu       sync.Mutex // guards sessions
	sessions map[*mcp.ServerSession]*session
}
