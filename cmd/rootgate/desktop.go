package main

// The desktop prompt: rootgate approve --desktop.
//
// Without sudo, the approver shows its notifications itself, on the session
// bus of whoever runs it ($DBUS_SESSION_BUS_ADDRESS), or, with no
// notification service there that has buttons, a zenity dialog on
// $DISPLAY or $WAYLAND_DISPLAY ([desktop.Desktop]).
//
// Under sudo (euid 0, SUDO_UID set) the notification belongs on the
// desktop of the user who ran sudo. That user's session bus
// (/run/user/UID/bus) is theirs, as is the notification service on it, and
// code of ours that talks to them has no business holding root. So each
// prompt is shown by a child: this same binary, run as
// `rootgate approve --internal-desktop-dialog`, started as SUDO_UID and
// SUDO_GID with no supplementary groups, in /, with an environment that
// holds only PATH, XDG_RUNTIME_DIR, DBUS_SESSION_BUS_ADDRESS and the
// display variables (DISPLAY, WAYLAND_DISPLAY, XAUTHORITY) for the zenity
// fallback; nothing else of root's or of sudo's. It reads one
// dialogRequest as JSON on stdin, writes one dialogAnswer as JSON on
// stdout and exits; SIGTERM withdraws its notification or dialog. The parent reads the answer as a claim of the user's
// session, capped and checked, and words every message itself. Whatever
// that user's programs could do to the child (ptrace it, answer for it)
// they could do by clicking Approve: the desktop prompt trusts the
// session either way, which docs/security.md says plainly.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/desktop"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/termsafe"
)

// dialogHelperArg, as the first argument of approve, makes rootgate the
// unprivileged child that shows one desktop prompt. It is not in the usage:
// it is of no use to a person.
const dialogHelperArg = "--internal-desktop-dialog"

// cmdDialogHelper is "rootgate approve --internal-desktop-dialog": the
// child that shows one desktop prompt ([runDialogHelper]).
func cmdDialogHelper(ctx context.Context, e *env, _ clidoc.Values, _ []string) int {
	return runDialogHelper(ctx, e.stdin, e.stdout, e.stderr)
}

// desktopName names the desktop prompt in messages and in the hello.
const desktopName = "desktop"

// Bounds on the child: what it may read and write, how long after its own
// timeout it may take to answer, and how long it has to withdraw its
// notification after SIGTERM.
const (
	maxDialogRequest = remote.MaxDaemonLine
	maxDialogAnswer  = 64 << 10
	dialogGrace      = 10 * time.Second
	dialogWaitDelay  = 5 * time.Second
)

// dialogRequest is what the child is asked.
type dialogRequest struct {
	Prompt   *approval.Prompt `json:"prompt"`
	Timeout  time.Duration    `json:"timeout"` // nanoseconds
	Operator string           `json:"operator"`
}

// dialogAnswer is what the child answers. Verdict is an
// [approval.Verdict]'s String.
type dialogAnswer struct {
	Verdict string `json:"verdict"`
	Message string `json:"message,omitempty"`
}

// runDialogHelper is the child: one prompt on the session bus of its own
// user.
func runDialogHelper(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer) int {
	// SIGTERM is how the parent withdraws the prompt: it must end ctx,
	// so the notification is taken down, and not kill us outright,
	// whoever called us with whatever ctx.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var req dialogRequest
	if err := json.NewDecoder(io.LimitReader(stdin, maxDialogRequest)).Decode(&req); err != nil || req.Prompt == nil {
		errorf(stderr, "desktop dialog: failed to read the prompt: %v", err)
		return exitError
	}
	d := (&desktop.Desktop{Timeout: req.Timeout, Operator: req.Operator, Name: desktopName, Zenity: findZenity()}).Approve(ctx, req.Prompt)
	if err := json.NewEncoder(stdout).Encode(dialogAnswer{Verdict: d.Verdict.String(), Message: d.Message}); err != nil {
		errorf(stderr, "desktop dialog: failed to answer: %v", err)
		return exitError
	}
	return exitOK
}

// desktopAsker returns what approve --desktop asks each prompt with: a
// child run as the sudo user under sudo, else an in-process
// [desktop.Desktop].
func desktopAsker(operator string, stderr io.Writer) (func(deadline time.Time) approval.Approver, error) {
	sudoUID := os.Getenv("SUDO_UID")
	if os.Geteuid() != 0 || sudoUID == "" || sudoUID == "0" {
		return func(deadline time.Time) approval.Approver {
			return &desktop.Desktop{Timeout: time.Until(deadline), Operator: operator, Name: desktopName, Zenity: findZenity()}
		}, nil
	}
	uid, err := strconv.ParseUint(sudoUID, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("SUDO_UID %q is not a uid", sudoUID)
	}
	gid, err := strconv.ParseUint(os.Getenv("SUDO_GID"), 10, 32)
	if err != nil {
		return nil, fmt.Errorf("SUDO_GID %q is not a gid", os.Getenv("SUDO_GID"))
	}
	runtime := fmt.Sprintf("/run/user/%d", uid)
	// The display, for the zenity fallback: sudo keeps DISPLAY and
	// XAUTHORITY (the user's own file) by default.
	var display []string
	for _, k := range []string{"DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY"} {
		if v := os.Getenv(k); v != "" {
			display = append(display, k+"="+v)
		}
	}
	return func(deadline time.Time) approval.Approver {
		return &userDialog{uid: uint32(uid), gid: uint32(gid), runtimeDir: runtime, bus: "unix:path=" + runtime + "/bus",
			display: display, timeout: time.Until(deadline), operator: operator, stderr: stderr}
	}, nil
}

// findZenity returns the zenity for the fallback dialog, or "" when there
// is none.
func findZenity() string {
	path, err := exec.LookPath("zenity")
	if err != nil {
		return ""
	}
	return path
}

// userDialog is an [approval.Approver] that shows the desktop prompt from a
// child run as another user (see the top of this file).
type userDialog struct {
	uid, gid   uint32
	runtimeDir string   // the user's XDG_RUNTIME_DIR
	bus        string   // the user's session bus address
	display    []string // DISPLAY, WAYLAND_DISPLAY, XAUTHORITY as KEY=VALUE, where set
	timeout    time.Duration
	operator   string
	stderr     io.Writer // where the child's own complaints go
}

func (u *userDialog) Approve(ctx context.Context, p *approval.Prompt) approval.Decision {
	by := desktopName
	withdrawn := approval.Decision{Verdict: approval.Withdrawn, Message: "request withdrawn", By: by}
	fail := func(err error) approval.Decision {
		msg := fmt.Sprintf("desktop prompt as uid %d failed: %v", u.uid, err)
		return approval.Decision{Verdict: approval.Unavailable, Message: msg, By: by}
	}
	if ctx.Err() != nil {
		return withdrawn
	}
	req, err := json.Marshal(dialogRequest{Prompt: p, Timeout: u.timeout, Operator: u.operator})
	if err != nil {
		return fail(err)
	}
	// The child times out by itself; this only bounds one that hangs.
	cctx, cancel := context.WithTimeout(ctx, u.timeout+dialogGrace)
	defer cancel()
	// /proc/self/exe is this very binary, and, being a link the kernel
	// resolves itself, it runs even from a directory the user may not
	// enter. argv[0] stays "rootgate".
	cmd := exec.CommandContext(cctx, "/proc/self/exe", "approve", dialogHelperArg)
	cmd.Args[0] = "rootgate"
	cmd.Dir = "/"
	cmd.Env = []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"XDG_RUNTIME_DIR=" + u.runtimeDir,
		"DBUS_SESSION_BUS_ADDRESS=" + u.bus,
	}
	cmd.Env = append(cmd.Env, u.display...)
	cmd.Stdin = bytes.NewReader(req)
	out := &cappedBuffer{max: maxDialogAnswer}
	cmd.Stdout = out
	// The child runs as the desktop's user: what it says is shown only
	// once it ends, capped, a line at a time, escaped like every other
	// line this command prints.
	complaints := &cappedBuffer{max: maxDialogComplaints}
	cmd.Stderr = complaints
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Groups empty, not nil: setgroups drops root's groups.
		Credential: &syscall.Credential{Uid: u.uid, Gid: u.gid, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	// SIGTERM lets the child take its notification down; WaitDelay then
	// kills it if it does not.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = dialogWaitDelay
	runErr := cmd.Run()
	relayLines(u.stderr, complaints.Bytes())

	if ctx.Err() != nil {
		return withdrawn
	}
	var ans dialogAnswer
	if err := json.Unmarshal(out.Bytes(), &ans); err != nil {
		if cctx.Err() != nil {
			return approval.Decision{Verdict: approval.Expired, Message: u.expiredMessage(), By: by}
		}
		if runErr != nil {
			return fail(runErr)
		}
		return fail(fmt.Errorf("unreadable answer from the dialog: %w", err))
	}
	switch ans.Verdict {
	case approval.Allow.String():
		return approval.Decision{Verdict: approval.Allow, By: by}
	case approval.Deny.String():
		return approval.Decision{Verdict: approval.Deny, Message: fmt.Sprintf("denied by operator %s on %s", u.operator, desktopName), By: by}
	case approval.Expired.String():
		return approval.Decision{Verdict: approval.Expired, Message: u.expiredMessage(), By: by}
	case approval.Withdrawn.String():
		// The child was told nothing of a withdrawal we did not see.
		return fail(errors.New("the dialog was withdrawn"))
	case approval.Unavailable.String():
		return fail(errors.New(termsafe.Sanitize(ans.Message)))
	}
	return fail(fmt.Errorf("unknown verdict %q from the dialog", termsafe.Sanitize(ans.Verdict)))
}

// expiredMessage words a timeout as the terminal prompt does.
func (u *userDialog) expiredMessage() string {
	return fmt.Sprintf("no approval decision within %ds", u.timeout.Round(time.Second)/time.Second)
}

// maxDialogComplaints bounds what of the dialog child's stderr is shown.
const maxDialogComplaints = 16 << 10

// relayLines writes each line of b to w through [termsafe.Sanitize], so no
// control sequence of the child's reaches the operator's terminal.
func relayLines(w io.Writer, b []byte) {
	for line := range strings.Lines(string(b)) {
		fmt.Fprintln(w, termsafe.Sanitize(strings.TrimSuffix(line, "\n")))
	}
}

// cappedBuffer keeps the first max bytes written to it and discards the
// rest, so a child cannot make us hold more.
type cappedBuffer struct {
	bytes.Buffer
	max int
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// reporting wraps the desktop prompt with status lines on out: the
// terminal prompt tells its outcome on its terminal, the desktop one on
// rootgate approve's stderr.
type reporting struct {
	approval.Approver
	out io.Writer
}

func (r reporting) Approve(ctx context.Context, p *approval.Prompt) approval.Decision {
	id := termsafe.Sanitize(p.ID)
	fmt.Fprintf(r.out, "rootgate: request %s shown on the desktop\n", id)
	d := r.Approver.Approve(ctx, p)
	outcome := map[approval.Verdict]string{
		approval.Allow:       "approved",
		approval.Deny:        "denied",
		approval.Expired:     "timed out",
		approval.Withdrawn:   "withdrawn",
		approval.Unavailable: "not asked: " + termsafe.Sanitize(d.Message),
	}[d.Verdict]
	if cause := context.Cause(ctx); d.Verdict == approval.Withdrawn && cause != nil && !errors.Is(cause, context.Canceled) {
		outcome += " (" + termsafe.Sanitize(cause.Error()) + ")"
	}
	fmt.Fprintf(r.out, "rootgate: request %s %s\n", id, outcome)
	return d
}
