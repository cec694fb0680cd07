package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// localhostName reports whether browsers take host to this machine's
// loopback interface by its name: localhost and the names under it, which
// they resolve to 127.0.0.1 and ::1 themselves, without asking DNS or
// /etc/hosts.
func localhostName(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}

// portOf is the origin's port: the one it names, or its scheme's.
func portOf(u *url.URL) string {
	if p := u.Port(); p != "" {
		return p
	}
	if u.Scheme == "https" {
		return "443"
	}
	return "80"
}

// heldError says that another process listens where a browser takes the
// page's origin (the address is in use).
type heldError struct {
	addr, origin string
	err          error
}

func (e *heldError) Error() string {
	return fmt.Sprintf("cannot listen on %s (%v): a browser may take %s there, and another process listening there would be handed the link this command prints, with its token; not serving", e.addr, syscall.EADDRINUSE, e.origin)
}

func (e *heldError) Unwrap() error { return e.err }

// hint is what to do about it.
func (e *heldError) hint() string {
	_, port, _ := net.SplitHostPort(e.addr)
	return fmt.Sprintf("ss -ltnp 'sport = :%s' names the process; stop it, or give --listen another port", port)
}

// listenLocalhost listens for an origin whose host is localhost (port
// is the origin's). A browser may reach localhost:PORT at 127.0.0.1 or at
// ::1, whichever answers first; a process of another user, or the agent,
// listening on the one the page left free would get the link the
// operator opens, and with it the page's token or an enrolment's. So the
// page listens on both, and does not start while another process holds
// either.
//
// ::1 is bound with IPV6_FREEBIND, so that it is held even while the
// loopback interface has no IPv6 address (a container's IPv6 turned off):
// it cannot be taken meanwhile by another process, which could bind it
// the same way, and reached once the address comes back. Only a kernel
// without IPv6 (ipv6.disable=1) leaves the page on 127.0.0.1 alone, with
// a warning: there no process can listen on ::1, and no browser connects
// to it.
func listenLocalhost(listenHost, port, origin string, warn io.Writer) ([]net.Listener, error) {
	if ip := net.ParseIP(listenHost); listenHost != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--listen %s: the origin %s is reached on the loopback addresses: listen on 127.0.0.1:%s", net.JoinHostPort(listenHost, port), origin, port)
	}
	lc := net.ListenConfig{Control: freebind}
	v4 := net.JoinHostPort("127.0.0.1", port)
	ln4, err := lc.Listen(context.Background(), "tcp4", v4)
	if err != nil {
		return nil, listenError(v4, origin, err)
	}
	v6 := net.JoinHostPort("::1", port)
	ln6, err := lc.Listen(context.Background(), "tcp6", v6)
	switch {
	case errors.Is(err, syscall.EAFNOSUPPORT):
		warningf(warn, "this kernel has no IPv6: serving on %s only (no process can listen on %s)", v4, v6)
		return []net.Listener{ln4}, nil
	case err != nil:
		ln4.Close()
		return nil, listenError(v6, origin, err)
	}
	return []net.Listener{ln4, ln6}, nil
}

// listenError is a heldError when another process holds addr.
func listenError(addr, origin string, err error) error {
	if errors.Is(err, syscall.EADDRINUSE) {
		return &heldError{addr: addr, origin: origin, err: err}
	}
	return err
}

// freebind sets IPV6_FREEBIND on an IPv6 socket (see listenLocalhost).
func freebind(network, _ string, c syscall.RawConn) error {
	if network != "tcp6" {
		return nil
	}
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1)
	}); err != nil {
		return err
	}
	return serr
}
