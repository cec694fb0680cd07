package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/termsafe"
)

// grantsAbout is rootgate grants' help.
const grantsAbout = `List the standing grants rootgated holds, or revoke one. A person gives a
grant at a prompt (g): requests of exactly the shape shown, from the same
requester, then run without asking until it ends. Grants live in the
daemon's memory only; a restart ends them all. Both talk to the approver
socket, which admits you as it admits rootgate approve. The list shows the
grants of requesters whose requests you may be asked about, and counts the
others; any admitted approver may revoke any grant by its id.

  sudo rootgate grants
  sudo rootgate grants revoke g3`

// grantsFlags are rootgate grants' flags.
var grantsFlags = []clidoc.Flag{
	{Name: "socket", Default: "", Usage: "approver socket `path`"},
}

// grantsFail reports a failed grants exchange: one the daemon did not
// answer within (its deadline) with what to check.
func grantsFail(stderr io.Writer, what, sock string, within time.Duration, err error) int {
	var silent *remote.NoAnswerError
	if errors.As(err, &silent) {
		within = silent.Within // its own deadline, which may come first
	}
	if silent != nil || errors.Is(err, context.DeadlineExceeded) {
		errorWithHint(stderr, fmt.Sprintf("%s: rootgated did not answer within %s (%s)", what, within, sock), client.NoAnswerHint)
		return exitError
	}
	errorf(stderr, "%s: %v", what, err)
	return exitError
}

func cmdGrants(ctx context.Context, e *env, fl clidoc.Values, _ []string) int {
	sock, within := client.ApproverSocket(fl.String("socket")), client.AnswerWithin()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	grants, hidden, err := remote.ListGrants(ctx, sock)
	if err != nil {
		return grantsFail(e.stderr, "grants", sock, within, err)
	}
	if len(grants) == 0 {
		fmt.Fprintln(e.stdout, "no standing grants")
	}
	now := time.Now()
	for _, g := range grants {
		fmt.Fprintf(e.stdout, "%s  requester %s (uid %d)  ends %s (in %s)  uses %d\n", termsafe.Sanitize(g.ID), termsafe.Sanitize(g.User), g.UID,
			g.Ends.Local().Format(time.DateTime), approval.DisplayDuration(max(g.Ends.Sub(now), 0)), g.Uses)
		stages := make([]string, len(g.Pipeline))
		for i, argv := range g.Pipeline {
			stages[i] = approval.QuoteArgv(argv)
		}
		fmt.Fprintf(e.stdout, "    run:   %s\n", strings.Join(stages, " '|' "))
		for i, p := range g.Paths {
			fmt.Fprintf(e.stdout, "    [%d]    %s\n", i+1, termsafe.Quote(p))
		}
		fmt.Fprintf(e.stdout, "    as %s in %s", g.RunsAs(), termsafe.Quote(g.Cwd))
		if g.StdinSize > 0 {
			fmt.Fprintf(e.stdout, ", with %d bytes of stdin", g.StdinSize)
		}
		fmt.Fprintln(e.stdout)
		for _, kv := range g.Env {
			fmt.Fprintf(e.stdout, "    env:   %s\n", termsafe.Quote(kv))
		}
		fmt.Fprintf(e.stdout, "    given by %s\n", termsafe.Sanitize(g.By))
	}
	if hidden > 0 {
		fmt.Fprintf(e.stdout, "%d more for requesters you are never asked about (they can control your terminal or session)\n", hidden)
	}
	return exitOK
}

func cmdGrantsRevoke(ctx context.Context, e *env, fl clidoc.Values, args []string) int {
	if len(args) != 1 {
		errorWithHint(e.stderr, "grants revoke needs one grant id", "rootgate grants lists them")
		return exitUsage
	}
	sock, within := client.ApproverSocket(fl.String("socket")), client.AnswerWithin()
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if err := remote.RevokeGrant(ctx, sock, args[0]); err != nil {
		return grantsFail(e.stderr, "grants revoke", sock, within, err)
	}
	fmt.Fprintf(e.stdout, "revoked %s\n", termsafe.Sanitize(args[0]))
	return exitOK
}
