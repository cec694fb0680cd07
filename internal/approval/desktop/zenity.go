package desktop

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/wire"
)

// maxZenityStderr bounds what of zenity's stderr is kept to tell a display
// failure from a Deny.
const maxZenityStderr = 16 << 10

// zenityCheckbox is the box the operator ticks before Approve can be pressed.
const zenityCheckbox = "I have read all of the request above"

// zenity asks with a zenity dialog on the display in $DISPLAY or
// $WAYLAND_DISPLAY: the fallback when no notification service with
// buttons is there. Its error says why no dialog could be shown, and then
// it decided nothing.
//
// The dialog is a text-info dialog that reads the text from its standard
// input (--filename /dev/stdin), never from its command line: an argument
// is limited to 128 KiB (a longer one and zenity would not start at all),
// and every local user can read a command line. zenity reads all of the
// text before it shows the window, so Approve is never on screen under a
// part of it. The text view shows plain text (no markup), in a monospace
// font, wrapped and scrollable. Approve stays greyed out until the box
// [zenityCheckbox] is ticked, so Enter alone does nothing; Deny, Escape
// and closing the window deny. zenity is killed when pctx ends, which
// takes the dialog down.
func (d *Desktop) zenity(ctx, pctx context.Context, p *approval.Prompt, timeout time.Duration, deny approval.Decision, fail func(error) approval.Decision) (approval.Decision, error) {
	if d.Zenity == "" {
		return approval.Decision{}, errors.New("no zenity configured")
	}
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return approval.Decision{}, errors.New("no display: neither DISPLAY nor WAYLAND_DISPLAY is set")
	}
	text := approval.Render(p)
	if err := checkDialogText(text); err != nil {
		return approval.Decision{}, err
	}
	secs := int((timeout + time.Second - 1) / time.Second)
	title := "rootgate: run this command as " + approval.RunAsWord(p) + "?"
	cmd := exec.CommandContext(pctx, d.Zenity, "--text-info", "--filename", "/dev/stdin",
		"--title", title, "--font", "Monospace 10", "--checkbox", zenityCheckbox,
		"--ok-label", "Approve", "--cancel-label", "Deny",
		"--timeout", strconv.Itoa(secs), "--width", "900", "--height", "640")
	cmd.Stdin = strings.NewReader(text)
	// The title is UTF-8 whatever the locale: in the C locale zenity cannot
	// convert a title that is not ASCII and exits without a dialog.
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8")
	var stderr cappedWriter
	stderr.max = maxZenityStderr
	cmd.Stderr = &stderr
	err := cmd.Run()
	if pctx.Err() != nil {
		return fail(context.Cause(pctx)), nil
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return approval.Decision{Verdict: approval.Allow, By: d.name()}, nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		// zenity also exits 1 when it cannot open the display: GTK 3's
		// (zenity 3, Debian 12) says "cannot open display: :0", GTK 4's
		// (zenity 4, Ubuntu 24.04) "Failed to open display".
		if s := stderr.String(); strings.Contains(s, "cannot open display") || strings.Contains(s, "Failed to open display") {
			return approval.Decision{}, errors.New("zenity cannot open the display")
		}
		return deny, nil
	case errors.As(err, &exit) && exit.ExitCode() == 5:
		return approval.Decision{Verdict: approval.Expired, Message: wire.PromptTimeoutError(timeout).Error(), By: d.name()}, nil
	}
	return approval.Decision{}, fmt.Errorf("zenity failed: %w", err)
}

// checkDialogText refuses a text zenity would show only in part: it stops
// reading at a NUL or at bytes that are not UTF-8 and shows what came
// before. [approval.Render] never makes such a text; this keeps it so.
func checkDialogText(text string) error {
	if !utf8.ValidString(text) || strings.ContainsRune(text, 0) {
		return errors.New("the request's text holds a NUL or bytes that are not UTF-8, which zenity would not show")
	}
	return nil
}

// cappedWriter keeps the first max bytes written to it.
type cappedWriter struct {
	strings.Builder
	max int
}

func (w *cappedWriter) Write(b []byte) (int, error) {
	if room := w.max - w.Len(); room > 0 {
		w.Builder.Write(b[:min(len(b), room)])
	}
	return len(b), nil
}
