package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/version"
)

// flagSets is an io.Writer that discards what is written and keeps the flag
// sets [newFlags] makes while it is a command's stderr. Running a command
// with -h and a flagSets as stderr yields the very flags the command parses,
// and nothing else happens: parsing -h ends the command.
type flagSets struct{ sets []*flag.FlagSet }

func (*flagSets) Write(p []byte) (int, error) { return len(p), nil }

// commandFlags is the flag set command c parses.
func commandFlags(ctx context.Context, c command) (*flag.FlagSet, error) {
	fs := &flagSets{}
	if code := c.run(ctx, []string{"-h"}, nil, io.Discard, fs); code != exitOK {
		return nil, fmt.Errorf("rootgate %s -h: exit code %d", c.name, code)
	}
	if len(fs.sets) != 1 {
		return nil, fmt.Errorf("rootgate %s -h made %d flag sets with newFlags, want 1", c.name, len(fs.sets))
	}
	return fs.sets[0], nil
}

// page describes rootgate for its manual page and completions.
func page(ctx context.Context) (*clidoc.Page, error) {
	p := &clidoc.Page{
		Name:    "rootgate",
		Section: 1,
		Summary: "ask rootgated to run commands as root once approved, and approve them",
		Version: version.String(),
		Synopsis: []string{
			"rootgate run [flags] -- CMD ARGS... ['|' CMD ARGS...]",
			"rootgate approve [flags]",
			"rootgate COMMAND [flags] [args]",
		},
		Description: `rootgate is the client of rootgated(8). An AI agent or a script asks with rootgate run for an exact command line, with its reason; the daemon checks the request against its policy and, unless a rule decides, shows it in full to a person, who approves or denies it. Only then does the command run, without a shell and with a clean environment, and its output comes back to rootgate run.

Pipelines are written with '|' as a separate, quoted argument; each stage runs directly:

  rootgate run --reason "count log files" -- ls /var/log '|' wc -l

rootgate approve attaches a terminal (or, with --desktop, the desktop) to the daemon as an approver: each request is shown in full, y approves, n, Esc or Enter deny.`,
		Sections: []clidoc.Section{
			{Title: "Exit status", Text: `rootgate run exits with the last stage's exit code when the pipeline was approved and ran; 77 when a person or a policy rule denied it or no one could be asked; 124 when no decision came in time or the run passed its time limit; 70 on any other error (bad request, daemon unreachable); 2 on bad usage. Other commands exit 0 on success, 70 on error and 2 on bad usage.`},
			{Title: "Environment", Terms: true, Text: `ROOTGATE_SOCKET
The request socket when --socket is not given (default ` + client.DefaultSocket + `).

ROOTGATE_APPROVER_SOCKET
The approver socket of rootgate approve when --socket is not given (default ` + client.DefaultApproverSocket + `).

SSH_AUTH_SOCK
The SSH agent rootgate approve --forward-agent offers to the runs it approves.`},
			{Title: "Files", Terms: true, Text: client.DefaultSocket + `
The request socket, mode 0660, group rootgate: add yourself to the group to ask.

` + client.DefaultApproverSocket + `
The approver socket, root only unless rootgated admits others.`},
			{Title: "See also", Text: "rootgated(8)"},
		},
	}
	for _, c := range commands() {
		fs, err := commandFlags(ctx, c)
		if err != nil {
			return nil, err
		}
		p.Commands = append(p.Commands, clidoc.Command{Name: c.name, Args: c.args, Summary: c.summary, Flags: fs, Hidden: c.hidden, Words: c.words})
	}
	return p, nil
}

func cmdMan(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("man", stderr)
	if code, ok := parseNoArgs(fs, args, stderr); !ok {
		return code
	}
	p, err := page(ctx)
	if err == nil {
		err = p.Man(stdout)
	}
	if err != nil {
		return fail(stderr, err)
	}
	return exitOK
}

func cmdCompletion(ctx context.Context, args []string, _ io.Reader, stdout, stderr io.Writer) int {
	fs := newFlags("completion", stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: rootgate completion bash|zsh|fish\n\nPrint a completion script for the shell, e.g.\n  rootgate completion bash > /etc/bash_completion.d/rootgate\n")
	}
	if code, ok := parseFlags(fs, args); !ok {
		return code
	}
	if fs.NArg() != 1 {
		errorf(stderr, "completion needs one shell: bash, zsh or fish")
		return exitUsage
	}
	p, err := page(ctx)
	if err != nil {
		return fail(stderr, err)
	}
	switch fs.Arg(0) {
	case "bash":
		err = p.Bash(stdout)
	case "zsh":
		err = p.Zsh(stdout)
	case "fish":
		err = p.Fish(stdout)
	default:
		err = errors.New("unknown shell " + fmt.Sprintf("%q", fs.Arg(0)) + "; want bash, zsh or fish")
		errorf(stderr, "completion: %v", err)
		return exitUsage
	}
	if err != nil {
		return fail(stderr, err)
	}
	return exitOK
}
