package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/termsafe"
	"golang.org/x/sys/unix"
)

// errNotConfirmed: root did not confirm the first passkey on the
// terminal of passkeys add.
var errNotConfirmed = errors.New("passkey not stored: it was not confirmed on this terminal")

// enrolRun is one `rootgate passkeys add`: the daemon's enrolment, the
// page's two steps relayed to it, and, for a first passkey, root's
// confirmation on this process's terminal (console), which no uid but
// root controls (the daemon checked that before it began).
type enrolRun struct {
	ctx     context.Context // the command's: a question on the console ends with it
	en      *remote.Enrolment
	name    string
	console *os.File // the terminal, for a first passkey
	out     io.Writer
	stop    context.CancelFunc // ends the serving of the page

	once sync.Once
	done chan struct{} // closed by end
	id   string
	err  error
}

// end records the enrolment's outcome, once, and ends the page.
func (r *enrolRun) end(id string, err error) {
	r.once.Do(func() {
		r.id, r.err = id, err
		close(r.done)
		r.stop()
	})
}

// attest relays the credential the browser created (web.Enrol.Attest).
// For a first passkey it then asks root, on the console, whether it is
// the one they made, and finishes the enrolment or gives it up as they
// answer, whatever the page does next.
func (r *enrolRun) attest(_ context.Context, attestation string) (*remote.Message, error) {
	m, err := r.en.Attest(attestation)
	if err != nil {
		r.end("", err)
		return nil, err
	}
	if m.Confirm {
		fmt.Fprintf(r.out, "rootgate: the browser made passkey %s, fingerprint %s; an enrolled passkey must now confirm it on the page\n",
			termsafe.Sanitize(m.ID), termsafe.Sanitize(m.Fingerprint))
		return m, nil
	}
	go func() {
		ok, err := askConsole(r.ctx, r.console, consoleQuestion(r.name, m))
		switch {
		case err != nil:
			r.en.Close()
			r.end("", err)
		case !ok:
			r.en.Close()
			r.end("", errNotConfirmed)
		default:
			r.end(r.en.Finish(nil, true))
		}
	}()
	return m, nil
}

// finish relays the confirmation (web.Enrol.Finish): an enrolled
// passkey's assertion, or, for a first passkey, the console's answer,
// awaited.
func (r *enrolRun) finish(ctx context.Context, a *passkey.Assertion) (string, error) {
	if r.en.Options.Confirm {
		id, err := r.en.Finish(a, false)
		r.end(id, err)
		return id, err
	}
	select {
	case <-r.done:
		return r.id, r.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// consoleQuestion is what root is asked about the new credential m: all
// that will be stored of it that a person can compare.
func consoleQuestion(name string, m *remote.Message) string {
	aaguid := termsafe.Sanitize(m.AAGUID)
	if aaguid == "" {
		aaguid = "none given (most authenticators give none without attestation)"
	}
	return fmt.Sprintf(`
rootgate: a browser answered the enrolment link. The passkey it made is not stored yet:
  name           %s
  credential     %s
  fingerprint    %s
  authenticator  AAGUID %s
It would be the first passkey: its signature approves any request, as root.
Store it only if the enrolment page on your device (one the agent cannot drive,
your phone say: a browser it drives can show any fingerprint) shows this same
fingerprint for the passkey you just made there. If that page says the link was used, or
shows another fingerprint, someone else answered the link first: answer n.
Store this passkey? [y/N] `, termsafe.Sanitize(name), termsafe.Sanitize(m.ID), termsafe.Sanitize(m.Fingerprint), aaguid)
}

// openConsole opens this process's terminal, where a first passkey is
// confirmed.
func openConsole() (*os.File, error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err == nil {
		if _, err = unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS); err != nil {
			tty.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("the first passkey is confirmed on the terminal of rootgate passkeys add, and this process has none (%v): run it on a root login's terminal", err)
	}
	return tty, nil
}

// askConsole asks question on the terminal tty and reads a line: y or
// yes is yes, anything else (or nothing before the enrolment would end,
// or ctx) is no. What was typed before the question is discarded.
func askConsole(ctx context.Context, tty *os.File, question string) (bool, error) {
	fd := int(tty.Fd())
	if tio, err := unix.IoctlGetTermios(fd, unix.TCGETS); err == nil {
		line := *tio
		line.Lflag |= unix.ECHO | unix.ICANON | unix.ISIG
		_ = unix.IoctlSetTermios(fd, unix.TCSETS, &line)
		defer func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, tio) }()
	}
	if err := unix.IoctlSetInt(fd, unix.TCFLSH, unix.TCIFLUSH); err != nil {
		return false, fmt.Errorf("cannot discard what was typed before the question: %w", err)
	}
	if _, err := io.WriteString(tty, question); err != nil {
		return false, err
	}
	_ = tty.SetReadDeadline(time.Now().Add(remote.EnrolWithin - 30*time.Second))
	stop := context.AfterFunc(ctx, func() { _ = tty.SetReadDeadline(time.Now()) })
	defer stop()
	answer, err := bufio.NewReader(tty).ReadString('\n')
	if err != nil {
		fmt.Fprintln(tty)
		return false, nil
	}
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return true, nil
	}
	return false, nil
}
