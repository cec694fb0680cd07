package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/rootgate/rootgate/internal/testutil"
	"golang.org/x/sys/unix"
)

// What answers for the page's origin (docs/passkeys.md, "Who answers at
// localhost"): a browser takes http://localhost:PORT to 127.0.0.1 or to
// ::1, so a process listening on the address rootgate web left free
// would be handed the link the operator opens, and with it the page's
// token (or, for rootgate passkeys add, the enrolment's).

// pageAnswer is the page's refusal of a request without its token: what
// rootgate web answers, and no other server.
const pageAnswer = "open the link rootgate web printed"

// startWeb runs rootgate web with args and returns its stdout's first
// line with "open: ", or "" and its exit error when it ends first.
func startWeb(t *testing.T, args ...string) (open string, out *syncBuffer, exit error) {
	t.Helper()
	out = &syncBuffer{}
	cmd := exec.Command(rootgateBin, append([]string{"web", "--socket", "/nonexistent/approve.sock"}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() { ended <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-ended })
	var l string
	testutil.WaitFor(t, "rootgate web's link, or its end", 30*time.Second, func() bool {
		select {
		case exit = <-ended:
			ended <- exit
			return true
		default:
		}
		for _, line := range strings.Split(out.String(), "\n") {
			if strings.HasPrefix(line, "open: ") {
				l = line
				return true
			}
		}
		return false
	})
	return strings.TrimPrefix(l, "open: "), out, exit
}

// answers reports whether rootgate web's page answers on addr. It dials
// on the calling goroutine (no http.Transport, which dials on one of its
// own), so that a goroutine locked in another network namespace dials
// there.
func answers(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "GET / HTTP/1.0\r\nHost: localhost\r\n\r\n"); err != nil {
		return false
	}
	b, _ := io.ReadAll(c)
	return strings.Contains(string(b), pageAnswer)
}

// impostor listens on addr (port 0 for any), as another user's process
// (or the agent) would, and returns its port.
func impostor(t *testing.T, network, addr string) int {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// TestWebHoldsBothLoopbacks: rootgate web, for its default origin
// http://localhost:PORT, listens on 127.0.0.1 and on ::1 at PORT, and
// does not start (printing no link) while another process holds either;
// rootgate passkeys add likewise prints no enrolment link.
func TestWebHoldsBothLoopbacks(t *testing.T) {
	t.Parallel()
	t.Run("both held, no one else gets in", bothHeld)
	for _, c := range []struct {
		name, network, held, listen, busy string
	}{
		{"::1 held", "tcp6", "[::1]:0", "127.0.0.1:", "[::1]:"},
		{"127.0.0.1 held", "tcp4", "127.0.0.1:0", "[::1]:", "127.0.0.1:"},
		{"the wildcard held", "tcp", "[::]:0", "127.0.0.1:", "127.0.0.1:"},
	} {
		t.Run(c.name, func(t *testing.T) {
			port := strconv.Itoa(impostor(t, c.network, c.held))
			open, out, exit := startWeb(t, "--listen", c.listen+port)
			want := "rootgate: error: cannot listen on " + c.busy + port + " (address already in use): a browser may take http://localhost:" + port + " there"
			if open != "" || exit == nil || exit.(*exec.ExitError).ExitCode() != 70 || !strings.Contains(out.String(), want) ||
				!strings.Contains(out.String(), "hint: ss -ltnp 'sport = :"+port+"' names the process") {
				t.Fatalf("rootgate web beside another process on %s%s: %v: %s", c.busy, port, exit, out.String())
			}
		})
	}

	t.Run("passkeys add", func(t *testing.T) {
		// A daemon that would take this first enrolment (from the test's
		// session, which only root controls): its link is not printed.
		dir := shortDir(t)
		d := startDaemon(t, opts{Dir: dir, Policy: "ask any\n", Args: []string{"--passkeys", filepath.Join(dir, "passkeys.json")}})
		port := strconv.Itoa(impostor(t, "tcp6", "[::1]:0"))
		add := exec.Command(rootgateBin, "passkeys", "add", "--socket", d.asock(), "--listen", "127.0.0.1:"+port, "key")
		var out syncBuffer
		add.Stdout, add.Stderr = &out, &out
		add.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		add.WaitDelay = time.Second
		if err := add.Start(); err != nil {
			t.Fatal(err)
		}
		ended := make(chan error, 1)
		go func() { ended <- add.Wait() }()
		t.Cleanup(func() { _ = add.Process.Kill(); <-ended })
		testutil.WaitFor(t, "passkeys add's link, or its end", 30*time.Second, func() bool {
			if strings.Contains(out.String(), "/enrol/") {
				return true
			}
			select {
			case err := <-ended:
				ended <- err
				return true
			default:
				return false
			}
		})
		if strings.Contains(out.String(), "/enrol/") || !strings.Contains(out.String(), "cannot listen on [::1]:"+port+" (address already in use)") {
			t.Fatalf("passkeys add beside another process on [::1]:%s: %s", port, out.String())
		}
	})

	t.Run("the origin's port", func(t *testing.T) {
		port := strconv.Itoa(freePort(t))
		other := strconv.Itoa(freePort(t))
		open, out, exit := startWeb(t, "--listen", "127.0.0.1:"+port, "--origin", "http://localhost:"+other)
		if open != "" || exit == nil || !strings.Contains(out.String(), "the origin http://localhost:"+other+" is at port "+other) {
			t.Fatalf("rootgate web on another port than its origin's: %v: %s", exit, out.String())
		}
	})
}

// bothHeld: rootgate web answers on 127.0.0.1 and ::1, and no other
// process listens there beside it.
func bothHeld(t *testing.T) {
	port := strconv.Itoa(freePort(t))
	open, out, exit := startWeb(t, "--listen", "127.0.0.1:"+port)
	if exit != nil || !strings.HasPrefix(open, "http://localhost:"+port+"/?t=") {
		t.Fatalf("rootgate web: %v: %s", exit, out.String())
	}
	if !strings.Contains(out.String(), "on 127.0.0.1:"+port+" and [::1]:"+port) {
		t.Errorf("rootgate web says: %s", out.String())
	}
	for _, a := range []string{"127.0.0.1:" + port, "[::1]:" + port} {
		if !answers(a) {
			t.Errorf("rootgate web does not answer on %s", a)
		}
	}
	// Not even with SO_REUSEPORT, nor on the wildcard address.
	reuse := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
	}}
	for _, a := range []struct{ network, addr string }{{"tcp6", "[::1]:" + port}, {"tcp4", "127.0.0.1:" + port}, {"tcp", "[::]:" + port}, {"tcp4", "0.0.0.0:" + port}} {
		if ln, err := reuse.Listen(context.Background(), a.network, a.addr); err == nil {
			ln.Close()
			t.Errorf("another process listens on %s beside rootgate web", a.addr)
		}
	}
}

// TestWebNoIPv6Loopback: on a loopback interface without ::1 (IPv6 turned
// off on it, as in many containers), rootgate web still holds [::1]:PORT,
// so that no other process holds it when ::1 comes back; and another
// process that bound it first (IPV6_FREEBIND lets any process bind an
// address the machine does not have) keeps it from starting. In a network
// namespace of the test's own.
//
// The test's goroutine is locked to its thread, which alone enters the
// namespace: the sockets it makes and the processes it starts are in it.
// At its end the thread goes back to the test process's namespace and is
// unlocked, not left to end with the goroutine: a thread's end kills the
// processes any goroutine started from it with Pdeathsig, as the tests
// running beside this one do (their rootgate web, their daemons).
func TestWebNoIPv6Loopback(t *testing.T) {
	t.Parallel()
	runtime.LockOSThread()
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Left locked (the thread then ends) only if it cannot go back.
		if unix.Setns(own, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		unix.Close(own)
	}()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Fatal(err)
	}
	if err := loUp(); err != nil {
		t.Fatal(err)
	}
	if err := setIPv6(false); err != nil {
		t.Fatal(err)
	}
	if ln, err := net.Listen("tcp6", "[::1]:0"); err == nil {
		ln.Close()
		t.Fatal("::1 is there after it was turned off")
	}
	// Another process bound [::1]:PORT first: rootgate web does not start.
	fb := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_FREEBIND, 1) })
	}}
	held, err := fb.Listen(context.Background(), "tcp6", "[::1]:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(held.Addr().(*net.TCPAddr).Port)
	open, out, exit := startWeb(t, "--listen", "127.0.0.1:"+port)
	if open != "" || exit == nil || !strings.Contains(out.String(), "cannot listen on [::1]:"+port+" (address already in use)") {
		t.Fatalf("rootgate web beside another process on [::1]:%s while ::1 is off: %v: %s", port, exit, out.String())
	}
	held.Close()
	// Alone, it starts, holding [::1]:PORT: once ::1 is back, it answers there.
	open, out, exit = startWeb(t, "--listen", "127.0.0.1:"+port)
	if open == "" || !strings.Contains(out.String(), "and [::1]:"+port) {
		t.Fatalf("rootgate web while ::1 is off: %v: %s", exit, out.String())
	}
	if ln, err := fb.Listen(context.Background(), "tcp6", "[::1]:"+port); err == nil {
		ln.Close()
		t.Fatalf("another process listens on [::1]:%s beside rootgate web", port)
	}
	if err := setIPv6(true); err != nil {
		t.Fatal(err)
	}
	if !answers("[::1]:" + port) {
		t.Fatalf("rootgate web does not answer on [::1]:%s once ::1 is back", port)
	}
}

// loUp sets this network namespace's loopback interface up.
func loUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// setIPv6 turns IPv6 on or off on this network namespace's loopback
// interface (its ::1 goes with it). A child writes the sysctl through a
// proc of its own, mounted in a mount namespace of its own: where /proc/sys
// is mounted read-only (in a systemd-nspawn container, which the README's
// Ubuntu run of the tests was), a fresh proc's is writable by root all
// the same. The child starts from the caller's thread, so it is in that
// thread's network namespace.
func setIPv6(on bool) error {
	v := "1"
	if on {
		v = "0"
	}
	out, err := exec.Command("unshare", "--mount-proc", "sh", "-c", `echo "$0" > /proc/sys/net/ipv6/conf/lo/disable_ipv6`, v).CombinedOutput()
	if err != nil {
		return fmt.Errorf("net.ipv6.conf.lo.disable_ipv6=%s through unshare --mount-proc: %v: %s", v, err, out)
	}
	return nil
}

// TestWebCookieStaysOnItsPort: a browser that opened the page sends its
// token to no other port of localhost. A browser sends a host's cookies
// to each of its ports alike, so a page of the agent's on another port
// (its dev server, which the operator opens in the same browser) would
// receive a cookie set for the path "/" with every request, and with it
// the page's token (to see and deny every request). rootgate web's
// cookie is set for the page's own path, secret as the token is.
func TestWebCookieStaysOnItsPort(t *testing.T) {
	t.Parallel()
	open, out, exit := startWeb(t, "--listen", "127.0.0.1:"+strconv.Itoa(freePort(t)))
	if open == "" {
		t.Fatalf("rootgate web: %v: %s", exit, out.String())
	}
	token := open[strings.Index(open, "?t=")+3:]
	browser, _ := newBrowser(t, "")
	run := func(actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		ctx, cancel := context.WithTimeout(browser, 60*time.Second)
		defer cancel()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatal(err)
		}
	}
	run(chromedp.Navigate(open), chromedp.WaitVisible("#none"))
	page, err := chromedp.Run(browser, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}

	// The agent's server, on another port of localhost: it keeps every
	// request's header, and its page asks it for the paths the page had
	// when it lived at "/", then reads document.cookie.
	var mu sync.Mutex
	var got []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b strings.Builder
		_ = r.Header.Write(&b)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.String()+"\n"+b.String())
		mu.Unlock()
		_, _ = io.WriteString(w, `<!doctype html><title>the agent's page</title><p id="done"></p><script>
const get = p => fetch(p).catch(() => 0), post = p => fetch(p, {method: "POST", body: "{}"}).catch(() => 0);
Promise.all([get("/events"), get("/app.js"), get("/?t=x"), post("/challenge"), post("/decide")])
  .then(() => { document.getElementById("done").textContent = "cookies: " + document.cookie; });
</script>`)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	agent := "http://localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	run(chromedp.Navigate(agent + "/"))
	var seen string
	testutil.WaitFor(t, "the agent's page's requests", 30*time.Second, func() bool {
		seen, _ = chromedp.Run(browser, chromedp.Text("#done"))
		return seen != ""
	})
	if strings.Contains(seen, token) {
		t.Errorf("the agent's page reads the token in document.cookie: %q", seen)
	}
	mu.Lock()
	reqs := append([]string{}, got...)
	mu.Unlock()
	if len(reqs) < 6 { // the page and its five requests (and the favicon, perhaps)
		t.Fatalf("the agent's server got %d requests: %q", len(reqs), reqs)
	}
	for _, r := range reqs {
		if strings.Contains(r, token) {
			t.Errorf("the agent's server on another port was sent the page's token:\n%s", r)
		}
	}
	// The page's own port still gets it.
	run(chromedp.Navigate(page), chromedp.WaitVisible("#none"))
}
