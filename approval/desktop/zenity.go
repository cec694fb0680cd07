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

	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/wire"
)

// maxZenityStderr bounds what of zenity's stderr is kept to tell a display
// failure from a Deny.
const maxZenityStderr = 16 << 10

// zenity asks with a zenity question dialog on the display in $DISPLAY or
// $WAYLAND_DISPLAY: the fallback when no notification service with
// buttons is there. Its error says why no dialog could be shown, and then
// it decided nothing.
//
// The text goes in with --no-markup, so nothing in it is read as Pango
// markup, and the focused answer is Deny (--default-cancel), so Enter
// denies. zenity is killed when pctx ends, which takes the dialog down.
func (d *Desktop) zenity(ctx, pctx context.Context, p *approval.Prompt, timeout time.Duration, deny approval.Decision, fail func(error) approval.Decision) (approval.Decision, error) {
	if d.Zenity == "" {
		return approval.Decision{}, errors.New("no zenity configured")
	}
	if os.Getenv("DISPLAY") == "" && os.Getenv("WAYLAND_DISPLAY") == "" {
		return approval.Decision{}, errors.New("no display: neither DISPLAY nor WAYLAND_DISPLAY is set")
	}
	secs := int((timeout + time.Second - 1) / time.Second)
	title := "rootgate: run this command as " + approval.RunAsName(p) + "?"
	if approval.RunsAsRoot(p) {
		title = "rootgate: run this command as ROOT?"
	}
	cmd := exec.CommandContext(pctx, d.Zenity, "--question", "--no-markup",
		"--title", title, "--text", approval.Render(p),
		"--ok-label", "Approve", "--cancel-label", "Deny", "--default-cancel",
		"--timeout", strconv.Itoa(secs), "--width", "800")
	// The text is UTF-8 whatever the locale: in the C locale GTK cannot
	// convert it and zenity exits without a dialog.
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
		// zenity also exits 1 when it cannot open the display.
		if strings.Contains(stderr.String(), "cannot open display") {
			return approval.Decision{}, errors.New("zenity cannot open the display")
		}
		return deny, nil
	case errors.As(err, &exit) && exit.ExitCode() == 5:
		return approval.Decision{Verdict: approval.Expired, Message: wire.PromptTimeoutError(timeout).Error(), By: d.name()}, nil
	}
	return approval.Decision{}, fmt.Errorf("zenity failed: %w", err)
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
