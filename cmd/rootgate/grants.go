package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/approval/remote"
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

func cmdGrants(ctx context.Context, e *env, fl clidoc.Values, _ []string) int {
	grants, hidden, err := remote.ListGrants(ctx, client.ApproverSocket(fl.String("socket")))
	if err != nil {
		errorf(e.stderr, "grants: %v", err)
		return exitError
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
		fmt.Fprintf(e.stdout, "    as %s in %s", termsafe.Sanitize(g.RunAs), termsafe.Quote(g.Cwd))
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
	if err := remote.RevokeGrant(ctx, client.ApproverSocket(fl.String("socket")), args[0]); err != nil {
		errorf(e.stderr, "grants revoke: %v", err)
		return exitError
	}
	fmt.Fprintf(e.stdout, "revoked %s\n", termsafe.Sanitize(args[0]))
	return exitOK
}
