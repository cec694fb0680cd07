package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/policy"
)

// exitBadPolicy is policy check's and policy test's exit code when the
// policy cannot be read, is refused, or does not parse (as visudo -c).
const exitBadPolicy = 1

// policyAbout is the help of the policy commands.
const policyAbout = `check reads the policy file as rootgated would at start or on reload
(systemctl reload rootgate): FILE (default ` + policy.DefaultFile + `), then its
drop-ins FILE.d/*.policy in name order, with the same ownership checks
(root's, not writable by group or others). It warns about each rule that
can never decide anything (a stricter rule matches wherever it matches),
then prints one ok line and exits 0, or the first error with its file and
line and exits 1.

test prints what the policy decides about a request, without sending it:
the decision, and for each stage the rule (file:line) that decided (the
strictest that matches: deny over ask over allow, in whatever file), the
other rules that match and are overridden, and why each other rule does
not match. Bare command names are resolved in the
daemon's search path, as the daemon would. It exits 0 whatever the
decision, 1 when the policy cannot be read.
`

// policyTestFlags are rootgate policy test's flags.
var policyTestFlags = []clidoc.Flag{
	{Name: "policy", Default: policy.DefaultFile, Usage: "policy `file`; its drop-ins FILE.d/*.policy are read too"},
	{Name: "user", Default: "", Usage: "the requester's user `name` (default: you)"},
	{Name: "no-privilege", Default: false, Usage: "the request runs as the requester instead of root"},
	{Name: "runas", Default: "", Usage: "the account `name` the request runs as instead of root (rootgate run --user)"},
	{Name: "rungroup", Default: "", Usage: "the `group` the request names to run with (rootgate run --group)"},
	{Name: "env", Default: clidoc.List(nil), Usage: "`KEY=VALUE` the request carries (repeatable)"},
	{Name: "session", Default: "", Usage: "the session the request names"},
	{Name: "host", Default: "", Usage: "the host the request names"},
	{Name: "cwd", Default: "/", Usage: "working `directory` of the request: a relative command is resolved in it, and cwd= rules match it"},
}

func cmdPolicy(_ context.Context, e *env, _ clidoc.Values, args []string) int {
	if len(args) > 0 && args[0] == "help" {
		fmt.Fprint(e.stdout, policyAbout)
		return exitOK
	}
	if len(args) == 0 {
		errorWithHint(e.stderr, "policy needs a command", "rootgate policy check, or rootgate policy test -- CMD ARGS")
		return exitUsage
	}
	errorWithHint(e.stderr, fmt.Sprintf("unknown policy command %q", args[0]), "rootgate policy check, or rootgate policy test -- CMD ARGS")
	return exitUsage
}

func cmdPolicyCheck(_ context.Context, e *env, _ clidoc.Values, args []string) int {
	if len(args) > 1 {
		errorf(e.stderr, "unexpected argument %q", args[1])
		return exitUsage
	}
	file := policy.DefaultFile
	if len(args) == 1 {
		// A file named is one to check: its absence is an error, while
		// the daemon's default file may be missing (no rules).
		file = args[0]
		if _, err := os.Stat(file); err != nil {
			errorf(e.stderr, "policy: %v", err)
			return exitBadPolicy
		}
	}
	p, err := policy.LoadFiles(file, policy.LoadOptions{Trusted: true})
	if err != nil {
		errorf(e.stderr, "%s", safeText(err.Error()))
		return exitBadPolicy
	}
	files := p.Files()
	if len(files) == 0 {
		sayf(e.stderr, "ok", "%s: no such file: no rules, every request is put to a person", file)
		return exitOK
	}
	for _, o := range p.Overrides() {
		warningf(e.stderr, "%s", safeText(o.String()))
	}
	sayf(e.stderr, "ok", "%s: %d rule(s) in %d file(s)", file, len(p.Rules), len(files))
	return exitOK
}

func cmdPolicyTest(_ context.Context, e *env, fl clidoc.Values, args []string) int {
	stages, err := splitPipeline(args)
	if err != nil {
		errorWithHint(e.stderr, err.Error(), "rootgate policy test -- systemctl status nginx")
		return exitUsage
	}
	s := policy.Subject{
		Privileged: !fl.Bool("no-privilege"),
		User:       fl.String("user"),
		Session:    fl.String("session"),
		Host:       fl.String("host"),
		Stages:     stages,
		RunAs:      fl.String("runas"),
		RunGroup:   fl.String("rungroup"),
		Cwd:        fl.String("cwd"),
	}
	if !s.Privileged && (s.RunAs != "" || s.RunGroup != "") {
		errorf(e.stderr, "--runas and --rungroup cannot go with --no-privilege: such a request runs as its requester")
		return exitUsage
	}
	if s.User == "" {
		u, err := user.Current()
		if err != nil {
			return fail(e.stderr, err)
		}
		s.User = u.Username
	}
	for _, kv := range fl.List("env") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			errorf(e.stderr, "--env %q is not KEY=VALUE", kv)
			return exitUsage
		}
		if s.Env == nil {
			s.Env = map[string]string{}
		}
		s.Env[k] = v
	}
	var unresolved []error
	for _, argv := range stages {
		x, err := pipeline.Resolve(argv[0], fl.String("cwd"))
		if err != nil {
			unresolved = append(unresolved, err)
		}
		s.Paths = append(s.Paths, x.Path)
	}
	p, err := policy.LoadFiles(fl.String("policy"), policy.LoadOptions{})
	if err != nil {
		errorf(e.stderr, "%s", safeText(err.Error()))
		return exitBadPolicy
	}
	m, why := p.Explain(s)
	fmt.Fprintf(e.stdout, "decision: %s\n", m.Action)
	for i, st := range why {
		path := st.Path
		if path == "" {
			path = "not found"
		}
		fmt.Fprintf(e.stdout, "stage %d: %s (%s)\n", i+1, approval.QuoteArgv(st.Argv), safeText(path))
		if st.Rule != nil {
			fmt.Fprintf(e.stdout, "  %s by %s:%d: %s\n", st.Action, safeText(st.Rule.File), st.Rule.Line, st.Rule.Text)
		} else {
			fmt.Fprintf(e.stdout, "  ask: no rule matches\n")
		}
		for _, r := range st.Overridden {
			fmt.Fprintf(e.stdout, "  overridden %s:%d: %s\n", safeText(r.File), r.Line, r.Text)
		}
		for _, sk := range st.Skipped {
			fmt.Fprintf(e.stdout, "  not %s:%d: %s: %s\n", safeText(sk.Rule.File), sk.Rule.Line, sk.Rule.Text, safeText(sk.Why))
		}
	}
	if err := errors.Join(unresolved...); err != nil {
		// The daemon would refuse such a request before its policy.
		warningf(e.stderr, "%v: rootgated would refuse the request", err)
	}
	return exitOK
}

// safeText is s as it is when it is safe on a terminal, else escaped: names
// and texts from policy files someone else may have written.
func safeText(s string) string {
	if termsafe.String(s, false) {
		return s
	}
	return termsafe.Sanitize(s)
}
