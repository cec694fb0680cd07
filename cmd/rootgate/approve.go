package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rootgate/rootgate/cmd/internal/approver"
	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/approval/terminal"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/version"
)

// approveAbout is rootgate approve's help.
const approveAbout = `Attach this terminal to rootgated as an approver: each request is shown
here in full; y approves, n, Esc or Enter deny, m denies with a note for the
requester, g shows a standing grant for the same request from the same
requester for a time (--grant-for) and asks for y again to approve with it.
Between prompts it shows the requests waiting for a person, the standing
grants and the last decisions with who made them; keys typed there are not
echoed and answer nothing. Ctrl-C (between prompts) detaches.
With --socket given more than once, this terminal attaches to each of those
daemons (local sockets, or local ends of ssh -L forwards to other machines'
approver sockets) and shows their prompts one at a time, each naming the
machine it comes from as that daemon names itself; each reattaches by
itself when it drops or falls silent, while the others keep working.
With --desktop, each request is a desktop notification instead: Approve
approves; Deny, or closing it, denies. It is weaker than the terminal: any
program of yours on the desktop can press Approve (docs/security.md).`

// defaultGrantFor is --grant-for's default.
const defaultGrantFor = "15m,1h"

// approveFlags are rootgate approve's flags.
var approveFlags = []clidoc.Flag{
	{Name: "socket", Default: clidoc.List(nil), Usage: "approver socket `path`; repeat it to approve for several daemons (hosts) from this terminal"},
	{Name: "forward-agent", Default: false, Usage: "offer this session's SSH agent ($SSH_AUTH_SOCK) to forward_agent runs you approve"},
	{Name: "accessible", Default: false, Usage: "ask in plain lines for screen readers: type y and Enter to approve; anything else denies"},
	{Name: "grant-for", Default: defaultGrantFor, Usage: "the lengths of standing grant g offers at a prompt: a comma-separated `list` of durations, each at most 8h"},
	{Name: "dwell", Default: terminal.Dwell, Usage: "how long each prompt is on screen before a key counts (keys typed meanwhile are discarded); at least 1s"},
	{Name: "desktop", Default: false, Usage: "ask with desktop notifications (Approve / Deny buttons) instead of this terminal; under sudo, on the sudo user's desktop"},
}

func cmdApprove(ctx context.Context, e *env, fl clidoc.Values, _ []string) int {
	stderr := e.stderr
	sockets, agent, accessible, desktop := fl.List("socket"), fl.Bool("forward-agent"), fl.Bool("accessible"), fl.Bool("desktop")
	if desktop && accessible {
		errorf(stderr, "--accessible and --desktop cannot be combined")
		return exitUsage
	}
	if desktop && len(sockets) > 1 {
		// A notification does not name the machine a prompt comes from.
		errorWithHint(stderr, "--desktop approves for one daemon only", "approve for several daemons in a terminal: rootgate approve --socket A --socket B")
		return exitUsage
	}
	if len(sockets) == 0 {
		sockets = []string{client.ApproverSocket("")}
	}
	for i, s := range sockets {
		if s == "" {
			errorf(stderr, "--socket: an empty path")
			return exitUsage
		}
		if slices.Contains(sockets[:i], s) {
			errorf(stderr, "--socket %s: given twice", s)
			return exitUsage
		}
	}
	grantFor, err := parseGrantFor(fl.String("grant-for"))
	if err != nil {
		errorf(stderr, "--grant-for: %v", err)
		return exitUsage
	}
	dwell := fl.Duration("dwell")
	if dwell < terminal.Dwell {
		errorf(stderr, "--dwell %s: at least %s", dwell, terminal.Dwell)
		return exitUsage
	}
	var agentSock string
	if agent {
		agentSock = os.Getenv("SSH_AUTH_SOCK")
		fi, err := os.Stat(agentSock)
		switch {
		case agentSock == "":
			errorWithHint(stderr, "--forward-agent: SSH_AUTH_SOCK is not set", "sudo drops it; run: sudo --preserve-env=SSH_AUTH_SOCK rootgate approve --forward-agent")
			return exitUsage
		case err != nil || fi.Mode().Type() != os.ModeSocket || !filepath.IsAbs(agentSock):
			errorf(stderr, "--forward-agent: SSH_AUTH_SOCK %q is not an agent socket", agentSock)
			return exitUsage
		}
	}
	if desktop {
		// No terminal needed: status lines go to stderr, prompts to the
		// desktop.
		a := &approver.Client{Sockets: sockets, Name: desktopName, Kind: "desktop", Operator: approval.OperatorName(), Out: stderr, Agent: agentSock, Version: version.String(), AnswerWithin: client.AnswerWithin()}
		ask, err := desktopAsker(a.Operator, stderr)
		if err != nil {
			errorf(stderr, "--desktop: %v", err)
			return exitError
		}
		a.Ask = func(deadline time.Time, _ bool, _ approver.Daemon) approval.Approver {
			return reporting{ask(deadline), stderr}
		}
		return runApprover(ctx, a, stderr)
	}
	return onTerminal(ctx, &approver.Client{Sockets: sockets, Agent: agentSock}, grantFor, dwell, accessible, stderr)
}

// onTerminal runs approver client a on this process's terminal until
// Ctrl-C or a refusal, its prompts offering standing grants for grantFor.
func onTerminal(ctx context.Context, a *approver.Client, grantFor []time.Duration, dwell time.Duration, accessible bool, stderr io.Writer) int {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		errorf(stderr, "approve needs a terminal: %v", err)
		return exitError
	}
	defer tty.Close()
	// Keys typed between prompts are not echoed (and a prompt discards
	// them): the idle screen stays as drawn.
	if restore, err := terminal.Quiet(tty); err == nil {
		defer restore()
	}
	a.Name, a.Kind, a.Operator, a.Out, a.Version, a.AnswerWithin = approval.TerminalName(), "terminal", approval.OperatorName(), tty, version.String(), client.AnswerWithin()
	if !accessible {
		// A screen reader reads lines as they come: the accessible
		// approver keeps plain lines, no idle screen drawn over them.
		a.Size = func() (int, int) { return terminal.WindowSize(tty) }
	}
	a.Ask = func(deadline time.Time, afterWithdrawn bool, from approver.Daemon) approval.Approver {
		grantFor := grantFor
		if !from.Grants {
			grantFor = []time.Duration{} // an older daemon: it would refuse the decision
		}
		t := &terminal.Terminal{In: tty, Out: tty, Timeout: time.Until(deadline), Name: a.Name, Operator: a.Operator,
			Accessible: accessible, AfterWithdrawn: afterWithdrawn, GrantDurations: grantFor, DwellFor: dwell, RuleFile: from.RuleFile}
		if a.Conn == nil {
			// The daemon's own terminal (rootgated --tty) is on its
			// machine: only a client that dialled says where it asks from.
			t.Machine, t.Via = from.Host, from.Socket
		}
		return t
	}
	return runApprover(ctx, a, stderr)
}

// daemonTTYArg, as the first argument of approve, makes rootgate the
// approver rootgated --tty runs on its own terminal, so that the root
// daemon links no terminal UI: descriptor 3 is its end of a socket pair
// to the daemon, over which it approves as an attached client does, and
// descriptor 4 carries the daemon's log lines, which it prints above its
// screen. It stops when the daemon does. It is not for people.
const daemonTTYArg = "--internal-daemon-tty"

func cmdDaemonTTY(ctx context.Context, e *env, _ clidoc.Values, _ []string) int {
	f := os.NewFile(3, "rootgated")
	c, err := net.FileConn(f)
	f.Close()
	uc, ok := c.(*net.UnixConn)
	if err != nil || !ok {
		errorf(e.stderr, "%s: descriptor 3 is not rootgated's socket: %v", daemonTTYArg, err)
		return exitUsage
	}
	a := &approver.Client{Socket: "its terminal", Conn: uc, Log: os.NewFile(4, "rootgated's log")}
	grantFor, _ := parseGrantFor(defaultGrantFor)
	return onTerminal(ctx, a, grantFor, terminal.Dwell, false, e.stderr)
}

// runApprover runs an approver client until Ctrl-C or a refusal.
func runApprover(ctx context.Context, a *approver.Client, stderr io.Writer) int {
	err := a.Run(ctx)
	var refused *remote.RefusedError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &refused):
		errorf(stderr, "%v", refused)
	case errors.Is(err, os.ErrPermission):
		errorWithHint(stderr, err.Error(), "approvers must be root (sudo rootgate approve) or admitted with rootgated --approver")
	default:
		errorf(stderr, "%v", err)
	}
	return exitError
}

// parseGrantFor reads --grant-for: durations, comma-separated, each
// between a second and approval.MaxGrant.
func parseGrantFor(s string) ([]time.Duration, error) {
	var ds []time.Duration
	for part := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(part))
		if err != nil {
			return nil, fmt.Errorf("%q is not a duration (15m, 1h)", part)
		}
		if d < time.Second || d > approval.MaxGrant {
			return nil, fmt.Errorf("%s is not between 1s and %s", d, approval.MaxGrant)
		}
		ds = append(ds, d)
	}
	return ds, nil
}
