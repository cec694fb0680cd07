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
	"golang.org/x/sys/unix"

	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/internal/clidoc"
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
The socket is --socket, else $` + client.SocketEnv + `, else ` + client.DefaultSocket + `;
for approve, $` + client.ApproverSocketEnv + `, else ` + client.DefaultApproverSocket + `.
`
)

// env is what a command works with besides its flags and arguments.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	now            func() time.Time
}

// command is one rootgate subcommand. The dispatcher, the usage text, the
// help of -h, the manual page and the shell completions all read
// [commands], so a command is added in one place and documented
// everywhere.
type command struct {
	name    string // "run"; a nested command is "parent child"
	args    string // what follows the flags in a synopsis; "" takes no arguments
	summary string // one line
	// about is the text -h shows between the synopsis and the flags;
	// summary when "".
	about  string
	flags  []clidoc.Flag // parsed before run is called
	hidden bool          // left out of the usage, the manual page and completions
	words  []string      // the words its arguments may be, for completion
	// run runs the command with its parsed flags and the arguments after
	// them, and returns the exit code.
	run func(ctx context.Context, e *env, fl clidoc.Values, args []string) int
	// raw: the command reads its own options from its arguments (sudo's
	// spelling), so flags is nil and nothing is parsed before run.
	raw bool
}

// socketFlag is the --socket of the commands that send requests.
var socketFlag = clidoc.Flag{Name: "socket", Default: "", Usage: "request socket `path`"}

// commands is rootgate's command table.
func commands() []command {
	return []command{
		{name: "run", args: "-- CMD ARGS... ['|' CMD ARGS...]", summary: "run a pipeline once approved", flags: runFlags, run: cmdRun},
		{name: "send", summary: "one raw request line from stdin, the raw answer to stdout", flags: []clidoc.Flag{socketFlag}, run: cmdSend},
		{name: "sudo", args: sudoArgsSyn, summary: "ask for a run with sudo's options: for agents that only know sudo", about: sudoAbout, raw: true, run: cmdSudo},
		{name: "ping", summary: "check that rootgated answers", flags: []clidoc.Flag{socketFlag}, run: cmdPing},
		{name: "approve", summary: "approve requests on this terminal or desktop", about: approveAbout, flags: approveFlags, run: cmdApprove},
		{name: "approve " + daemonTTYArg, summary: "the approver rootgated --tty runs on its terminal", hidden: true, run: cmdDaemonTTY},
		{name: "approve " + dialogHelperArg, summary: "the desktop dialog helper of approve --desktop", hidden: true, run: cmdDialogHelper},
		{name: "grants", summary: "list the standing grants people gave at a prompt", about: grantsAbout, flags: grantsFlags, run: cmdGrants},
		{name: "grants revoke", args: "ID", summary: "end a standing grant", about: grantsAbout, flags: grantsFlags, run: cmdGrantsRevoke},
		{name: "web", summary: "serve the passkey approval page for phones and browsers", about: webAbout, flags: webFlags, run: cmdWeb},
		{name: "passkeys", args: "add|list|remove|export|import", summary: "manage the passkeys that approve through the page", about: passkeysAbout, hidden: true, run: cmdPasskeys},
		{name: "passkeys add", args: "NAME", summary: "enrol a passkey through a one-time page (root)", about: passkeysAbout, flags: passkeysAddFlags, run: cmdPasskeysAdd},
		{name: "passkeys list", summary: "list the enrolled passkeys", about: passkeysAbout, flags: []clidoc.Flag{passkeysFileFlag}, run: cmdPasskeysList},
		{name: "passkeys remove", args: "ID", summary: "remove an enrolled passkey (root)", about: passkeysAbout, flags: []clidoc.Flag{passkeysSocketFlag}, run: cmdPasskeysRemove},
		{name: "passkeys export", summary: "print the enrolled passkeys file (public keys only)", about: passkeysAbout, flags: []clidoc.Flag{passkeysFileFlag}, run: cmdPasskeysExport},
		{name: "passkeys import", args: "FILE", summary: "take an exported passkeys file, while none is enrolled (root)", about: passkeysAbout, flags: []clidoc.Flag{passkeysSocketFlag}, run: cmdPasskeysImport},
		{name: "mcp", summary: "serve the MCP tools (execute, wait, cancel, output, ping, check) on stdio", about: mcpAbout, flags: mcpFlags, run: cmdMCP},
		{name: "audit", args: "verify|show", summary: "check or print the audit log", about: auditAbout, hidden: true, run: cmdAudit},
		{name: "audit verify", summary: "check the audit log's hash chain, across rotated files", about: auditAbout, flags: auditVerifyFlags, run: cmdAuditVerify},
		{name: "audit show", summary: "print audit records readably", about: auditAbout, flags: auditShowFlags, run: cmdAuditShow},
		{name: "policy", args: "check|test", summary: "check the policy files, or see what they decide", about: policyAbout, hidden: true, run: cmdPolicy},
		{name: "policy check", args: "[FILE]", summary: "check that the policy and its drop-ins parse, as visudo -c", about: policyAbout, run: cmdPolicyCheck},
		{name: "policy test", args: "-- CMD ARGS... ['|' CMD ARGS...]", summary: "show what the policy decides about a request, and why", about: policyAbout, flags: policyTestFlags, run: cmdPolicyTest},
		{name: "version", summary: "print rootgate's version", run: cmdVersion},
		{name: "completion", args: "bash|zsh|fish", summary: "print a shell completion script", about: completionAbout, words: []string{"bash", "zsh", "fish"}, run: cmdCompletion},
		{name: "man", summary: "print the rootgate(1) manual page in roff", run: cmdMan},
	}
}

// synopsis is how c is called, e.g. "rootgate run [flags] -- CMD ARGS...".
func (c command) synopsis() string {
	s := "rootgate " + c.name
	if len(c.flags) > 0 {
		s += " [flags]"
	}
	if c.args != "" {
		s += " " + c.args
	}
	return s
}

// help writes what "rootgate COMMAND -h" shows: the synopsis, about and
// the flags.
func (c command) help(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintf(w, "usage: %s\n\n%s\n", c.synopsis(), strings.TrimRight(cmp.Or(c.about, c.summary), "\n"))
	if len(c.flags) > 0 {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
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
	// SIGINT and SIGTERM end the context, with the signal as its cause
	// (interruptedBy).
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		if s, ok := (<-sigs).(syscall.Signal); ok {
			cancel(interrupted{s})
		}
	}()
	stop := func() { signal.Stop(sigs); cancel(nil) }
	args := os.Args[1:]
	// Called as sudo (the agent-bin symlink), rootgate is rootgate sudo;
	// only that exact name turns it on.
	if filepath.Base(os.Args[0]) == sudoName {
		args = append([]string{"sudo"}, args...)
	}
	code := run(ctx, args, os.Stdin, os.Stdout, os.Stderr)
	stop()
	if sig := exitSignal.Load(); sig != 0 {
		dieBy(unix.Signal(sig))
	}
	os.Exit(code)
}

// interrupted is the cause of main's context when a signal ended it.
type interrupted struct{ sig syscall.Signal }

func (i interrupted) Error() string { return "interrupted by " + unix.SignalName(i.sig) }

// interruptedBy is the signal (SIGINT or SIGTERM) that ended ctx, if one
// did.
func interruptedBy(ctx context.Context) (syscall.Signal, bool) {
	var i interrupted
	if errors.As(context.Cause(ctx), &i) {
		return i.sig, true
	}
	return 0, false
}

// run dispatches a subcommand and returns the exit code.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return exitUsage
	}
	e := &env{stdin: stdin, stdout: stdout, stderr: stderr, now: time.Now}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage())
		return exitOK
	case "-version", "--version":
		c, _, _ := lookup([]string{"version"})
		return c.call(ctx, e, args[1:])
	}
	if c, rest, ok := lookup(args); ok {
		return c.call(ctx, e, rest)
	}
	errorWithHint(stderr, fmt.Sprintf("unknown command %q", args[0]), "run \"rootgate help\" for the list")
	return exitUsage
}

// call parses args against c's flags and runs c. -h shows c's help; a
// bad flag, or an argument to a command that takes none, is a usage error.
func (c command) call(ctx context.Context, e *env, args []string) int {
	if c.raw {
		return c.run(ctx, e, clidoc.Values{}, args)
	}
	fs := clidoc.NewFlagSet("rootgate "+c.name, c.flags, io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.help(e.stderr, fs)
			return exitOK
		}
		errorWithHint(e.stderr, err.Error(), fmt.Sprintf("run \"rootgate %s -h\" for its flags", c.name))
		return exitUsage
	}
	if c.args == "" && fs.NArg() > 0 {
		errorf(e.stderr, "unexpected argument %q", fs.Arg(0))
		return exitUsage
	}
	return c.run(ctx, e, clidoc.ValuesOf(fs), fs.Args())
}

func cmdVersion(_ context.Context, e *env, _ clidoc.Values, _ []string) int {
	fmt.Fprintln(e.stdout, "rootgate", version.String())
	return exitOK
}

// fail reports err on stderr (with the hint of a connection error, or of
// a daemon that did not answer in time) and returns exitError.
func fail(stderr io.Writer, err error) int {
	errorf(stderr, "%v", err)
	var ce *client.ConnectError
	switch {
	case errors.As(err, &ce) && ce.Hint != "":
		hintf(stderr, "%s", ce.Hint)
	case errors.As(err, new(*client.NoAnswerError)), errors.As(err, new(*client.ClosedError)):
		hintf(stderr, "%s", client.NoAnswerHint)
	}
	return exitError
}
