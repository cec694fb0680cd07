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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	"github.com/coreos/go-systemd/v22/journal"
	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/approval/passkey"
	"github.com/rootgate/rootgate/approval/policy"
	"github.com/rootgate/rootgate/approval/remote"
	"github.com/rootgate/rootgate/approval/terminal"
	"github.com/rootgate/rootgate/daemon"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/cliout"
	"github.com/rootgate/rootgate/internal/slogjournal"
	"github.com/rootgate/rootgate/internal/version"
	"github.com/rootgate/rootgate/pipeline"
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

// options are the daemon's flags.
type options struct {
	socket            string
	approverSock      string
	approvers         []string
	runtimeDir        string
	passkeys          string
	policy            string
	tty               bool
	unsafeSelf        bool
	promptTimeout     time.Duration
	approverPing      time.Duration
	approverQuiet     time.Duration
	groupWithin       time.Duration
	execTimeout       time.Duration
	killGrace         time.Duration
	maxSkew           time.Duration
	maxRuns           int
	maxConns          int
	maxPending        int
	maxConnsUID       int
	maxRequestsPerUID int
	firstByte         time.Duration
	readTimeout       time.Duration
	stallTimeout      time.Duration
	promptRate        int
	idleExit          time.Duration
	audit             string
	auditMaxSize      byteSize
	auditKeep         int
	auditMinFree      byteSize
	rejectRate        int
	cgroup            string
	cgroupShared      bool
	runMemoryMax      byteSize
	runTasksMax       int
	version           bool
	man               bool
	completion        string

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

// flags are rootgated's flags, read by its parsing, its manual page and
// its completions.
var flags = []clidoc.Flag{
	{Name: "socket", Default: client.DefaultSocket, Usage: "request socket `path`; ignored when socket-activated (LISTEN_FDS), as the handed-over sockets win"},
	{Name: "approver-socket", Default: client.DefaultApproverSocket, Usage: "approver socket `path` (\"\" for none); ignored when socket-activated: only an fd named \"approvers\" serves approvers then"},
	{Name: "approver", Default: clidoc.List(nil), Usage: "admit `USER` or @GROUP as an approver besides root (repeatable)"},
	{Name: "passkeys", Default: passkey.DefaultFile, Usage: "enrolled passkeys `file` (rootgate passkeys add; root's, 0600): approvals signed by one are taken from passkey relays (rootgate web) for every requester; \"\" for none"},
	{Name: "runtime-dir", Default: daemon.DefaultRuntimeDir, Usage: "`directory` for runtime state (the replay window, SSH agent relays); it must be root's and writable only by root"},
	{Name: "policy", Default: defaultPolicy, Usage: "policy rules `file`; a missing file means ask for everything"},
	{Name: "tty", Default: false, Usage: "prompt for approval on the daemon's controlling terminal"},
	{Name: "unsafe-self-approval", Default: false, Usage: "UNSAFE: still ask approvers whose terminal or session the requester's uid can control (it could type the answer itself); guards against mistakes only, never against a hostile agent"},
	{Name: "prompt-timeout", Default: approval.DefaultPromptTimeout, Usage: "how long an approval prompt waits for an answer"},
	{Name: "approver-ping", Default: remote.DefaultPingEvery, Usage: "how often each attached approver client (rootgate approve) is pinged; it answers even while a prompt is up"},
	{Name: "approver-silence", Default: remote.DefaultSilentFor, Usage: "detach an approver client that has answered nothing for this long (a connection gone silent, such as a dead ssh forward); its prompts go on with the other approvers. Keep it longer than --approver-ping and well under --prompt-timeout"},
	{Name: "group-within", Default: approval.DefaultGroupWithin, Usage: "identical requests from one requester arriving within this `duration` of the first are one prompt, one answer deciding all; 0 asks about each alone"},
	{Name: "exec-timeout", Default: daemon.DefaultExecTimeout, Usage: "run time limit; a request may only lower it"},
	{Name: "kill-grace", Default: pipeline.DefaultKillGrace, Usage: "time between SIGTERM and SIGKILL when a run is stopped"},
	{Name: "max-skew", Default: daemon.DefaultMaxSkew, Usage: "largest accepted distance between a request's time and the clock"},
	{Name: "max-runs", Default: daemon.DefaultMaxRuns, Usage: "approved runs in progress at once; a uid other than root holds at most half of them (at least 1), its further runs waiting for its own"},
	{Name: "max-conns", Default: daemon.DefaultMaxConns, Usage: "connections in flight before \"server busy\""},
	{Name: "max-conns-per-uid", Default: 0, Usage: "connections of one uid (root excepted) in flight before \"server busy\"; 0 means a quarter of --max-conns"},
	{Name: "first-byte-timeout", Default: daemon.DefaultFirstByte, Usage: "how long a connection may send nothing before it is answered with an error and closed"},
	{Name: "read-timeout", Default: daemon.DefaultReadTimeout, Usage: "how long a connection has, from connecting, to send its whole request line before it is answered with an error and closed"},
	{Name: "stall-timeout", Default: daemon.DefaultStallTimeout, Usage: "how long a client may leave its answer unread before its connection is dropped"},
	{Name: "max-requests-per-uid", Default: daemon.DefaultMaxRequestsPerUID, Usage: "requests of one uid (root excepted) within the replay window (2 × --max-skew), each of whose ids it remembers; more are refused"},
	{Name: "max-pending", Default: daemon.DefaultMaxPending, Usage: "requests of one uid waiting for a person's decision at once; more are refused"},
	{Name: "prompt-rate", Default: daemon.DefaultPromptRate, Usage: "requests of one uid put to a person per minute; more are refused"},
	{Name: "idle-exit", Default: 10 * time.Minute, Usage: "when socket-activated, exit this long after the last connection ended, with no connection, no attached approver and no run meanwhile, and not before the replay window (2 × --max-skew) of the last request is over; 0 never exits. A daemon started by hand never exits when idle, as nothing would bring it back"},
	{Name: "audit", Default: audit.DefaultPath, Usage: "audit log `file` (created 0600, its directory 0700); it cannot be turned off"},
	{Name: "audit-max-size", Default: sizeFlag(defaultAuditMaxSize), Usage: "rotate the audit log before it grows past this `size` (bytes, or with K, M or G); 0 never rotates"},
	{Name: "audit-keep", Default: defaultAuditKeep, Usage: "rotated audit files kept; older ones are removed after a rotation (0 keeps all)"},
	{Name: "audit-min-free", Default: sizeFlag(defaultAuditMinFree), Usage: "refuse requests while the audit log's file system has less than this `size` free (bytes, or with K, M or G); 0 turns the guard off"},
	{Name: "audit-reject-rate", Default: daemon.DefaultRejectRate, Usage: "rejected requests of one uid (root excepted) recorded per minute; past it they are counted in one dropped record"},
	{Name: "cgroup", Default: daemon.CgroupAuto, Usage: "where each run gets a cgroup v2 of its own: \"auto\" (a subtree of the daemon's own cgroup when it is the tree's root or was delegated to the daemon, as under rootgate.service), a cgroup2 `directory` to make the runs' cgroups in, or \"none\"; without one, runs are contained by sessions, process groups and an environment tag only (docs/security.md)"},
	{Name: "cgroup-shared", Default: false, Usage: "start even though the runs' cgroup parent holds cgroups rootgated did not make, and leave them alone; without it the daemon refuses to start next to them, as a --cgroup naming such a directory is most likely a mistake. rootgated only ever kills and removes the cgroups it made and marked"},
	{Name: "run-memory-max", Default: sizeFlag(0), Usage: "memory limit of every run (memory.max, `size` in bytes, or with K, M or G); 0 is none. The daemon refuses to start when its runs' cgroups have no memory controller"},
	{Name: "run-tasks-max", Default: 0, Usage: "limit on the processes and threads of every run (pids.max); 0 is none. The daemon refuses to start when its runs' cgroups have no pids controller"},
	{Name: "version", Default: false, Usage: "print the version and exit"},
	{Name: "man", Default: false, Usage: "print the rootgated(8) manual page in roff and exit"},
	{Name: "completion", Default: "", Usage: "print a completion script for `shell` (bash, zsh or fish) and exit"},
}

// defaultPolicy is --policy's default.
const defaultPolicy = policy.DefaultFile

// parseOptions reads the flags parsed into v.
func parseOptions(v clidoc.Values) options {
	return options{
		socket:            v.String("socket"),
		approverSock:      v.String("approver-socket"),
		approvers:         v.List("approver"),
		runtimeDir:        v.String("runtime-dir"),
		passkeys:          v.String("passkeys"),
		policy:            v.String("policy"),
		tty:               v.Bool("tty"),
		unsafeSelf:        v.Bool("unsafe-self-approval"),
		promptTimeout:     v.Duration("prompt-timeout"),
		approverPing:      v.Duration("approver-ping"),
		approverQuiet:     v.Duration("approver-silence"),
		groupWithin:       v.Duration("group-within"),
		execTimeout:       v.Duration("exec-timeout"),
		killGrace:         v.Duration("kill-grace"),
		maxSkew:           v.Duration("max-skew"),
		maxRuns:           v.Int("max-runs"),
		maxConns:          v.Int("max-conns"),
		maxConnsUID:       v.Int("max-conns-per-uid"),
		maxRequestsPerUID: v.Int("max-requests-per-uid"),
		firstByte:         v.Duration("first-byte-timeout"),
		readTimeout:       v.Duration("read-timeout"),
		stallTimeout:      v.Duration("stall-timeout"),
		maxPending:        v.Int("max-pending"),
		promptRate:        v.Int("prompt-rate"),
		idleExit:          v.Duration("idle-exit"),
		audit:             v.String("audit"),
		auditMaxSize:      *v.Value("audit-max-size").(*byteSize),
		auditKeep:         v.Int("audit-keep"),
		auditMinFree:      *v.Value("audit-min-free").(*byteSize),
		rejectRate:        v.Int("audit-reject-rate"),
		cgroup:            v.String("cgroup"),
		cgroupShared:      v.Bool("cgroup-shared"),
		runMemoryMax:      *v.Value("run-memory-max").(*byteSize),
		runTasksMax:       v.Int("run-tasks-max"),
		version:           v.Bool("version"),
		man:               v.Bool("man"),
		completion:        v.String("completion"),
		socketsGiven:      v.Given("socket") || v.Given("approver-socket"),
	}
}

// sizeFlag is a [byteSize] flag with default def: each parse gets a value
// of its own, so none changes another's or the default.
func sizeFlag(def byteSize) clidoc.Custom {
	return func() flag.Value { v := def; return &v }
}

// run is rootgated's whole life; it returns the exit code.
func run(ctx context.Context, args []string, stderr io.Writer, hup hangups) int {
	// The lines that say why it did not start must reach journalctl -p err.
	errw := errOut(stderr)
	fs := clidoc.NewFlagSet("rootgated", flags, io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
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
	o := parseOptions(clidoc.ValuesOf(fs))
	if o.version {
		fmt.Fprintln(os.Stdout, "rootgated", version.String())
		return exitOK
	}
	if o.man || o.completion != "" {
		if err := writeDoc(os.Stdout, o.man, o.completion); err != nil {
			out.Errorf(errw, "%v", err)
			return exitUsage
		}
		return exitOK
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"prompt-timeout", o.promptTimeout}, {"approver-ping", o.approverPing}, {"approver-silence", o.approverQuiet}, {"exec-timeout", o.execTimeout}, {"kill-grace", o.killGrace}, {"max-skew", o.maxSkew}, {"first-byte-timeout", o.firstByte}, {"read-timeout", o.readTimeout}, {"stall-timeout", o.stallTimeout}} {
		if d.v <= 0 {
			out.Errorf(errw, "--%s must be positive", d.name)
			return exitUsage
		}
	}
	if o.approverQuiet <= o.approverPing {
		out.Errorf(errw, "--approver-silence (%s) must be longer than --approver-ping (%s)", o.approverQuiet, o.approverPing)
		return exitUsage
	}
	if o.auditKeep < 0 || o.rejectRate < 1 {
		out.Errorf(errw, "--audit-keep must not be negative and --audit-reject-rate must be at least 1")
		return exitUsage
	}
	if o.runMemoryMax < 0 || o.runTasksMax < 0 {
		out.Errorf(errw, "--run-memory-max and --run-tasks-max must not be negative")
		return exitUsage
	}
	if o.maxConnsUID < 0 {
		out.Errorf(errw, "--max-conns-per-uid must not be negative")
		return exitUsage
	}
	if o.groupWithin < 0 || o.groupWithin > o.promptTimeout {
		out.Errorf(errw, "--group-within must be between 0 and --prompt-timeout")
		return exitUsage
	}
	if o.idleExit < 0 {
		out.Errorf(errw, "--idle-exit must not be negative")
		return exitUsage
	}
	if o.maxRuns < 1 || o.maxConns < 1 || o.maxPending < 1 || o.promptRate < 1 || o.maxRequestsPerUID < 1 {
		out.Errorf(errw, "--max-runs, --max-conns, --max-requests-per-uid, --max-pending and --prompt-rate must be at least 1")
		return exitUsage
	}
	if o.audit == "" {
		out.Errorf(errw, "--audit must name a file: the audit log cannot be turned off")
		return exitUsage
	}
	if err := serve(ctx, &o, stderr, hup); err != nil {
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
func foreignCgroups(c *daemon.Cgroups, shared bool) error {
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
func serve(ctx context.Context, o *options, stderr io.Writer, hup hangups) error {
	if os.Geteuid() != 0 {
		return configErr(errors.New("must run as root"))
	}
	// A cgroup of its own for every run, where the machine allows it;
	// in the directory named, or not at all.
	cgroups, noCgroup := daemon.SetupCgroups(o.cgroup)
	if cgroups != nil {
		defer cgroups.Close()
		if err := foreignCgroups(cgroups, o.cgroupShared); err != nil {
			return configErr(err)
		}
	} else if o.cgroup != daemon.CgroupAuto && o.cgroup != daemon.CgroupNone && o.cgroup != "" {
		return configErr(fmt.Errorf("--cgroup: %w (a directory named is used or the daemon does not start)", noCgroup))
	}
	// Limits this machine cannot enforce are a configuration error: the
	// daemon never runs without a limit it was told to apply.
	limits := pipeline.Limits{Memory: int64(o.runMemoryMax), Tasks: int64(o.runTasksMax)}
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
	broker := &approval.Broker{Timeout: o.promptTimeout, UnsafeSelfApproval: o.unsafeSelf, GroupWithin: o.groupWithin}
	var term *terminal.Terminal
	if o.tty {
		var err error
		if term, err = openTerminal(o.promptTimeout); err != nil {
			return configErr(err)
		}
		logOut = term.LogWriter(stderr)
		if o.policy != "" {
			term.RuleFile = filepath.Join(policy.Dir(o.policy), approval.RuleDropIn)
		}
	}
	log := newLogger(logOut)
	if cgroups != nil {
		log.Info(cgroups.Summary())
	} else {
		log.Warn("cgroup: none (" + noCgroup.Error() + "): runs contained by sessions, process groups and an environment tag only; a process that leaves what its stage leads (its process group, and its session where it leads one) and replaces its environment outlives its run and a daemon crash; no limits")
	}
	if o.approverQuiet >= o.promptTimeout {
		log.Info("--approver-silence is not shorter than --prompt-timeout: a request put to an approver cut off without a close waits out its prompt", "approver_silence", o.approverQuiet.String(), "prompt_timeout", o.promptTimeout.String())
	}
	if _, left := pipeline.SafeSearchPath(); len(left) > 0 {
		why := make([]string, len(left))
		for i, l := range left {
			why[i] = l.Why
		}
		log.Warn("search path: privileged runs that users other than root ask for leave out what others than root may change: "+strings.Join(why, "; "), "path", pipeline.SearchPath)
	}
	if o.unsafeSelf {
		log.Warn("UNSAFE: --unsafe-self-approval is on: a requester may be asked through an approver whose terminal or session its own uid controls, and could type the answer itself; this guards against mistakes only, not against a hostile agent")
	}
	if term != nil {
		// Who could type into this terminal: the daemon's ancestry (sudo,
		// a tmux server, sshd), login uid, SUDO_UID and terminals, not
		// only the owner of sudo's inner pty.
		controllers, err := daemon.Controllers(os.Getpid())
		if err != nil {
			return fmt.Errorf("--tty: cannot tell who controls this terminal: %w", err)
		}
		// term.In is /dev/tty, whose own inode is root's: the terminal's
		// owner is that of the device it names.
		owner := deviceOwner("/dev/" + term.Name)
		if owner >= 0 {
			controllers = append(controllers, owner)
		}
		slices.Sort(controllers)
		controllers = slices.Compact(controllers)
		broker.Attach(&approval.Member{UID: operatorUID(term.Operator, owner), Name: term.Operator + " on " + term.Name, Via: "terminal", Approver: term, Controllers: controllers})
		if who := approval.Uninvolved(controllers, userName); who != "" {
			out.Warningf(logOut, "this terminal is not asked about requests from %s: they can control it", who)
		}
	}
	var admit daemon.Admission
	for _, a := range o.approvers {
		if err := admit.ParseApprover(a); err != nil {
			return configErr(err)
		}
	}

	loadPolicy := func() (*policy.Policy, error) {
		return policy.LoadFiles(o.policy, policy.LoadOptions{Trusted: true})
	}
	pol, err := loadPolicy()
	if err != nil {
		return configErr(err)
	}
	for _, r := range pol.AllowsAllPrivileged() {
		log.Warn("policy allows every privileged command without asking", "file", r.File, "line", r.Line, "rule", r.Text)
	}
	daemon.WarnOverrides(log, pol)

	alog, err := audit.Open(o.audit, audit.Options{MaxSize: int64(o.auditMaxSize), Keep: o.auditKeep, Warn: log.Error})
	if err != nil {
		return configErr(err)
	}
	defer alog.Close()

	srv, err := daemon.New(daemon.Config{
		Version:           version.String(),
		RuntimeDir:        o.runtimeDir,
		Policy:            pol,
		LoadPolicy:        loadPolicy,
		PolicyFile:        o.policy,
		Approver:          broker,
		Broker:            broker,
		Admission:         admit,
		Passkeys:          o.passkeys,
		ApproverPing:      o.approverPing,
		ApproverSilent:    o.approverQuiet,
		Audit:             alog,
		ExecTimeout:       o.execTimeout,
		KillGrace:         o.killGrace,
		PromptTimeout:     o.promptTimeout,
		MaxSkew:           o.maxSkew,
		MaxRuns:           o.maxRuns,
		MaxConns:          o.maxConns,
		MaxConnsPerUID:    o.maxConnsUID,
		MaxRequestsPerUID: o.maxRequestsPerUID,
		FirstByte:         o.firstByte,
		ReadTimeout:       o.readTimeout,
		StallTimeout:      o.stallTimeout,
		MaxPending:        o.maxPending,
		PromptRate:        o.promptRate,
		RejectRate:        o.rejectRate,
		AuditMinFree:      int64(o.auditMinFree),
		Cgroups:           cgroups,
		Log:               log,
	})
	if err != nil {
		return configErr(err) // the runtime directory
	}
	defer srv.Close()
	// The opened record says who writes from here on (pid, boot id and
	// start time: the next daemon tells by them whether this one is gone),
	// and that the runs left unfinished before it are recorded (New did):
	// the next daemon reads the trail back to it, no further. A log that
	// cannot be written stops the daemon before it serves.
	if err := alog.Append(&audit.Record{Kind: audit.KindOpened, Daemon: audit.ThisDaemon(version.String())}); err != nil {
		return err
	}
	socket := o.socket
	if activated {
		socket = ln.Addr().String()
		if o.socketsGiven {
			log.Warn("socket-activated: --socket and --approver-socket are ignored")
		}
	} else {
		if ln, err = daemon.Listen(o.socket); err != nil {
			return err
		}
		if _, _, why := daemon.SocketAccess(); why != "" {
			log.Warn(why)
		}
		if o.approverSock != "" {
			if aln, err = daemon.ListenApprovers(o.approverSock, admit.Open()); err != nil {
				ln.Close()
				return err
			}
		}
	}
	log.Info("serving", "audit", o.audit, "socket", socket, "activated", activated, "approvers", aln != nil, "version", version.String(), "tty", o.tty, "policy_rules", len(pol.Rules))
	if o.tty {
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
				if o.tty && !hup.ignored {
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
	if activated && o.idleExit > 0 {
		go func() {
			if srv.WaitIdle(ctx, o.idleExit) == nil {
				log.Info("idle; exiting", "idle_exit", o.idleExit)
				cancel() // the same way out as SIGTERM
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

// deviceOwner is the owner of the file at path, or -1: for a terminal,
// a uid that could type into it, so one of its controllers.
func deviceOwner(path string) int {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return -1
	}
	return int(st.Uid)
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

// openTerminal opens the daemon's controlling terminal for prompts.
func openTerminal(timeout time.Duration) (*terminal.Terminal, error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("--tty: no controlling terminal: %w", err)
	}
	return &terminal.Terminal{In: tty, Out: tty, Timeout: timeout, Name: approval.TerminalName(), Operator: approval.OperatorName()}, nil
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

// defaultAuditKeep and defaultAuditMinFree are --audit-keep's and
// --audit-min-free's defaults: with --audit-max-size's, the log takes at
// most about 700 MiB, and requests stop before the disk is full.
const (
	defaultAuditKeep    = 10
	defaultAuditMinFree = 32 << 20
)

// defaultAuditMaxSize is --audit-max-size's default.
const defaultAuditMaxSize = 64 << 20

// byteSize is a flag holding a size in bytes, given as a number with an
// optional K, M or G (powers of 1024).
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }

func (b *byteSize) Set(s string) error {
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return errors.New("not a size: want bytes, or a number with K, M or G")
	}
	*b = byteSize(v * mult)
	return nil
}
