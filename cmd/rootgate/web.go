package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/approval/web"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/internal/version"
	qrcode "github.com/skip2/go-qrcode"
)

// webAbout is the help of rootgate web.
const webAbout = `web serves the passkey approval page: the requests waiting for a person
at each approver socket, live, each in full, with Approve (a passkey
signature over exactly that request, made in the browser), Deny and a
standing grant. Run it as an ordinary user whom rootgated admits as an
approver (--approver); it holds no power of its own: rootgated verifies
every approval's signature against the passkeys enrolled with
rootgate passkeys add, and takes none without one.

It prints the page's link, which carries a token; only a browser that
opened it reaches the page. Without --cert and --key it serves plain HTTP,
which a browser takes for passkeys only on http://localhost: --listen must
then be a loopback address. For an origin on localhost it listens on both
127.0.0.1 and ::1 at the origin's port, since a browser may take
localhost to either, and does not start while another process holds
one of them (rootgate passkeys add likewise). See docs/passkeys.md.

Examples:
  rootgate web
  rootgate web --listen 0.0.0.0:8443 --origin https://approve.example.org:8443 --cert fullchain.pem --key key.pem
`

var webFlags = []clidoc.Flag{
	{Name: "socket", Default: clidoc.List(nil), Usage: "approver socket `path`; repeat it to show the requests of several daemons (hosts)"},
	{Name: "listen", Default: "127.0.0.1:8443", Usage: "`address` to serve the page on (for an origin on localhost: its port, on 127.0.0.1 and ::1 both)"},
	{Name: "origin", Default: "", Usage: "the page's `URL` as browsers reach it (default http://localhost:PORT, or https://localhost:PORT with --cert)"},
	{Name: "cert", Default: "", Usage: "TLS certificate `file` (PEM, chain included)"},
	{Name: "key", Default: "", Usage: "TLS private key `file` (PEM)"},
}

// serveFlags are what web and passkeys add share: where the page listens.
type serving struct {
	listen, origin, cert, key string
}

func servingOf(fl clidoc.Values) serving {
	return serving{listen: fl.String("listen"), origin: fl.String("origin"), cert: fl.String("cert"), key: fl.String("key")}
}

// open opens the listeners and works out the origin; plain HTTP only on
// a loopback address. For a localhost origin, the page listens on both
// loopback addresses at the origin's port (listenLocalhost).
func (s *serving) open(warn io.Writer) ([]net.Listener, error) {
	if (s.cert == "") != (s.key == "") {
		return nil, errors.New("--cert and --key go together")
	}
	host, port, err := net.SplitHostPort(s.listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %v", s.listen, err)
	}
	if s.cert == "" {
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return nil, fmt.Errorf("--listen %s: without --cert and --key the page is served on a loopback address only (a browser allows passkeys on plain http://localhost alone)", s.listen)
		}
	}
	if s.origin == "" {
		scheme := "http"
		if s.cert != "" {
			scheme = "https"
		}
		s.origin = scheme + "://localhost:" + port
	}
	if _, err := passkey.RPIDOf(s.origin); err != nil {
		return nil, err
	}
	lns, err := s.listenAll(host, port, warn)
	if err != nil {
		return nil, err
	}
	if s.cert != "" {
		cert, err := tls.LoadX509KeyPair(s.cert, s.key)
		if err != nil {
			closeAll(lns)
			return nil, err
		}
		for i, ln := range lns {
			lns[i] = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		}
	}
	return lns, nil
}

// listenAll listens where browsers reach the origin: on --listen, or for a
// localhost origin on both loopback addresses at its port.
func (s *serving) listenAll(host, port string, warn io.Writer) ([]net.Listener, error) {
	u, err := url.Parse(s.origin)
	if err != nil {
		return nil, err
	}
	if !localhostName(u.Hostname()) {
		ln, err := net.Listen("tcp", s.listen)
		if err != nil {
			return nil, err
		}
		return []net.Listener{ln}, nil
	}
	if op := portOf(u); op != port {
		return nil, fmt.Errorf("--listen %s: the origin %s is at port %s: a browser would reach whatever listens there, not this page; listen on that port", s.listen, s.origin, op)
	}
	return listenLocalhost(host, port, s.origin, warn)
}

func closeAll(lns []net.Listener) {
	for _, ln := range lns {
		ln.Close()
	}
}

// addrs names the listeners' addresses.
func addrs(lns []net.Listener) string {
	var a []string
	for _, ln := range lns {
		a = append(a, ln.Addr().String())
	}
	return strings.Join(a, " and ")
}

// failOpen reports an error of serving.open, with what to do when another
// process holds an address.
func failOpen(stderr io.Writer, err error) int {
	var held *heldError
	if errors.As(err, &held) {
		errorWithHint(stderr, err.Error(), held.hint())
		return exitError
	}
	return fail(stderr, err)
}

// serve serves h on lns until ctx ends, then lets the requests under way
// finish (a second at most) before it returns: the enrolment's answer is
// written after its handler ended the serving. A listener that fails
// ends the serving on all.
func serve(ctx context.Context, lns []net.Listener, h http.Handler) error {
	// No ReadTimeout or WriteTimeout: the live event stream stays open.
	// An idle connection and a large header are bounded.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	errs := make(chan error, len(lns))
	for _, ln := range lns {
		go func() { errs <- srv.Serve(ln) }()
	}
	var err error
	for range lns {
		if e := <-errs; !errors.Is(e, http.ErrServerClosed) && err == nil {
			err = e
			_ = srv.Close()
		}
	}
	if err != nil {
		return err
	}
	<-done
	return nil
}

func cmdWeb(ctx context.Context, e *env, fl clidoc.Values, _ []string) int {
	sockets := fl.List("socket")
	if len(sockets) == 0 {
		sockets = []string{client.ApproverSocket("")}
	}
	sv := servingOf(fl)
	lns, err := sv.open(e.stderr)
	if err != nil {
		return failOpen(e.stderr, err)
	}
	relay := &web.Relay{Sockets: sockets, Name: "web", Version: version.String()}
	srv := &web.Server{Relay: relay, Token: web.NewToken()}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go relay.Run(ctx)
	fmt.Fprintf(e.stdout, "rootgate: serving the approval page for %d daemon(s) on %s\nopen: %s/?t=%s\n", len(sockets), addrs(lns), sv.origin, srv.Token)
	if err := serve(ctx, lns, srv); err != nil {
		return fail(e.stderr, err)
	}
	return exitOK
}

// passkeysAbout is the help of the passkeys commands.
const passkeysAbout = `passkeys enrols, lists, removes, exports and imports the passkeys whose
signatures approve requests through the page (rootgate web). Changes go
through rootgated (as root), which records each in the audit log.

add NAME serves a one-time enrolment page at --origin and prints its link
and a QR code; open it on the phone or desktop whose passkey (or security
key) is to approve. The page takes one passkey, the first a browser
makes. The first passkey may be enrolled only while none is, from a
session no user but root controls (not a sudo from a terminal the agent's
uid can type into), and is stored only once you answer y on this
command's terminal, which shows its fingerprint: answer y only if the
page shows the same. Every later one must be confirmed, on that page, by
an enrolled passkey. --origin is where the page (rootgate web) will be
reached: approvals are taken from the origins passkeys were enrolled at.
list and export read --file; remove ID and import FILE ask rootgated. An
import is taken only while no passkey is enrolled, under the same rule as
a first enrolment.

Examples (as root; a first passkey from a root login, not through sudo):
  rootgate passkeys add phone
  rootgate passkeys add --origin https://approve.example.org:8443 --cert c.pem --key k.pem yubikey
  sudo rootgate passkeys list
  rootgate passkeys export > passkeys.json; ssh root@web2 rootgate passkeys import - < passkeys.json
`

var (
	passkeysSocketFlag = clidoc.Flag{Name: "socket", Default: "", Usage: "approver socket `path`"}
	passkeysFileFlag   = clidoc.Flag{Name: "file", Default: passkey.DefaultFile, Usage: "the enrolled passkeys `file` (rootgated --passkeys)"}
	passkeysAddFlags   = append([]clidoc.Flag{passkeysSocketFlag}, webFlags[1:]...)
)

func cmdPasskeysList(_ context.Context, e *env, fl clidoc.Values, _ []string) int {
	f, err := passkey.Load(fl.String("file"))
	if err != nil {
		return fail(e.stderr, err)
	}
	if len(f.Passkeys) == 0 {
		fmt.Fprintln(e.stdout, "no passkey enrolled")
		return exitOK
	}
	fmt.Fprintf(e.stdout, "RP ID %s; origins %s\n", termsafe.Sanitize(f.RPID), termsafe.Sanitize(fmt.Sprint(f.Origins)))
	for _, k := range f.Passkeys {
		fmt.Fprintf(e.stdout, "%s  %s  added %s  counter %d", k.ID, termsafe.Sanitize(k.Name), k.Added.Local().Format(time.DateTime), k.Credential.Authenticator.SignCount)
		if k.Fingerprint != "" {
			fmt.Fprintf(e.stdout, "  fingerprint %s", termsafe.Sanitize(k.Fingerprint))
		}
		fmt.Fprintln(e.stdout)
	}
	return exitOK
}

func cmdPasskeysExport(_ context.Context, e *env, fl clidoc.Values, _ []string) int {
	f, err := passkey.Load(fl.String("file"))
	if err != nil {
		return fail(e.stderr, err)
	}
	b, _ := json.MarshalIndent(f, "", "  ")
	fmt.Fprintf(e.stdout, "%s\n", b)
	return exitOK
}

func cmdPasskeysRemove(ctx context.Context, e *env, fl clidoc.Values, args []string) int {
	if len(args) != 1 {
		errorWithHint(e.stderr, "passkeys remove needs one passkey id", "rootgate passkeys list shows them")
		return exitUsage
	}
	sock := client.ApproverSocket(fl.String("socket"))
	ctx, cancel := context.WithTimeout(ctx, client.AnswerWithin())
	defer cancel()
	if err := remote.RemovePasskey(ctx, sock, args[0]); err != nil {
		return fail(e.stderr, err)
	}
	fmt.Fprintf(e.stdout, "removed %s\n", termsafe.Sanitize(args[0]))
	return exitOK
}

func cmdPasskeysImport(ctx context.Context, e *env, fl clidoc.Values, args []string) int {
	if len(args) != 1 {
		errorWithHint(e.stderr, "passkeys import needs one file (- for standard input)", "rootgate passkeys export writes one")
		return exitUsage
	}
	var data []byte
	var err error
	if args[0] == "-" {
		data, err = io.ReadAll(io.LimitReader(e.stdin, 1<<20))
	} else {
		data, err = os.ReadFile(args[0])
	}
	if err != nil {
		return fail(e.stderr, err)
	}
	sock := client.ApproverSocket(fl.String("socket"))
	ctx, cancel := context.WithTimeout(ctx, client.AnswerWithin())
	defer cancel()
	ids, err := remote.ImportPasskeys(ctx, sock, data)
	if err != nil {
		return fail(e.stderr, err)
	}
	fmt.Fprintf(e.stdout, "imported %d passkey(s)\n", len(ids))
	return exitOK
}

func cmdPasskeysAdd(ctx context.Context, e *env, fl clidoc.Values, args []string) int {
	if len(args) != 1 {
		errorWithHint(e.stderr, "passkeys add needs one name", "rootgate passkeys add phone")
		return exitUsage
	}
	sv := servingOf(fl)
	lns, err := sv.open(e.stderr)
	if err != nil {
		return failOpen(e.stderr, err)
	}
	defer closeAll(lns)
	sock := client.ApproverSocket(fl.String("socket"))
	en, err := remote.StartEnrol(ctx, sock, args[0], sv.origin)
	if err != nil {
		return fail(e.stderr, err)
	}
	defer en.Close()
	run := &enrolRun{ctx: ctx, en: en, name: args[0], out: e.stdout, done: make(chan struct{})}
	if !en.Options.Confirm {
		if run.console, err = openConsole(); err != nil {
			return fail(e.stderr, err)
		}
		defer run.console.Close()
	}
	ctx, run.stop = context.WithCancel(ctx)
	defer run.stop()
	page := &web.Enrol{Token: web.NewToken(), Name: args[0], Options: en.Options, Attest: run.attest, Finish: run.finish}
	link, _ := url.JoinPath(sv.origin, "enrol", page.Token)
	link += "/"
	fmt.Fprintf(e.stdout, "rootgate: open this link on the device whose passkey is to approve (once; it ends with this command):\n%s\n", link)
	if q, err := qrcode.New(link, qrcode.Medium); err == nil {
		fmt.Fprint(e.stdout, q.ToSmallString(false))
	}
	if en.Options.Confirm {
		fmt.Fprintln(e.stdout, "rootgate: passkeys are enrolled already: one of them must confirm the new one on that page")
	} else {
		fmt.Fprintln(e.stdout, "rootgate: the first passkey: once a browser has made it, you confirm its fingerprint here, on this terminal")
	}
	if err := serve(ctx, lns, page); err != nil {
		return fail(e.stderr, err)
	}
	select {
	case <-run.done:
	default:
		return exitError // stopped before the page answered
	}
	if run.err != nil {
		return fail(e.stderr, run.err)
	}
	fmt.Fprintf(e.stdout, "enrolled %s as %s\n", termsafe.Sanitize(args[0]), run.id)
	return exitOK
}

// cmdPasskeys runs "rootgate passkeys" with no known subcommand after it.
func cmdPasskeys(_ context.Context, e *env, _ clidoc.Values, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, "usage: rootgate passkeys add|list|remove|export|import\n\n"+passkeysAbout)
		return exitUsage
	}
	errorWithHint(e.stderr, fmt.Sprintf("unknown passkeys command %q", args[0]), "rootgate passkeys add, list, remove, export or import")
	return exitUsage
}
