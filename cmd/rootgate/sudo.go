package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/internal/version"
	"github.com/rootgate/rootgate/policy"
	"github.com/rootgate/rootgate/wire"
)

// sudoName is the name under which the rootgate binary acts as
// "rootgate sudo": the packaged /usr/lib/rootgate/agent-bin/sudo is a
// symlink to it (see main).
const sudoName = "sudo"

// sudoArgsSyn is what follows "rootgate sudo" in its synopsis.
const sudoArgsSyn = "[-n] [-S] [-u USER] [-g GROUP] [-E|--preserve-env=LIST] [--reason TEXT] [--] CMD ARGS..."

// reasonEnv is where rootgate sudo takes the reason from when --reason is
// not given.
const reasonEnv = "ROOTGATE_REASON"

// sudoAbout is rootgate sudo's help.
const sudoAbout = `Turn a sudo command line into one rootgated request, so that agents and
scripts that only know sudo ask rootgate instead. The command runs once a
policy rule, a person or a person's standing grant allows it; its stdout,
stderr and exit code are the command's, and 77 (denied), 124 (timeout) or
70 (error) are rootgate run's. It runs in the current directory, with the
run-as account's clean environment. Standard input, unless it is a
terminal, is read to its end and sent with the request: up to about 760
KiB, since the request line, stdin in base64 included, holds at most 1 MiB.

Options, in sudo's spelling; short ones combine, as in -nE or -upostgres:

  -n, --non-interactive   never wait for a person: unless the policy, or a
                          standing grant of yours, allows the command without
                          asking, it is denied at once (a deny rule's denial
                          is told before standard input is read)
  -S, --stdin             accepted for a password piped in: the first line of
                          standard input is read and thrown away here (no
                          password is asked for); it never reaches rootgated,
                          the approver or the audit log
  -u, --user USER         run as USER instead of root
  -g, --group GROUP       run with GROUP as primary group; without -u, as
                          yourself (as sudo does), not as root
  -E, --preserve-env      pass the variables set here that are on the env
                          allowlist built into this rootgate (rootgated's,
                          when of the same version); the others are not
                          passed
  --preserve-env=LIST     pass these variables (comma-separated); any that
                          built-in allowlist refuses is an error naming it
  NAME=value              before CMD: set NAME for the command, as sudo
                          does; a NAME that allowlist refuses is an error
  -H, --set-home          accepted: HOME is always the run-as account's
  -v, --validate          check that rootgated answers (no credentials are
                          cached: every command is asked for)
  -k, -K                  accepted, nothing to forget; with CMD, runs it
  -l, --list [CMD ARGS]   the policy's rules that concern you, or what the
                          daemon would decide about CMD now (its policy,
                          then a standing grant of yours): allow, ask or
                          deny (exit 1)
  --policy FILE           the policy file -l reads (default ` + policy.DefaultFile + `)
  --reason TEXT           why, shown to the approver (default $` + reasonEnv + `;
                          without either, the approver is told none was
                          given and which process asked)
  -h, --help, -V, --version

Refused, with what to do instead: -i, -s, -e (sudoedit), su, a shell with
no command (sudo bash), any other option. Installed as
/usr/lib/rootgate/agent-bin/sudo (a symlink to rootgate): put that
directory first in an agent's PATH (docs/agents.md).`

// sudoOptions is what a sudo command line asks for.
type sudoOptions struct {
	nonInteractive bool
	password       bool // -S: the first line of stdin is a password
	user, group    string
	preserveAll    bool     // -E
	preserve       []string // --preserve-env=LIST
	reason         string
	reasonGiven    bool
	policy         string // the policy file -l reads; "" for the default
	validate       bool   // -v
	forget         bool   // -k, -K
	list           bool   // -l
	help, version  bool
	setEnv         []envVar // NAME=value words before the command
	argv           []string // the command and its arguments
}

// sudoRefusal is a sudo command line rootgate sudo will not turn into a
// request: one line saying why and what to do instead.
type sudoRefusal struct{ msg string }

func (r *sudoRefusal) Error() string { return r.msg }

func refuse(format string, a ...any) error { return &sudoRefusal{fmt.Sprintf(format, a...)} }

// sudoKnows lists the options rootgate sudo accepts, for the refusal of
// the others.
const sudoKnows = `-n -S -u -g -E --preserve-env=LIST -H -v -k -K -l -h -V --reason --policy`

// parseSudo reads a sudo command line: options, then the command.
func parseSudo(args []string) (sudoOptions, error) {
	var o sudoOptions
	i := 0
	// value returns the value of an option that takes one: what follows
	// it in the same argument, else the next argument. An empty value is
	// refused unless mayBeEmpty: "-u $UNSET" must not become a run as
	// root, which is what no run_as means.
	value := func(name, inline string, hasInline bool, what string, mayBeEmpty bool) (string, error) {
		v := inline
		if !hasInline {
			if i+1 >= len(args) {
				return "", refuse("sudo %s needs %s", name, what)
			}
			i++
			v = args[i]
		}
		if v == "" && !mayBeEmpty {
			return "", refuse("sudo %s needs %s, not an empty one", name, what)
		}
		return v, nil
	}
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			i++
			break
		}
		if len(a) < 2 || a[0] != '-' {
			break
		}
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			opt := "--" + name
			noValue := func() error {
				if hasVal {
					return refuse("sudo %s takes no value", opt)
				}
				return nil
			}
			var err error
			switch name {
			case "non-interactive":
				o.nonInteractive, err = true, noValue()
			case "stdin":
				o.password, err = true, noValue()
			case "user":
				o.user, err = value(opt, val, hasVal, "a user name", false)
			case "group":
				o.group, err = value(opt, val, hasVal, "a group name", false)
			case "reason":
				o.reason, err = value(opt, val, hasVal, "a text", true)
				o.reasonGiven = true
			case "policy":
				o.policy, err = value(opt, val, hasVal, "a file", false)
			case "preserve-env":
				if !hasVal {
					o.preserveAll = true
					break
				}
				for k := range strings.SplitSeq(val, ",") {
					if k != "" {
						o.preserve = append(o.preserve, k)
					}
				}
			case "set-home":
				err = noValue()
			case "validate":
				o.validate, err = true, noValue()
			case "reset-timestamp", "remove-timestamp":
				o.forget, err = true, noValue()
			case "list":
				o.list, err = true, noValue()
			case "help":
				o.help, err = true, noValue()
			case "version":
				o.version, err = true, noValue()
			case "login":
				return o, refuseLogin()
			case "shell":
				return o, refuseShellOption()
			case "edit":
				return o, refuseEdit()
			default:
				return o, refuseUnknown(opt)
			}
			if err != nil {
				return o, err
			}
			continue
		}
		// A cluster of short options: -nE, -upostgres.
	cluster:
		for j := 1; j < len(a); j++ {
			var err error
			switch c := a[j]; c {
			case 'n':
				o.nonInteractive = true
			case 'S':
				o.password = true
			case 'E':
				o.preserveAll = true
			case 'H':
			case 'v':
				o.validate = true
			case 'k', 'K':
				o.forget = true
			case 'l':
				o.list = true
			case 'h':
				o.help = true
			case 'V':
				o.version = true
			case 'u', 'g':
				what := map[byte]string{'u': "a user name", 'g': "a group name"}[c]
				v, err := value("-"+string(c), a[j+1:], j+1 < len(a), what, false)
				if err != nil {
					return o, err
				}
				if c == 'u' {
					o.user = v
				} else {
					o.group = v
				}
				break cluster
			case 'i':
				err = refuseLogin()
			case 's':
				err = refuseShellOption()
			case 'e':
				err = refuseEdit()
			default:
				err = refuseUnknown("-" + string(rune(c)))
				if c >= 0x80 {
					err = refuseUnknown(a) // not one byte: the whole word
				}
			}
			if err != nil {
				return o, err
			}
		}
	}
	o.argv = args[i:]
	// Leading NAME=value words set the command's environment, as with
	// sudo; they are never the command (one with a slash would be a path
	// in the current directory).
	for len(o.argv) > 0 {
		k, v, ok := strings.Cut(o.argv[0], "=")
		if !ok || k == "" {
			break
		}
		o.setEnv = append(o.setEnv, envVar{k, v, true})
		o.argv = o.argv[1:]
	}
	if len(o.argv) > 0 {
		if err := refuseShell(o.argv); err != nil {
			return o, err
		}
	}
	return o, nil
}

func refuseLogin() error {
	return refuse(`sudo -i: rootgate gives no login shell; run each command as "sudo CMD ARGS" (with -u USER for another account)`)
}

func refuseShellOption() error {
	return refuse(`sudo -s: rootgate gives no shell; run each command as "sudo CMD ARGS", or "sudo sh -c 'SCRIPT'" where it needs shell syntax`)
}

func refuseEdit() error {
	return refuse(`sudo -e: rootgate edits no files; write the new content to a file of yours, then run "sudo install -m 644 FILE /etc/TARGET" (or "sudo tee /etc/TARGET < FILE")`)
}

func refuseUnknown(opt string) error {
	return refuse(`sudo: unknown option %s; rootgate sudo knows %s: see "rootgate sudo -h"`, termsafe.Quote(opt), sudoKnows)
}

// shells are the programs that, given no command, would be an interactive
// shell.
var shells = []string{"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "csh", "tcsh"}

// refuseShell refuses a command that asks for an interactive root shell:
// su, or a shell with no script and no -c.
func refuseShell(argv []string) error {
	base := path.Base(argv[0])
	if base == "su" {
		return refuse(`sudo su: rootgate gives no root shell; run each command as "sudo CMD ARGS", or "sudo -u USER CMD ARGS" for another account`)
	}
	if !slices.Contains(shells, base) {
		return nil
	}
	for _, a := range argv[1:] {
		// An operand (a script) or -c or -s in a cluster of short
		// options: the shell runs something and ends.
		if !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+") || !strings.HasPrefix(a, "--") && strings.ContainsAny(a, "cs") {
			return nil
		}
	}
	return refuse(`sudo %s: rootgate gives no interactive shell; run each command as "sudo CMD ARGS", or "sudo %s -c 'SCRIPT'"`, termsafe.Sanitize(base), termsafe.Sanitize(base))
}

func cmdSudo(ctx context.Context, e *env, _ clidoc.Values, args []string) int {
	stderr := e.stderr
	o, err := parseSudo(args)
	if err != nil {
		errorf(stderr, "%s", err)
		return exitUsage
	}
	switch {
	case o.help:
		c, _, _ := lookup([]string{"sudo"})
		c.help(e.stderr, nil)
		return exitOK
	case o.version:
		fmt.Fprintln(e.stdout, "rootgate", version.String(), "(rootgate sudo: each command is a request to rootgated)")
		return exitOK
	case o.validate:
		return sudoValidate(ctx, e)
	case o.list:
		return sudoList(ctx, e, o)
	case len(o.argv) == 0 && o.forget:
		// No timestamp to reset: every command is asked for.
		return exitOK
	case len(o.argv) == 0:
		errorf(stderr, "sudo: no command given; usage: sudo %s", sudoArgsSyn)
		return exitUsage
	}

	req, code := sudoRequest(e, o)
	if req == nil {
		return code
	}
	socket := client.Socket("")
	// -n asks the daemon before anything else, so that neither a person
	// nor standard input is waited for when the answer is no.
	if o.nonInteractive {
		if code, ok := sudoPolicyAllows(ctx, e, socket, req); !ok {
			return code
		}
	}
	if stdin, ok := forwardedStdin(e.stdin); ok {
		data, err := readStdin(ctx, stdin, stderr)
		if err != nil {
			return fail(stderr, err)
		}
		if o.password {
			data = withoutPassword(data)
		}
		req.Stdin = data
		if encodedLen(req) > wire.MaxLine {
			size := fmt.Sprintf("%d bytes", len(data))
			if len(data) > maxStdin {
				size = fmt.Sprintf("more than %d bytes", maxStdin)
			}
			errorf(stderr, "sudo: standard input is too large to send (%s): a request holds at most %d bytes, base64 included: put the data in a file the command reads instead", size, wire.MaxLine)
			return exitError
		}
	}
	// A fresh id and time: the check used the first id, and standard
	// input may have taken longer to end than the daemon's time window.
	fresh := client.NewRequest("")
	req.ID, req.Time = fresh.ID, fresh.Time
	if o.nonInteractive {
		return sudoRunUnasked(ctx, e, socket, req)
	}
	resp, err := streamed(ctx, e, socket, req, nil)
	if err != nil {
		return sudoFailRun(ctx, stderr, err)
	}
	return sudoReport(resp, e.stdout, stderr, o.argv)
}

// withoutPassword is stdin without the password sudo -S would read from
// it: up to and with its first newline, or all of it when it has none.
// No password is needed here; it is dropped so that no one else sees it.
func withoutPassword(data []byte) []byte {
	i := bytes.IndexByte(data, '\n')
	if i < 0 {
		return nil
	}
	return data[i+1:]
}

// sudoReport is report for a sudo command line argv, but for a command
// that is not found: that is said in sudo's words, with sudo's exit code 1.
// A command killed by a signal ends rootgate sudo by the same signal, as
// with sudo (see exitSignal).
// The daemon's own message follows when it says more (a directory left
// out of the search path of privileged runs).
func sudoReport(resp *wire.Response, stdout, stderr io.Writer, argv []string) int {
	if resp.Status == wire.StatusOK && len(resp.Stages) > 0 {
		noteSignalDeath(resp.Stages[len(resp.Stages)-1].Signal)
	}
	if resp.Status != wire.StatusError || resp.Code != wire.CodeNotFound || len(argv) == 0 {
		return report(resp, stdout, stderr)
	}
	fmt.Fprintf(stderr, "sudo: %s: command not found\n", termsafe.Sanitize(argv[0]))
	if strings.Contains(resp.Message, " left out of ") {
		hintf(stderr, "%s", resp.Message)
	}
	return 1
}

// sudoRequest builds the request of a sudo command line; on failure it
// returns nil and the exit code, having said why.
func sudoRequest(e *env, o sudoOptions) (*wire.Outgoing, int) {
	req := client.NewRequest("")
	req.Pipeline = [][]string{o.argv}
	priv := true
	req.Privileged = &priv
	// -u root is what a request means without run_as, but for a group:
	// a group without -u runs as the requester.
	req.RunAs, req.RunAsGroup = o.user, o.group
	if o.group == "" && (o.user == "root" || o.user == "#0") {
		req.RunAs = ""
	}
	if wd, err := os.Getwd(); err == nil {
		req.Cwd = wd
	}
	req.Reason = o.reason
	if !o.reasonGiven {
		req.Reason = os.Getenv(reasonEnv)
	}
	if req.Reason == "" {
		req.Reason = noReason()
	}
	env, err := preservedEnv(e.stderr, o)
	if err != nil {
		errorf(e.stderr, "%s", err)
		return nil, exitError
	}
	req.Env = env
	return req, 0
}

// noReason is the reason of a request that gave none: it says so, and
// which process ran rootgate sudo, by the name that process gave itself.
func noReason() string {
	ppid := os.Getppid()
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", ppid))
	name := "?"
	if err == nil {
		name = termsafe.Quote(strings.TrimSuffix(string(comm), "\n"))
	}
	return fmt.Sprintf("no reason given (rootgate sudo, run by pid %d %s, as the requester names it)", ppid, name)
}

// envAllowlist is the env allowlist built into this rootgate
// (wire.DefaultEnvAllow), which rootgated of the same version uses: the
// client does not ask the daemon for its own.
func envAllowlist() string { return strings.Join(wire.DefaultEnvAllow(), ", ") }

// preservedEnv is the environment a sudo command line passes: -E takes
// every allowlisted variable set here whose value the daemon accepts
// (warning about the others); --preserve-env=LIST takes the named ones
// that are set, and NAME=value words set theirs (addAllowed: a name or a
// value the allowlist refuses refuses the whole request).
func preservedEnv(stderr io.Writer, o sudoOptions) (map[string]string, error) {
	allow := wire.EnvPolicy(wire.DefaultEnvAllow())
	env := map[string]string{}
	if o.preserveAll {
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			switch err := allow.Check(map[string]string{k: v}); {
			case err == nil:
				env[k] = v
			case wire.CodeOf(err) == wire.CodeEnvValue:
				warningf(stderr, "sudo -E: %s is not passed: %v", k, err)
			}
		}
	}
	preserve := make([]envVar, 0, len(o.preserve))
	for _, k := range o.preserve {
		v, ok := os.LookupEnv(k)
		preserve = append(preserve, envVar{k, v, ok})
	}
	if err := addAllowed(env, allow, preserve, "--preserve-env", "passed"); err != nil {
		return nil, err
	}
	if err := addAllowed(env, allow, o.setEnv, "NAME=value", "set"); err != nil {
		return nil, err
	}
	if len(env) == 0 {
		return nil, nil
	}
	return env, nil
}

// envVar is a variable a sudo command line passes or sets; isSet is false
// for one --preserve-env names that is not set here.
type envVar struct {
	name, value string
	isSet       bool
}

// addAllowed adds to env each of vars that is set and that allow admits.
// Names allow refuses (even of variables not set) refuse the request, all
// of them in one error; a value it refuses does too. opt is where the
// variables come from on the command line, verb what the request would
// do with them.
func addAllowed(env map[string]string, allow wire.EnvPolicy, vars []envVar, opt, verb string) error {
	var refused []string
	for _, kv := range vars {
		err := allow.Check(map[string]string{kv.name: kv.value})
		switch {
		case wire.CodeOf(err) == wire.CodeEnvNotAllowed:
			refused = append(refused, termsafe.Quote(kv.name))
		case !kv.isSet:
			// Not set here: nothing to pass, as with sudo.
		case err != nil:
			return fmt.Errorf("sudo %s: %v", opt, err)
		default:
			env[kv.name] = kv.value
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("sudo %s: %s may not be %s: the env allowlist built into rootgate admits only %s", opt, strings.Join(refused, ", "), verb, envAllowlist())
	}
	return nil
}

// forwardedStdin returns the standard input to send with the request: any
// but a terminal, which a request cannot carry (the command gets
// /dev/null then).
func forwardedStdin(stdin io.Reader) (io.Reader, bool) {
	if stdin == nil {
		return nil, false
	}
	if f, ok := stdin.(*os.File); ok {
		if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err == nil {
			return nil, false
		}
	}
	return stdin, true
}

// stdinNoticeAfter is how long rootgate sudo waits for its standard input
// to end before it says that it waits for that.
var stdinNoticeAfter = 2 * time.Second

// readStdin reads stdin to its end, or to one byte past what a request
// can hold. When the end has not come after stdinNoticeAfter, it says on
// stderr that it waits for it: an agent's tool may hold a pipe open.
func readStdin(ctx context.Context, stdin io.Reader, stderr io.Writer) ([]byte, error) {
	type result struct {
		data []byte
		err  error
	}
	done := make(chan result, 1)
	go func() {
		data, err := io.ReadAll(io.LimitReader(stdin, maxStdin+1))
		done <- result{data, err}
	}()
	notice := time.NewTimer(stdinNoticeAfter)
	defer notice.Stop()
	for {
		select {
		case r := <-done:
			if r.err != nil {
				return nil, fmt.Errorf("read stdin: %w", r.err)
			}
			return r.data, nil
		case <-notice.C:
			sayf(stderr, "waiting", "standard input has not ended: rootgate sudo sends it with the request; if the command reads none, give it </dev/null")
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// maxStdin is more stdin than a request line can hold in base64.
const maxStdin = wire.MaxLine / 4 * 3

// encodedLen is the length of req's request line, newline included, as
// client.Do sends it.
func encodedLen(req *wire.Outgoing) int {
	n := base64.StdEncoding.EncodedLen(len(req.Stdin))
	out := *req
	out.Stdin = nil
	out.EOFWithdraws, out.Progress = true, true
	line, err := json.Marshal(&out)
	if err != nil {
		return wire.MaxLine + 1
	}
	return len(line) + n + len(`,"stdin":""`) + 1
}

// sudoPolicyAllows is the first half of sudo -n: a check request asks
// the daemon what it would do with req now (its policy, then a standing
// grant of this user's). It returns ok when the daemon would run it
// without a person; otherwise it has said why, a deny rule's denial in the
// words the run would be denied with, and returns the exit code: no run
// is sent, and standard input is not read.
func sudoPolicyAllows(ctx context.Context, e *env, socket string, req *wire.Outgoing) (code int, ok bool) {
	stderr := e.stderr
	chk := *req
	chk.Check = true
	resp, err := client.Do(ctx, socket, &chk)
	if err != nil {
		return fail(stderr, err), false
	}
	if resp.Status != wire.StatusOK {
		return sudoReport(resp, e.stdout, stderr, req.Pipeline[0]), false
	}
	switch resp.Check {
	case wire.CheckAllow:
		return 0, true
	case wire.CheckDeny:
		sayf(stderr, "denied", "%s", checkDenial(resp))
		return exitDenied, false
	}
	sayf(stderr, "denied", "sudo -n: the policy does not allow this without asking a person, nor does a standing grant, and -n does not wait for one")
	return exitDenied, false
}

// checkDenial is the denial a check answered deny foretells: the message
// rootgated denies the run with (wire.DeniedByPolicyError), made of the
// rule and the line its decided_by names; the check's own message when it
// names none.
func checkDenial(resp *wire.Response) string {
	if d := resp.DecidedBy; d != nil && d.By == wire.DecidedByPolicy {
		if d.Source != "" {
			return wire.DeniedByPolicyError(d.Source, d.Rule).Error()
		}
	}
	return "sudo -n: " + resp.Message
}

// sudoRunUnasked is the second half of sudo -n: req is sent, and withdrawn
// at once if the daemon puts it to a person all the same (its policy was
// reloaded, or the grant ended, since the check, or standard input made
// the request another than the grant's).
func sudoRunUnasked(ctx context.Context, e *env, socket string, req *wire.Outgoing) int {
	stderr := e.stderr
	// The check said allow: the daemon decides the run without a person
	// (or denies it, its policy reloaded since), and a denial comes back
	// in its own words.
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	asked := false
	resp, err := streamed(runCtx, e, socket, req, func(phase string) {
		if phase == wire.ProgressApproval {
			asked = true
			cancel()
		}
	})
	if asked {
		sayf(stderr, "denied", "sudo -n: rootgated put the request to a person, so it was withdrawn: -n does not wait for one")
		return exitDenied
	}
	if err != nil {
		return sudoFailRun(ctx, stderr, err)
	}
	return sudoReport(resp, e.stdout, stderr, req.Pipeline[0])
}

// sudoValidate is sudo -v: no credentials are cached, so it only checks
// that rootgated answers.
func sudoValidate(ctx context.Context, e *env) int {
	req := client.NewRequest("")
	req.Action = wire.ActionPing
	resp, err := client.Do(ctx, client.Socket(""), req)
	if err != nil {
		return fail(e.stderr, err)
	}
	if resp.Status != wire.StatusOK {
		errorf(e.stderr, "%s", resp.Message)
		return exitError
	}
	sayf(e.stderr, "ok", "rootgated %s answers; nothing is cached: each command is allowed by the policy or asked for", resp.Version)
	if resp.Approver != nil && !*resp.Approver {
		warningf(e.stderr, "no approver who may decide your requests is attached: what the policy does not allow is denied now")
	}
	return exitOK
}

// sudoList is sudo -l: with a command, the daemon's decision about it (a
// check request); without, the rules that concern this user.
func sudoList(ctx context.Context, e *env, o sudoOptions) int {
	if len(o.argv) == 0 {
		return sudoListRules(e, cmp.Or(o.policy, policy.DefaultFile))
	}
	req, code := sudoRequest(e, o)
	if req == nil {
		return code
	}
	req.Check = true
	resp, err := client.Do(ctx, client.Socket(""), req)
	if err != nil {
		return fail(e.stderr, err)
	}
	if resp.Status != wire.StatusOK {
		return report(resp, e.stdout, e.stderr)
	}
	rule := ""
	switch d := resp.DecidedBy; {
	case d == nil:
	case d.By == wire.DecidedByGrant:
		rule = fmt.Sprintf(" (standing grant %s from %s)", termsafe.Sanitize(d.Grant), termsafe.Sanitize(d.Approver))
	case d.Rule != "":
		rule = fmt.Sprintf(" (rule at %s: %s)", termsafe.Sanitize(d.Source), termsafe.Sanitize(d.Rule))
	}
	fmt.Fprintf(e.stdout, "%s: %s%s\n", resp.Check, termsafe.Sanitize(resp.Message), rule)
	if resp.Check == wire.CheckDeny {
		return 1
	}
	return exitOK
}

// sudoListRules is sudo -l without a command: the rules of the policy file
// (as this user may read it) that can decide a privileged request of this
// user, in the order they are tried. Rules scoped to other users are left
// out, as the daemon's check never names them.
func sudoListRules(e *env, file string) int {
	u, err := user.Current()
	if err != nil {
		return fail(e.stderr, err)
	}
	name := termsafe.Sanitize(u.Username)
	fmt.Fprintf(e.stdout, "rootgate sudo sends each command to rootgated, which runs it when a policy\nrule allows it, refuses it when one denies it, and otherwise asks a person.\n")
	p, err := policy.LoadFiles(file, policy.LoadOptions{})
	if err != nil {
		fmt.Fprintf(e.stdout, "The policy cannot be read here (%s).\n", safeText(err.Error()))
	} else {
		var rules []*policy.Rule
		for i := range p.Rules {
			if r := &p.Rules[i]; r.Concerns(u.Username, true) {
				rules = append(rules, r)
			}
		}
		if len(rules) == 0 {
			fmt.Fprintf(e.stdout, "No rule of %s concerns user %s: every command is put to a person.\n", safeText(file), name)
		} else {
			fmt.Fprintf(e.stdout, "The rules of %s for user %s, the first that matches deciding:\n", safeText(file), name)
			for _, r := range rules {
				fmt.Fprintf(e.stdout, "  %s (%s:%d)\n", safeText(r.Text), safeText(r.File), r.Line)
			}
		}
	}
	fmt.Fprintf(e.stdout, "Ask the daemon about one command with: sudo -l CMD ARGS\n")
	return exitOK
}

// sudoFailRun is failRun for rootgate sudo: a request ended by SIGINT or
// SIGTERM (its run killed) ends rootgate sudo by that same signal, saying
// nothing, as sudo ends by the signal it passed on to its command, so
// that the caller's shell (and timeout) sees what it would under sudo.
func sudoFailRun(ctx context.Context, stderr io.Writer, err error) int {
	if sig, ok := interruptedBy(ctx); ok && errors.Is(err, context.Canceled) {
		exitSignal.Store(int32(sig))
		return exitInterrupted
	}
	return failRun(ctx, stderr, err)
}
