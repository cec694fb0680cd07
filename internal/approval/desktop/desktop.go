package desktop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/godbus/dbus/v5"
	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/wire"
)

// The freedesktop.org Desktop Notifications service (the specification's
// version 1.2), as reached over the session bus.
const (
	notifyName  = "org.freedesktop.Notifications"
	notifyPath  = dbus.ObjectPath("/org/freedesktop/Notifications")
	notifyIface = "org.freedesktop.Notifications"
)

// Action keys of the notification's two buttons.
const (
	actionApprove = "approve"
	actionDeny    = "deny"
)

// notifyTimeout bounds the Notify and CloseNotification calls, which go on
// after the prompt's own context has ended.
const notifyTimeout = 5 * time.Second

// markupEscaper escapes text for the notification body markup, a small
// subset of HTML in which only these three characters are special.
var markupEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Desktop is an [approval.Approver] that asks through a desktop notification with
// an Approve and a Deny button, sent to the freedesktop.org Notifications
// service on a D-Bus session bus, or, where there is none that can show
// buttons, through a zenity dialog. The notification's body is the
// whole of [approval.Render]; its summary says as whom the command would run.
//
//   - Approve approves; Deny, or closing the notification without
//     pressing either, denies;
//   - no answer within Timeout: [approval.Expired], and the notification is closed;
//   - the request's context ends first: the notification is closed and the
//     answer is [approval.Withdrawn].
//
// Desktop runs with the rights of whoever calls it and talks to that
// user's bus: a root process serving another user's desktop should call it
// from a process that has become that user (rootgate approve --desktop
// does so under sudo). Each call connects to the bus afresh, so a session
// that restarts between prompts is picked up, and concurrent calls show
// separate notifications. Set the fields before the first call.
type Desktop struct {
	// BusAddress is the D-Bus address of the session bus, e.g.
	// "unix:path=/run/user/1000/bus"; "" means $DBUS_SESSION_BUS_ADDRESS,
	// else $XDG_RUNTIME_DIR/bus.
	BusAddress string
	// Timeout bounds each prompt from the moment it is shown; 0 means
	// DefaultPromptTimeout.
	Timeout time.Duration
	// Name names where the prompt appears in messages and in Decision.By;
	// "" means "desktop".
	Name string
	// Operator is the user name of the person at the desktop, for the
	// message a denied requester is told.
	Operator string
	// Zenity is the zenity program that shows a dialog with the request's
	// text on the display when no notification service with buttons and
	// body text is there; "" means no such fallback.
	Zenity string
}

var _ approval.Approver = (*Desktop)(nil)

// Approve implements [approval.Approver]. It shows the notification and returns:
//
//   - Allow, with an empty Message;
//   - Deny, "denied by operator OPERATOR on NAME" (a Deny button or a
//     notification closed without an answer);
//   - Expired, "no approval decision within 60s" (the actual Timeout);
//   - Withdrawn, "request withdrawn", when ctx ended first;
//   - Unavailable, "desktop prompt on NAME failed: …", when no session bus,
//     no notification service, or one without action buttons or body
//     text was found and no zenity dialog could be shown either, or the
//     bus went away.
//
// The zenity fallback (see [Desktop.Zenity]) answers the same way: its
// Approve button approves once its box "I have read all of the request
// above" is ticked; Deny, Escape or closing the window denies; Enter alone
// does nothing.
//
// Decision.By is NAME in every case.
func (d *Desktop) Approve(ctx context.Context, p *approval.Prompt) approval.Decision {
	name := d.name()
	if ctx.Err() != nil {
		return approval.Decision{Verdict: approval.Withdrawn, Message: approval.WithdrawnMessage, By: name}
	}
	timeout := d.Timeout
	if timeout <= 0 {
		timeout = approval.DefaultPromptTimeout
	}
	pctx, cancel := context.WithDeadlineCause(ctx, time.Now().Add(timeout), approval.ErrPromptTimeout)
	defer cancel()

	fail := func(err error) approval.Decision {
		switch {
		case ctx.Err() != nil:
			return approval.Decision{Verdict: approval.Withdrawn, Message: approval.WithdrawnMessage, By: name}
		case errors.Is(context.Cause(pctx), approval.ErrPromptTimeout):
			return approval.Decision{Verdict: approval.Expired, Message: wire.PromptTimeoutError(timeout).Error(), By: name}
		}
		return approval.Decision{Verdict: approval.Unavailable, Message: wire.PromptFailed("desktop", name, err), By: name}
	}
	deny := approval.Decision{Verdict: approval.Deny, Message: wire.DeniedByOperatorError(d.Operator, name).Error(), By: name}
	// A dialog shows only a preview of stdin, and nothing that will run
	// may hide behind an Approve button: such a request is for a terminal,
	// whose pager shows all of it.
	if len(p.Stdin) > approval.StdinPreviewBytes {
		return approval.Decision{Verdict: approval.Unavailable, Message: wire.DesktopStdinTooLong(name, len(p.Stdin)), By: name}
	}

	dec, err := d.notify(ctx, pctx, p, deny, fail)
	if err == nil {
		return dec
	}
	if ctx.Err() != nil || pctx.Err() != nil {
		return fail(err)
	}
	// No notification could be shown: try a zenity dialog on the display.
	dec, zerr := d.zenity(ctx, pctx, p, timeout, deny, fail)
	if zerr != nil {
		return fail(fmt.Errorf("%w; and no zenity dialog either: %w", err, zerr))
	}
	return dec
}

// notify asks through the notification service. Its error says why no
// notification could be shown, and then it decided nothing; once one was
// shown, it always returns a Decision and no error.
func (d *Desktop) notify(ctx, pctx context.Context, p *approval.Prompt, deny approval.Decision, fail func(error) approval.Decision) (approval.Decision, error) {
	name := d.name()
	conn, release, err := d.connect(pctx)
	if err != nil {
		return approval.Decision{}, err
	}
	defer release()

	// Signals are matched on the service's unique name: the bus stamps the
	// true sender on every message, so no other client of the bus can
	// pass a signal off as the service's.
	var owner string
	if err := conn.BusObject().CallWithContext(pctx, "org.freedesktop.DBus.GetNameOwner", 0, notifyName).Store(&owner); err != nil {
		return approval.Decision{}, fmt.Errorf("no notification service on the session bus: %w", err)
	}
	obj := conn.Object(owner, notifyPath)
	var caps []string
	if err := obj.CallWithContext(pctx, notifyIface+".GetCapabilities", 0).Store(&caps); err != nil {
		return approval.Decision{}, fmt.Errorf("failed to ask the notification service for its capabilities: %w", err)
	}
	// Without buttons the operator could not answer, and without a body
	// the request would be decided unseen.
	for _, c := range []string{"actions", "body"} {
		if !slices.Contains(caps, c) {
			return approval.Decision{}, fmt.Errorf("the notification service cannot show %q (it offers %s)", c, termsafe.Sanitize(strings.Join(caps, ", ")))
		}
	}

	// Subscribe before Notify so that no answer can slip past.
	if err := conn.AddMatchSignalContext(pctx, dbus.WithMatchSender(owner), dbus.WithMatchObjectPath(notifyPath), dbus.WithMatchInterface(notifyIface)); err != nil {
		return approval.Decision{}, fmt.Errorf("failed to subscribe to the notification service's signals: %w", err)
	}
	signals := make(chan *dbus.Signal, 16)
	conn.Signal(signals)
	defer conn.RemoveSignal(signals)

	body := approval.Render(p)
	// A service without body markup shows the text as it is; one with it
	// would read <, > and & as markup.
	if slices.Contains(caps, "body-markup") {
		body = markupEscaper.Replace(body)
	}
	summary := "rootgate: run this command as " + approval.RunAsWord(p) + "?"
	hints := map[string]dbus.Variant{
		"urgency": dbus.MakeVariant(byte(2)), // critical: stays until answered
	}
	// The Notify call is not cut short when ctx ends: the notification may
	// already be on screen, and only its id lets us take it down again.
	var id uint32
	nctx, ncancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
	// expire_timeout 0: the service never expires it; our own deadline does.
	err = obj.CallWithContext(nctx, notifyIface+".Notify", 0,
		"rootgate", uint32(0), "dialog-password", summary, body,
		[]string{actionApprove, "Approve", actionDeny, "Deny"}, hints, int32(0)).Store(&id)
	ncancel()
	if err != nil {
		return approval.Decision{}, fmt.Errorf("failed to show the notification: %w", err)
	}
	closeNote := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), notifyTimeout)
		defer cancel()
		_ = obj.CallWithContext(cctx, notifyIface+".CloseNotification", 0, id).Err
	}

	for {
		select {
		case <-pctx.Done():
			closeNote()
			return fail(context.Cause(pctx)), nil
		case s, ok := <-signals:
			if !ok {
				return fail(errors.New("the session bus connection was lost")), nil
			}
			if s.Sender != owner || s.Path != notifyPath || len(s.Body) < 2 {
				continue
			}
			if sid, _ := s.Body[0].(uint32); sid != id {
				continue
			}
			switch s.Name {
			case notifyIface + ".ActionInvoked":
				key, _ := s.Body[1].(string)
				switch key {
				case actionApprove:
					closeNote()
					return approval.Decision{Verdict: approval.Allow, By: name}, nil
				case actionDeny:
					closeNote()
					return deny, nil
				}
				// Other keys ("default": a click on the body) are no answer.
			case notifyIface + ".NotificationClosed":
				return deny, nil
			}
		}
	}
}

func (d *Desktop) name() string {
	if d.Name != "" {
		return d.Name
	}
	return "desktop"
}

// connect opens a private connection to the session bus, giving up when
// ctx ends before it is ready. The connection itself outlives ctx, so the
// notification can still be closed after a withdrawal; release closes it.
func (d *Desktop) connect(ctx context.Context) (conn *dbus.Conn, release func(), err error) {
	addr := d.BusAddress
	if addr == "" {
		addr = os.Getenv("DBUS_SESSION_BUS_ADDRESS")
	}
	if addr == "" {
		if dir := os.Getenv("XDG_RUNTIME_DIR"); dir != "" {
			addr = "unix:path=" + dir + "/bus"
		}
	}
	if addr == "" {
		return nil, nil, errors.New("no session bus: neither DBUS_SESSION_BUS_ADDRESS nor XDG_RUNTIME_DIR is set")
	}
	life, end := context.WithCancel(context.Background())
	stop := context.AfterFunc(ctx, end)
	conn, err = dbus.Connect(addr, dbus.WithContext(life))
	if !stop() || err != nil {
		end()
		if err == nil {
			err = context.Cause(ctx)
		}
		return nil, nil, fmt.Errorf("failed to connect to the session bus at %s: %w", termsafe.Sanitize(addr), err)
	}
	return conn, func() { conn.Close(); end() }, nil
}
