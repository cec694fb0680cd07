package daemoncmd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/coreos/go-systemd/v22/activation"
	"golang.org/x/sys/unix"
)

// The names of the sockets systemd hands over (FileDescriptorName= in the
// .socket units).
const (
	fdRequests  = "requests"
	fdApprovers = "approvers"
)

// expectedFDs says what a socket-activated rootgated must be given.
const expectedFDs = `socket activation: expected fds named "requests" and optionally "approvers", each a listening Unix stream socket`

// socketActivated reports whether systemd (or systemd-socket-activate)
// handed this process sockets: LISTEN_PID names us and LISTEN_FDS is set.
func socketActivated() bool {
	pid, err := strconv.Atoi(os.Getenv("LISTEN_PID"))
	return err == nil && pid == os.Getpid() && os.Getenv("LISTEN_FDS") != ""
}

// activationListeners takes the sockets handed over by the service
// manager and unsets LISTEN_* so that no child sees them. It returns the
// request listener and the approver listener (nil when none was given),
// or an error naming what is wrong with the set.
func activationListeners() (req, appr *net.UnixListener, err error) {
	nfds, err := strconv.Atoi(os.Getenv("LISTEN_FDS"))
	if err != nil || nfds < 1 {
		return nil, nil, fmt.Errorf("%s; got LISTEN_FDS=%q", expectedFDs, os.Getenv("LISTEN_FDS"))
	}
	names := strings.Split(os.Getenv("LISTEN_FDNAMES"), ":")
	byName, err := activation.ListenersWithNames()
	if err != nil {
		return nil, nil, fmt.Errorf("socket activation: %w", err)
	}
	return pickListeners(nfds, names, byName)
}

// pickListeners checks the handed-over set: nfds descriptors were passed
// with names (LISTEN_FDNAMES), and byName holds those Go could turn into
// listeners. Every listener in byName is closed when an error is returned.
func pickListeners(nfds int, names []string, byName map[string][]net.Listener) (req, appr *net.UnixListener, err error) {
	defer func() {
		if err != nil {
			for _, ls := range byName {
				for _, l := range ls {
					l.Close()
				}
			}
		}
	}()
	got := gotFDs(nfds, names)
	n := 0
	for name, ls := range byName {
		n += len(ls)
		switch {
		case name != fdRequests && name != fdApprovers:
			return nil, nil, fmt.Errorf("%s; got %s (unknown name %q)", expectedFDs, got, name)
		case len(ls) > 1:
			return nil, nil, fmt.Errorf("%s; got %s (%d fds named %q)", expectedFDs, got, len(ls), name)
		}
		if err := checkListener(ls[0]); err != nil {
			return nil, nil, fmt.Errorf("%s; got %s (fd %q %v)", expectedFDs, got, name, err)
		}
	}
	if n != nfds {
		// ListenersWithNames skips what is not a socket Go can listen on.
		return nil, nil, fmt.Errorf("%s; got %s (%d of them not listening sockets)", expectedFDs, got, nfds-n)
	}
	if byName[fdRequests] == nil {
		return nil, nil, fmt.Errorf("%s; got %s (none named %q)", expectedFDs, got, fdRequests)
	}
	req = byName[fdRequests][0].(*net.UnixListener)
	if ls := byName[fdApprovers]; ls != nil {
		appr = ls[0].(*net.UnixListener)
	}
	return req, appr, nil
}

// checkListener requires a Unix stream socket in the listening state.
func checkListener(l net.Listener) error {
	ul, ok := l.(*net.UnixListener)
	if !ok || l.Addr().Network() != "unix" {
		return fmt.Errorf("is a %s socket, not a Unix stream socket", l.Addr().Network())
	}
	rc, err := ul.SyscallConn()
	if err != nil {
		return fmt.Errorf("cannot be inspected: %w", err)
	}
	var listening int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		listening, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
	}); err != nil {
		serr = err
	}
	if serr != nil {
		return fmt.Errorf("cannot be inspected: %w", serr)
	}
	if listening == 0 {
		return errors.New("is not listening")
	}
	return nil
}

// gotFDs describes what was handed over, for error messages.
func gotFDs(nfds int, names []string) string {
	var quoted []string
	for i := range nfds {
		name := ""
		if i < len(names) {
			name = names[i]
		}
		if name == "" {
			quoted = append(quoted, "an unnamed fd")
			continue
		}
		quoted = append(quoted, strconv.Quote(name))
	}
	if nfds == 1 {
		return "1 fd: " + quoted[0]
	}
	return fmt.Sprintf("%d fds: %s", nfds, strings.Join(quoted, ", "))
}
