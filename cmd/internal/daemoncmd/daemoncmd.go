// Package daemoncmd is the rootgated command: its flags, its start-up and
// its shutdown. cmd/rootgated is a few lines around [Main]; tests run Main
// in-process as the rootgated command.
package daemoncmd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	"github.com/coreos/go-systemd/v22/journal"
	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/cgroup"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/cliout"
	"github.com/rootgate/rootgate/internal/daemon"
	"github.com/rootgate/rootgate/internal/slogjournal"
	"github.com/rootgate/rootgate/internal/version"
	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/policy"
)

// synopsis is how rootgated is called, in its usage and manual page.
const synopsis = "rootgated [flags]"

const usage = `usage: ` + synopsis + `

rootgated runs commands for rootgate clients once a policy rule or a person
approves them. It must run as root.

Examples:
  sudo rootgated --tty                       prompt on this terminal
  sudo rootgated --policy ` + defaultPolicy + ` --socket ` + client.DefaultSocket + `

Flags:
`

// out writes rootgated's own lines, "rootgated: KIND: text", to stderr or
// the --tty terminal; everything else it says goes to its log.
const out = cliout.Prog("rootgated")

// Exit codes (the manual page's EXIT STATUS).
const (
	exitOK     = 0 // stopped by SIGTERM, SIGINT or an idle exit, or asked for its version or documents
	exitFailed = 1 // could not start or serve
	exitUsage  = 2 // bad flags or arguments
	// exitConfig (EX_CONFIG, which systemd calls CONFIG): the
	// configuration cannot work (a policy that does not parse, an
	// unusable audit log or runtime directory, the wrong sockets handed
	// over). Starting again cannot help, so rootgate.service lists it,
	// with exitUsage, in RestartPreventExitStatus=.
	exitConfig = 78
)

// configError is an error of serve's that exitConfig reports: fixing it
// takes a person.
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

// configErr marks err as a configuration error.
func configErr(err error) error { return configError{err} }

// config is rootgated's settings, each field named as its flag: the
// daemon's own in Daemon (daemon.Settings), the command's besides.
type config struct {
	Daemon daemon.Config

	Socket             string
	ApproverSocket     string
	Approver           []string
	Policy             string
	TTY                bool
	UnsafeSelfApproval bool
	GroupWithin        time.Duration
	IdleExit           time.Duration
	Audit              string
	AuditMaxSize       int64
	AuditKeep          int
	Cgroup             string
	CgroupShared       bool
	RunMemoryMax       int64
	RunTasksMax        int
	Version            bool
	Man                bool
	Completion         string

	socketsGiven bool // --socket or --approver-socket was on the command line
}

// Main runs rootgated with args (without the program name) until SIGINT or
// SIGTERM, and returns the exit code.
//
// SIGHUP reloads the policy (docs/policy.md) without stopping anything;
// only a --tty daemon not started under nohup takes it as its terminal's
// hangup and stops. Having a handler, runs start with SIGHUP's default
// action rather than inheriting an ignore.
func Main(args []string) int {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryLimit)
	}
	hup := hangups{ignored: signal.Ignored(syscall.SIGHUP)}
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	defer signal.Stop(ch)
	hup.c = ch
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(ctx, args, os.Stderr, hup)
}

// hangups is how SIGHUP reaches serve.
type hangups struct {
	c       <-chan os.Signal
	ignored bool // SIGHUP was ignored at start (nohup)
}

// memoryLimit is the Go runtime's soft memory limit for the daemon, unless
// GOMEMLIMIT sets another. Nearly all the daemon's memory is runs' captured
// output: byte buffers without pointers, which a collection frees without
// scanning. A request whose run kept much of it collects it as it ends
// (daemon/collect.go); the limit bounds the garbage that collection does
// not look for (runs that kept less, request lines), which the default
// pacing (GOGC=100) would let reach twice what is live. It is soft: a
// daemon with more live output than this (several runs capturing at once)
// grows past it and collects more often meanwhile (docs/performance.md).
const memoryLimit = 48 << 20

// flags are rootgated's settings, each declared once: the daemon's
// (daemon.Settings, into config.Daemon) and the command's own, each flag
// bound to its field of [config], named as the flag. Parsing, -h, the
// manual page and the completions are made from them; adding a flag is
// one entry here (and its field), or in daemon.Settings for a
// daemon.Config field.
var flags = append(clidoc.Within(daemon.Settings, func(c *config) *daemon.Config { return &c.Daemon }),
	[]clidoc.Setting[config]{
		{Flag: clidoc.Flag{Name: "socket", Default: client.DefaultSocket, Usage: "request socket `path`; ignored when socket-activated (LISTEN_FDS), as the handed-over sockets win"}, Field: func(c *config) any { return &c.Socket }},
		{Flag: clidoc.Flag{Name: "approver-socket", Default: client.DefaultApproverSocket, Usage: "approver socket `path` (\"\" for none); ignored when socket-activated: only an fd named \"approvers\" serves approvers then"}, Field: func(c *config) any { return &c.ApproverSocket }},
		{Flag: clidoc.Flag{Name: "approver", Default: clidoc.List(nil), Usage: "admit `USER` or @GROUP as an approver besides root (repeatable)"}, Field: func(c *config) any { return &c.Approver }},
		{Flag: clidoc.Flag{Name: "policy", Default: defaultPolicy, Usage: "policy rules `file`; a missing file means ask for everything"}, Field: func(c *config) any { return &c.Policy }},
		{Flag: clidoc.Flag{Name: "tty", Default: false, Usage: "prompt for approval on the daemon's controlling terminal, with the rootgate approve it runs there: the rootgate next to rootgated, or in the search path of runs, which no one but root (or, next to it, rootgated's owner) can change"}, Field: func(c *config) any { return &c.TTY }},
		{Flag: clidoc.Flag{Name: "unsafe-self-approval", Default: false, Usage: "UNSAFE: still ask approvers whose terminal or session the requester's uid can control (it could type the answer itself); guards against mistakes only, never against a hostile agent"}, Field: func(c *config) any { return &c.UnsafeSelfApproval }},
		{Flag: clidoc.Flag{Name: "group-within", Default: approval.DefaultGroupWithin, Usage: "identical requests from one requester arriving within this `duration` of the first are one prompt, one answer deciding all; 0 asks about each alone"}, Field: func(c *config) any { return &c.GroupWithin }},
		{Flag: clidoc.Flag{Name: "idle-exit", Default: 10 * time.Minute, Usage: "when socket-activated, exit this long after the last connection ended, with no connection, no attached approver and no run meanwhile, and not before the replay window (2 × --max-skew) of the last request is over; 0 never exits. A daemon started by hand never exits when idle, as nothing would bring it back"}, Field: func(c *config) any { return &c.IdleExit }},
		{Flag: clidoc.Flag{Name: "audit", Default: audit.DefaultPath, Usage: "audit log `file` (created 0600, its directory 0700); it cannot be turned off"}, Field: func(c *config) any { return &c.Audit }},
		{Flag: clidoc.Flag{Name: "audit-max-size", Default: clidoc.Size(defaultAuditMaxSize), Usage: "rotate the audit log before it grows past this `size` (bytes, or with K, M or G); 0 never rotates"}, Field: func(c *config) any { return &c.AuditMaxSize }},
		{Flag: clidoc.Flag{Name: "audit-keep", Default: defaultAuditKeep, Usage: "rotated audit files kept; older ones are removed after a rotation (0 keeps all)"}, Field: func(c *config) any { return &c.AuditKeep }},
		{Flag: clidoc.Flag{Name: "cgroup", Default: cgroup.Auto, Usage: "where each run gets a cgroup v2 of its own: \"auto\" (a subtree of the daemon's own cgroup when it is the tree's root or was delegated to the daemon, as under rootgate.service), a cgroup2 `directory` to make the runs' cgroups in, or \"none\"; without one, runs are contained by sessions, process groups and an environment tag only (docs/security.md)"}, Field: func(c *config) any { return &c.Cgroup }},
		{Flag: clidoc.Flag{Name: "cgroup-shared", Default: false, Usage: "start even though the runs' cgroup parent holds cgroups rootgated did not make, and leave them alone; without it the daemon refuses to start next to them, as a --cgroup naming such a directory is most likely a mistake. rootgated only ever kills and removes the cgroups it made and marked"}, Field: func(c *config) any { return &c.CgroupShared }},
		{Flag: clidoc.Flag{Name: "run-memory-max", Default: clidoc.Size(0), Usage: "memory limit of every run (memory.max, `size` in bytes, or with K, M or G); 0 is none. The daemon refuses to start when its runs' cgroups have no memory controller"}, Field: func(c *config) any { return &c.RunMemoryMax }},
		{Flag: clidoc.Flag{Name: "run-tasks-max", Default: 0, Usage: "limit on the processes and threads of every run (pids.max); 0 is none. The daemon refuses to start when its runs' cgroups have no pids controller"}, Field: func(c *config) any { return &c.RunTasksMax }},
		{Flag: clidoc.Flag{Name: "version", Default: false, Usage: "print the version and exit"}, Field: func(c *config) any { return &c.Version }},
		{Flag: clidoc.Flag{Name: "man", Default: false, Usage: "print the rootgated(8) manual page in roff and exit"}, Field: func(c *config) any { return &c.Man }},
		{Flag: clidoc.Flag{Name: "completion", Default: "", Usage: "print a completion script for `shell` (bash, zsh or fish) and exit"}, Field: func(c *config) any { return &c.Completion }},
	}...)

// defaultPolicy is --policy's default.
const defaultPolicy = policy.DefaultFile

// parse reads args into a config; errors are reported to out too, as
// package flag does.
func parse(args []string, out io.Writer) (*config, *flag.FlagSet, error) {
	c := &config{}
	fs := clidoc.Bind("rootgated", flags, c, out)
	err := fs.Parse(args)
	fs.Visit(func(f *flag.Flag) {
		c.socketsGiven = c.socketsGiven || f.Name == "socket" || f.Name == "approver-socket"
	})
	return c, fs, err
}

// run is rootgated's whole life; it returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer, hup hangups) int {
	// The lines that say why it did not start must reach journalctl -p err.
	errw := errOut(stderr)
	o, fs, err := parse(args, io.Discard)
	fs.Usage = func() {}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stderr, usage)
			fs.SetOutput(stderr)
			fs.PrintDefaults()
			return exitOK
		}
		out.Errorf(errw, "%v", err)
		out.Hintf(errw, "run \"rootgated -h\" for the flags")
		return exitUsage
	}
	if fs.NArg() > 0 {
		out.Errorf(errw, "unexpected argument %q", fs.Arg(0))
		return exitUsage
	}
	d := &o.Daemon
	if o.Version {
		fmt.Fprintln(os.Stdout, "rootgated", version.String())
		return exitOK
	}
	if o.Man || o.Completion != "" {
		if err := writeDoc(os.Stdout, o.Man, o.Completion); err != nil {
			out.Errorf(errw, "%v", err)
			return exitUsage
		}
		return exitOK
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"prompt-timeout", d.PromptTimeout}, {"approver-ping", d.ApproverPing}, {"approver-silence", d.ApproverSilence}, {"exec-timeout", d.ExecTimeout}, {"kill-grace", d.KillGrace}, {"max-skew", d.MaxSkew}, {"first-byte-timeout", d.FirstByteTimeout}, {"read-timeout", d.ReadTimeout}, {"stall-timeout", d.StallTimeout}} {
		if d.v <= 0 {
			out.Errorf(errw, "--%s must be positive", d.name)
			return exitUsage
		}
	}
	if d.ApproverSilence <= d.ApproverPing {
		out.Errorf(errw, "--approver-silence (%s) must be longer than --approver-ping (%s)", d.ApproverSilence, d.ApproverPing)
		return exitUsage
	}
	if o.AuditKeep < 0 || d.AuditRejectRate < 1 {
		out.Errorf(errw, "--audit-keep must not be negative and --audit-reject-rate must be at least 1")
		return exitUsage
	}
	if d.AuditUIDBudget < minAuditUIDBudget {
		out.Errorf(errw, "--audit-uid-budget must be at least 64K")
		return exitUsage
	}
	if o.RunMemoryMax < 0 || o.RunTasksMax < 0 {
		out.Errorf(errw, "--run-memory-max and --run-tasks-max must not be negative")
		return exitUsage
	}
	if d.MaxConnsPerUID < 0 {
		out.Errorf(errw, "--max-conns-per-uid must not be negative")
		return exitUsage
	}
	if o.GroupWithin < 0 || o.GroupWithin > d.PromptTimeout {
		out.Errorf(errw, "--group-within must be between 0 and --prompt-timeout")
		return exitUsage
	}
	if o.IdleExit < 0 {
		out.Errorf(errw, "--idle-exit must not be negative")
		return exitUsage
	}
	if d.MaxRuns < 1 || d.MaxConns < 1 || d.MaxPending < 1 || d.PromptRate < 1 || d.MaxRequestsPerUID < 1 {
		out.Errorf(errw, "--max-runs, --max-conns, --max-requests-per-uid, --max-pending and --prompt-rate must be at least 1")
		return exitUsage
	}
	if o.Audit == "" {
		out.Errorf(errw, "--audit must name a file: the audit log cannot be turned off")
		return exitUsage
	}
	if err := serve(ctx, o, stderr, hup); err != nil {
		out.Errorf(errw, "%v", err)
		if errors.As(err, new(configError)) {
			return exitConfig
		}
		return exitFailed
	}
	return exitOK
}

// foreignCgroups is why the daemon must not start with cgroups c: their
// parent holds cgroups rootgated did not make, unless shared says it may.
func foreignCgroups(c *cgroup.Runs, shared bool) error {
	if shared {
		return nil
	}
	foreign, err := c.Foreign()
	if err != nil {
		return fmt.Errorf("--cgroup: %w", err)
	}
	if len(foreign) == 0 {
		return nil
	}
	more := ""
	if len(foreign) > 1 {
		more = fmt.Sprintf(" and %d more", len(foreign)-1)
	}
	return fmt.Errorf("--cgroup: %s holds cgroups rootgated did not make (%s%s): name a directory of rootgated's own, or pass --cgroup-shared to start anyway and leave them alone", c.Parent, foreign[0], more)
}

// serve runs the daemon until ctx ends; each SIGHUP reloads the policy,
// except that it stops a --tty daemon not started under nohup.
func serve(ctx context.Context, o *config, stderr io.Writer, hup hangups) error {
	if os.Geteuid() != 0 {
		return configErr(errors.New("must run as root"))
	}
	// A cgroup of its own for every run, where the machine allows it;
	// in the directory named, or not at all.
	cgroups, noCgroup := cgroup.SetupRuns(o.Cgroup)
	if cgroups != nil {
		defer cgroups.Close()
		if err := foreignCgroups(cgroups, o.CgroupShared); err != nil {
			return configErr(err)
		}
	} else if o.Cgroup != cgroup.Auto && o.Cgroup != cgroup.None && o.Cgroup != "" {
		return configErr(fmt.Errorf("--cgroup: %w (a directory named is used or the daemon does not start)", noCgroup))
	}
	// Limits this machine cannot enforce are a configuration error: the
	// daemon never runs without a limit it was told to apply.
	limits := cgroup.Limits{Memory: o.RunMemoryMax, Tasks: int64(o.RunTasksMax)}
	if err := cgroups.Check(limits); err != nil {
		if cgroups == nil {
			err = fmt.Errorf("%w: %v", err, noCgroup)
		}
		return configErr(fmt.Errorf("--run-memory-max, --run-tasks-max: %w", err))
	}
	if cgroups != nil {
		cgroups.Limits = limits
	} else {
		// The fallback: orphans of a run come to the daemon rather than
		// to init, where the end of their run finds them by its tag.
		if err := pipeline.Subreaper(); err != nil {
			return fmt.Errorf("cannot become a subreaper: %w", err)
		}
	}
	// Take the handed-over sockets first: until they are taken, LISTEN_*
	// stays in the environment, and nothing may start a child before that.
	activated := socketActivated()
	var ln, aln *net.UnixListener
	if activated {
		var err error
		if ln, aln, err = activationListeners(); err != nil {
			return configErr(err)
		}
		defer ln.Close()
		if aln != nil {
			defer aln.Close()
		}
	}
	logOut := stderr
	broker := &approval.Broker{Timeout: o.Daemon.PromptTimeout, UnsafeSelfApproval: o.UnsafeSelfApproval, GroupWithin: o.GroupWithin}
	var tty *ttyApprover
	var ttyLog *termLog
	if o.TTY {
		var err error
		if tty, err = openTTY(); err != nil {
			return err
		}
		defer tty.client.Close()
		if stderrIsTerminal(stderr) {
			ttyLog = &termLog{terminal: stderr}
			logOut = ttyLog
		}
	}
	log := newLogger(logOut)
	if cgroups != nil {
		log.Info(cgroups.Summary())
	} else {
		log.Warn("cgroup: none (" + noCgroup.Error() + "): runs contained by sessions, process groups and an environment tag only; a process that leaves what its stage leads (its process group, and its session where it leads one) and replaces its environment outlives its run and a daemon crash; no limits")
	}
	if o.Daemon.ApproverSilence >= o.Daemon.PromptTimeout {
		log.Info("--approver-silence is not shorter than --prompt-timeout: a request put to an approver cut off without a close waits out its prompt", "approver_silence", o.Daemon.ApproverSilence.String(), "prompt_timeout", o.Daemon.PromptTimeout.String())
	}
	if _, left := pipeline.SafeSearchPath(); len(left) > 0 {
		why := make([]string, len(left))
		for i, l := range left {
			why[i] = l.Why
		}
		log.Warn("search path: privileged runs that users other than root ask for leave out what others than root may change: "+strings.Join(why, "; "), "path", pipeline.SearchPath)
	}
	if o.UnsafeSelfApproval {
		log.Warn("UNSAFE: --unsafe-self-approval is on: a requester may be asked through an approver whose terminal or session its own uid controls, and could type the answer itself; this guards against mistakes only, not against a hostile agent")
	}
	if tty != nil {
		if who := approval.Uninvolved(tty.peer.Controllers, userName); who != "" {
			out.Warningf(logOut, "this terminal is not asked about requests from %s: they can control it", who)
		}
	}
	var admit daemon.Admission
	for _, a := range o.Approver {
		if err := admit.ParseApprover(a); err != nil {
			return configErr(err)
		}
	}

	loadPolicy := func() (*policy.Policy, error) {
		return policy.LoadFiles(o.Policy, policy.LoadOptions{Trusted: true})
	}
	pol, err := loadPolicy()
	if err != nil {
		return configErr(err)
	}
	for _, r := range pol.AllowsAllPrivileged() {
		log.Warn("policy allows every privileged command without asking", "file", r.File, "line", r.Line, "rule", r.Text)
	}
	daemon.WarnOverrides(log, pol)

	alog, err := audit.Open(o.Audit, audit.Options{MaxSize: o.AuditMaxSize, Keep: o.AuditKeep, Warn: log.Error})
	if err != nil {
		return configErr(err)
	}
	defer alog.Close()

	// The flags set the rest of the daemon's settings.
	cfg := o.Daemon
	cfg.Version = version.String()
	cfg.Policy, cfg.LoadPolicy, cfg.PolicyFile = pol, loadPolicy, o.Policy
	cfg.Approver, cfg.Broker, cfg.Admission = broker, broker, admit
	cfg.Audit, cfg.Cgroups, cfg.Log = alog, cgroups, log
	srv, err := daemon.New(cfg)
	if err != nil {
		return configErr(err) // the runtime directory
	}
	defer srv.Close()
	// The terminal's approver is attached before the daemon serves: the
	// first request may be put to it.
	var approver *running
	if tty != nil {
		if approver, err = tty.start(srv, ttyLog); err != nil {
			return err
		}
		defer approver.stop()
	}
	// The opened record says who writes from here on (pid, boot id and
	// start time: the next daemon tells by them whether this one is gone),
	// and that the runs left unfinished before it are recorded (New did):
	// the next daemon reads the trail back to it, no further. A log that
	// cannot be written stops the daemon before it serves.
	if err := alog.Append(&audit.Record{Kind: audit.KindOpened, Daemon: audit.ThisDaemon(version.String())}); err != nil {
		return err
	}
	socket := o.Socket
	if activated {
		socket = ln.Addr().String()
		if o.socketsGiven {
			log.Warn("socket-activated: --socket and --approver-socket are ignored")
		}
	} else {
		if ln, err = daemon.Listen(o.Socket); err != nil {
			return err
		}
		if _, _, why := daemon.SocketAccess(); why != "" {
			log.Warn(why)
		}
		if o.ApproverSocket != "" {
			if aln, err = daemon.ListenApprovers(o.ApproverSocket, admit.Open()); err != nil {
				ln.Close()
				return err
			}
		}
	}
	log.Info("serving", "audit", o.Audit, "socket", socket, "activated", activated, "approvers", aln != nil, "version", version.String(), "tty", o.TTY, "policy_rules", len(pol.Rules))
	if o.TTY {
		out.Sayf(logOut, "ready", "prompts appear here; in another terminal, try:")
		fmt.Fprintf(logOut, "  sudo %s\n", firstRequest(socket))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- srv.Serve(ctx, ln) }()
	n := 1
	if aln != nil {
		n++
		go func() { errs <- srv.ServeApprovers(ctx, aln) }()
	}
	notify(log, sdnotify.SdNotifyReady)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup.c:
				if tty != nil && !hup.ignored {
					// The terminal the daemon prompts on hung up
					// (closed, or sudo passing its hangup on).
					log.Info("SIGHUP: the terminal hung up; stopping")
					cancel()
					return
				}
				// The unit's ExecReload= only sends the signal: the
				// reload is done here, after systemctl reload returned.
				_ = srv.ReloadPolicy() // logged and audited
			}
		}
	}()
	if iv, err := sdnotify.SdWatchdogEnabled(false); err != nil {
		log.Warn("watchdog", "err", err)
	} else if iv > 0 {
		go watchdog(ctx, log, iv/2)
	}
	if activated && o.IdleExit > 0 {
		go func() {
			if srv.WaitIdle(ctx, o.IdleExit) == nil {
				log.Info("idle; exiting", "idle_exit", o.IdleExit)
				cancel() // the same way out as SIGTERM
			}
		}()
	}
	if approver != nil {
		go func() {
			select {
			case <-ctx.Done():
			case <-approver.Done():
				// As a hangup: no one is left to ask on this terminal.
				log.Info("the approver on this terminal exited; stopping")
				cancel()
			}
		}()
	}
	stopping := make(chan struct{})
	go func() {
		defer close(stopping)
		<-ctx.Done()
		notify(log, sdnotify.SdNotifyStopping)
	}()
	// STOPPING=1 must be sent before the process exits.
	defer func() { cancel(); <-stopping }()
	var first error
	for range n {
		if err := <-errs; !errors.Is(err, daemon.ErrServerClosed) && first == nil {
			first = err
			cancel() // one listener failed: stop the other too
		}
	}
	if approver != nil {
		// Every request is answered: the approver may go, and the
		// terminal is the log's again.
		approver.stop()
	}
	if first == nil {
		log.Info("stopped")
	}
	return first
}

// notify tells the service manager state; outside systemd it does nothing.
func notify(log *slog.Logger, state string) {
	if _, err := sdnotify.SdNotify(false, state); err != nil {
		log.Warn("sd_notify", "state", state, "err", err)
	}
}

// watchdog pings the service manager's watchdog every interval until ctx
// ends.
func watchdog(ctx context.Context, log *slog.Logger, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			notify(log, sdnotify.SdNotifyWatchdog)
		}
	}
}

// operatorUID is the uid of the operator named name (the sudo user under
// sudo), else the terminal's owner, else root: who the audit log and
// decided_by say approved at the daemon's own terminal.
func operatorUID(name string, owner int) int {
	if u, err := user.Lookup(name); err == nil {
		if uid, err := strconv.Atoi(u.Uid); err == nil {
			return uid
		}
	}
	return max(owner, 0)
}

// userName names uid, or "" when it has no passwd entry.
func userName(uid int) string {
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return u.Username
	}
	return ""
}

// firstRequest is the command a newcomer can paste to try the daemon.
func firstRequest(socket string) string {
	bin := "rootgate"
	if exe, err := os.Executable(); err == nil {
		if c := filepath.Join(filepath.Dir(exe), "rootgate"); fileExists(c) {
			bin = c
			if wd, err := os.Getwd(); err == nil {
				if rel, err := filepath.Rel(wd, c); err == nil && !strings.HasPrefix(rel, "..") {
					bin = "./" + rel
				}
			}
		}
	}
	cmd := bin + " run"
	if socket != client.DefaultSocket {
		cmd += " --socket " + socket
	}
	return cmd + ` --reason "first try" -- id`
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// errOut is where run writes the lines that say why the daemon did not
// start: stderr, each line with the journal's priority prefix "<3>" (err,
// sd-daemon(3)) when stderr is the journal's stream, as under systemd: so
// journalctl -p err shows them, and systemctl status with them.
func errOut(stderr io.Writer) io.Writer {
	if stderr != io.Writer(os.Stderr) {
		return stderr
	}
	if is, _ := journal.StderrIsJournalStream(); !is {
		return stderr
	}
	return errPriority{stderr}
}

// errPriority writes each line with the prefix "<3>".
type errPriority struct{ w io.Writer }

func (e errPriority) Write(p []byte) (int, error) {
	var b []byte
	for line := range bytes.Lines(p) {
		b = append(append(b, "<3>"...), line...)
	}
	if _, err := e.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newLogger logs to the journal when there is one, and as text to out
// unless out already goes to the journal (under systemd it does), so a
// daemon started by hand in a terminal still shows its log there.
func newLogger(out io.Writer) *slog.Logger {
	text := slog.NewTextHandler(out, nil)
	if !journal.Enabled() {
		return slog.New(text)
	}
	j := slogjournal.New(slogjournal.Options{Identifier: "rootgated"})
	if isJournal, _ := journal.StderrIsJournalStream(); isJournal && out == io.Writer(os.Stderr) {
		return slog.New(j)
	}
	return slog.New(slog.NewMultiHandler(j, text))
}

// defaultAuditKeep and defaultAuditMaxSize are --audit-keep's and
// --audit-max-size's defaults: with --audit-min-free's, the log takes at
// most about 700 MiB, and requests stop before the disk is full.
const (
	defaultAuditKeep    = 10
	defaultAuditMaxSize = 64 << 20
)

// minAuditUIDBudget is the least --audit-uid-budget: the records of a few
// dozen runs an hour.
const minAuditUIDBudget = 64 << 10
