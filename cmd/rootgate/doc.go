package main

import (
	"context"
	"strings"

	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/version"
)

// completionAbout is rootgate completion's help.
const completionAbout = `Print a completion script for the shell, e.g.
  rootgate completion bash > /etc/bash_completion.d/rootgate`

// synopsisOf is the synopsis of the command named name.
func synopsisOf(name string) string {
	c, _, _ := lookup(strings.Fields(name))
	return c.synopsis()
}

// page describes rootgate for its manual page and completions, from the
// command table.
func page() *clidoc.Page {
	p := &clidoc.Page{
		Name:    "rootgate",
		Section: 1,
		Summary: "ask rootgated to run commands as root once approved, and approve them",
		Version: version.String(),
		Synopsis: []string{
			synopsisOf("run"),
			synopsisOf("approve"),
			"rootgate COMMAND [flags] [args]",
		},
		Description: `rootgate is the client of rootgated(8). An AI agent or a script asks with rootgate run for an exact command line, with its reason; the daemon checks the request against its policy and, unless a rule decides, shows it in full to a person, who approves or denies it. Only then does the command run, without a shell and with a clean environment, and its output comes back to rootgate run.

Pipelines are written with '|' as a separate, quoted argument; each stage runs directly:

  rootgate run --reason "count log files" -- ls /var/log '|' wc -l

rootgate approve attaches a terminal (or, with --desktop, the desktop) to the daemon as an approver: each request is shown in full, y approves, n, Esc or Enter deny, m denies with a note for the requester.`,
		Sections: []clidoc.Section{
			{Title: "Exit status", Text: `rootgate run exits with the last stage's exit code when the pipeline was approved and ran; 77 when a person or a policy rule denied it or no one could be asked; 124 when no decision came in time or the run passed its time limit; 130 when SIGINT or SIGTERM ended it (the request withdrawn, its run killed); 70 on any other error (bad request, daemon unreachable, no answer within its deadline, or output cut by a rootgated that does not stream it); 2 on bad usage. The run's stdout and stderr are written as they come; when rootgate's stdout is a closed pipe, the run's stdout is closed as well, as in a shell pipeline (its writer then dies of SIGPIPE: 141). Other commands exit 0 on success, 70 on error and 2 on bad usage.`},
			{Title: "Deadlines", Text: `No command waits for rootgated without a bound. The daemon must say something within 10s of the connection (` + client.AnswerWithinEnv + `): a ping's, a check's or a grants answer, the welcome of rootgate approve, or, for rootgate run and the MCP server's execute, the first progress line, which the daemon sends as soon as it has read the request. Each progress line says how long the rest may take (the daemon's prompt timeout, the run's time limit and kill grace), and the client waits that long plus 10s. rootgate send waits 10s for a ping or a check, else the defaults' bound for a run: 60s + the request's timeout (at most 300s) + 5s + 10s. Past its deadline a client closes the connection, which withdraws the request, and says "rootgated did not answer within ..." with what to check (systemctl status rootgate; journalctl -u rootgate -p err); rootgate run exits 70. A connection that ends before any answer (systemd resets it when the start limit of a failed rootgate.service fails its sockets) is reported as "rootgated closed the connection without an answer", with the same hint. rootgate approve tries again after each bound.`},
			{Title: "rootgate sudo", Text: sudoAbout},
			{Title: "Environment", Terms: true, Text: client.SocketEnv + `
The request socket when --socket is not given (default ` + client.DefaultSocket + `).

` + client.AnswerWithinEnv + `
How long to wait for rootgated's first line (a Go duration, default 10s; see Deadlines).

` + reasonEnv + `
The reason rootgate sudo sends when --reason is not given.

` + client.ApproverSocketEnv + `
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
		p.Commands = append(p.Commands, clidoc.Command{Name: c.name, Args: c.args, Summary: c.summary, Flags: c.flags, Hidden: c.hidden, Words: c.words})
	}
	return p
}

func cmdMan(_ context.Context, e *env, _ clidoc.Values, _ []string) int {
	if err := page().Man(e.stdout); err != nil {
		return fail(e.stderr, err)
	}
	return exitOK
}

func cmdCompletion(_ context.Context, e *env, _ clidoc.Values, args []string) int {
	if len(args) != 1 {
		errorf(e.stderr, "completion needs one shell: bash, zsh or fish")
		return exitUsage
	}
	p := page()
	var err error
	switch args[0] {
	case "bash":
		err = p.Bash(e.stdout)
	case "zsh":
		err = p.Zsh(e.stdout)
	case "fish":
		err = p.Fish(e.stdout)
	default:
		errorf(e.stderr, "completion: unknown shell %q; want bash, zsh or fish", args[0])
		return exitUsage
	}
	if err != nil {
		return fail(e.stderr, err)
	}
	return exitOK
}
