package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"
	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/wire"
)

// The passkey tests (docs/passkeys.md) run Debian's chromium (where the
// distribution has none, a headless Chromium from npm: chromiumPath),
// headless, driven over the DevTools protocol, with a virtual
// authenticator (CTAP2, internal transport, user verification), against a
// real rootgated, a real `rootgate passkeys add` and a real `rootgate
// web` on a test certificate. The operator account pkyop runs the page;
// the agent is the same account: its requests are shown on the page and
// approved by the passkey, and every way it has of approving them itself
// fails.

// proxyEnv makes the test binary a line proxy between its stdin/stdout
// and the unix socket named by the variable (relayProxy): a process of
// another uid speaking the approver protocol.
const proxyEnv = "ROOTGATE_TEST_SOCKET_PROXY"

// relayProxy copies stdin to the socket and the socket to stdout.
func relayProxy(sock string) int {
	c, err := net.Dial("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	go func() { _, _ = io.Copy(c, os.Stdin); c.(*net.UnixConn).CloseWrite() }()
	_, _ = io.Copy(os.Stdout, c)
	return 0
}

// pkTest is the passkey tests' setup: a daemon, an enrolled passkey, the
// page and one browser.
type pkTest struct {
	t       *testing.T
	d       *daemonProc
	d2      *daemonProc // a second host, its passkeys imported from d's
	op      userAccount
	origin  string
	page    string // the page's URL, under its secret path (web.Server.Base)
	browser context.Context
	authn   cdpwebauthn.AuthenticatorID // the browser's virtual authenticator
	credID  string                      // the enrolled passkey's id
	keys    string                      // the passkeys file
	cert    string                      // the page's certificate and key
	key     string
}

// testCert writes a CA and a certificate for localhost signed by it into
// dir, readable by uid, and returns the files and the base64 SHA-256 of
// the certificate's public key (chromium's --ignore-certificate-errors-spki-list
// takes that key as trusted, as an installed private CA would be).
func testCert(t *testing.T, dir string, uid, gid uint32) (cert, key, spki string) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "rootgate test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"}, DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, _ := x509.MarshalPKCS8PrivateKey(leafKey)
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	chain := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})...)
	for f, b := range map[string][]byte{cert: chain, key: pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(f, int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	parsed, _ := x509.ParseCertificate(leafDER)
	sum := sha256.Sum256(parsed.RawSubjectPublicKeyInfo)
	return cert, key, base64.StdEncoding.EncodeToString(sum[:])
}

// freePort is a TCP port free on 127.0.0.1 now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// lineWith starts cmd and returns the first line of its stdout holding
// want; all of its stdout goes to out (complete once cmd.Wait returns).
func lineWith(t *testing.T, cmd *exec.Cmd, want string, out *syncBuffer) string {
	t.Helper()
	w := &lineWatch{out: out, want: want, found: make(chan string, 1)}
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-w.found:
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("%s printed no line with %q in 60s: %s", cmd.Path, want, out.String())
	}
	return ""
}

// lineWatch copies to out and sends the first complete line holding want
// on found.
type lineWatch struct {
	out     *syncBuffer
	want    string
	partial []byte
	sent    bool
	found   chan string
}

func (w *lineWatch) Write(b []byte) (int, error) {
	w.out.Write(b)
	if w.sent {
		return len(b), nil
	}
	w.partial = append(w.partial, b...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		l := string(w.partial[:i])
		w.partial = w.partial[i+1:]
		if strings.Contains(l, w.want) {
			w.sent = true
			w.found <- l
			return len(b), nil
		}
	}
}

// fallbackChromium is the headless Chromium the README's test command
// installs from npm where the distribution has no chromium package
// (Ubuntu 24.04 has it only as a snap): testdata/chromium's npm ci
// inflates the one @sparticuz/chromium carries into this file.
const fallbackChromium = "testdata/chromium/chromium"

// chromiumPath is chromium on PATH (Debian's package), else the fallback;
// if neither is there, t fails with one line saying what installs them.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	if p, err := filepath.Abs(fallbackChromium); err == nil {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatalf("chromium is needed and neither on PATH nor in internal/e2e/%s: %s chromium; where the distribution has no chromium package, as Ubuntu, npm ci --no-audit --no-fund --prefix internal/e2e/testdata/chromium at the repository's root)",
		fallbackChromium, testutil.TestCommand)
	return ""
}

// newBrowser starts chromium, headless, with a virtual authenticator, and
// trusting the test certificate's key.
func newBrowser(t *testing.T, spki string) (context.Context, cdpwebauthn.AuthenticatorID) {
	t.Helper()
	chrome := chromiumPath(t)
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.Flag("ignore-certificate-errors-spki-list", spki), chromedp.Flag("disable-gpu", true),
		chromedp.Flag("renderer-process-limit", "1"), chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelA() })
	if _, err := chromedp.Run(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdpwebauthn.Enable, cdpwebauthn.EnableParams{})
		return err
	})); err != nil {
		t.Fatalf("chromium's WebAuthn domain: %v", err)
	}
	return ctx, addAuthenticator(t, ctx)
}

// addAuthenticator adds a virtual authenticator to the browser: CTAP2,
// internal (a platform authenticator, as a phone's), resident keys, user
// verification that succeeds, presence simulated.
func addAuthenticator(t *testing.T, ctx context.Context) cdpwebauthn.AuthenticatorID {
	t.Helper()
	res, err := chromedp.Run(ctx, func(ctx context.Context, tg *chromedp.Target) (cdpwebauthn.AddVirtualAuthenticatorResult, error) {
		return cdp.Call(ctx, tg, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{Options: &cdpwebauthn.VirtualAuthenticatorOptions{
			Protocol: cdpwebauthn.AuthenticatorProtocolCtap2, Transport: cdpwebauthn.AuthenticatorTransportInternal,
			HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true,
		}})
	})
	if err != nil {
		t.Fatalf("a virtual authenticator: %v", err)
	}
	return res.AuthenticatorID
}

// run runs browser actions, each call within 60 s.
func (p *pkTest) run(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.browser, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		p.t.Fatal(err)
	}
}

// get runs one browser action that returns a value, within 60 s.
func get[T any](p *pkTest, a chromedp.Action[T]) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.browser, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		p.t.Fatal(err)
	}
	return v
}

// setupPasskeys starts the daemon, enrols the browser's passkey through
// `rootgate passkeys add`, and opens `rootgate web`, run by the operator
// account, in the browser.
func setupPasskeys(t *testing.T) *pkTest {
	op := addAccount(t, "pkyop")
	p, listen := newPKTest(t, op)
	d := p.d
	// Enrolment, by root from a session only root controls: the agent's
	// race for the link first, then the operator's own.
	firstEnrolment(t, p, listen)

	// A second host takes d's passkeys (export, import), but only from a
	// session no user but root controls, as a first enrolment.
	dir2 := shortDir(t)
	keys2 := filepath.Join(dir2, "passkeys.json")
	p.d2 = startDaemon(t, opts{Dir: dir2, Policy: "ask any\n", Args: []string{"--prompt-timeout", "12s", "--approver", op.name, "--passkeys", keys2}})
	openToAll(t, p.d2)
	exported, err := exec.Command(rootgateBin, "passkeys", "export", "--file", p.keys).Output()
	if err != nil {
		t.Fatal(err)
	}
	controlled := "SUDO_UID=" + strconv.Itoa(int(op.uid)) // as sudo from the operator's terminal, which the agent may type into
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{controlled}, []string{"import", "-"}, "passkey change refused: passkeys are imported only from a session no user but root controls; this one is controlled by uid " + strconv.Itoa(int(op.uid))},
		{[]string{controlled}, []string{"add", "--listen", "127.0.0.1:" + strconv.Itoa(freePort(t)), "agentkey"}, "passkey change refused: the first passkey is enrolled only from a session no user but root controls; this one is controlled by uid " + strconv.Itoa(int(op.uid))},
		{nil, []string{"import", "-"}, "imported 1 passkey(s)"},
		{nil, []string{"import", "-"}, "passkey change refused: passkeys are enrolled here already"},
	} {
		cmd := exec.Command(rootgateBin, append([]string{"passkeys"}, append(c.args[:1:1], append([]string{"--socket", p.d2.asock()}, c.args[1:]...)...)...)...)
		cmd.Env = append(os.Environ(), c.env...)
		cmd.Stdin = strings.NewReader(string(exported))
		cmd.WaitDelay = time.Second
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		kill := time.AfterFunc(20*time.Second, func() { _ = cmd.Process.Kill() }) // were an enrolment let in, it would wait for a browser
		_ = cmd.Wait()
		kill.Stop()
		if !strings.Contains(out.String(), c.want) {
			t.Fatalf("%v passkeys %v: %s", c.env, c.args, out.String())
		}
	}

	// The page, run by the operator's own account, for both hosts.
	p.openPage(listen, []string{d.asock(), p.d2.asock()}, d, p.d2)
	return p
}

// newPKTest starts the daemon, whose --approver is op, a certificate for
// the page readable by op, and the browser trusting it; it returns them,
// and the address the page is to listen on (at the origin's port). No
// passkey is enrolled yet.
func newPKTest(t *testing.T, op userAccount) (*pkTest, string) {
	t.Helper()
	dir := shortDir(t)
	keys := filepath.Join(dir, "passkeys.json")
	d := startDaemon(t, opts{Dir: dir, Policy: "ask any\n", Args: []string{"--prompt-timeout", "40s", "--approver", op.name, "--passkeys", keys}})
	openToAll(t, d)
	certDir, err := os.MkdirTemp("", "pkcert")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(certDir) })
	if err := os.Chmod(certDir, 0o755); err != nil {
		t.Fatal(err)
	}
	cert, key, spki := testCert(t, certDir, op.uid, op.gid)
	port := freePort(t)
	p := &pkTest{t: t, d: d, op: op, origin: "https://localhost:" + strconv.Itoa(port), keys: keys, cert: cert, key: key}
	p.browser, p.authn = newBrowser(t, spki)
	return p, "127.0.0.1:" + strconv.Itoa(port)
}

// openPage runs `rootgate web`, as the operator's account, on listen,
// attached to the approver sockets socks, waits until its relay is
// attached to each daemon of ds, and opens its link in the browser.
func (p *pkTest) openPage(listen string, socks []string, ds ...*daemonProc) {
	t := p.t
	t.Helper()
	args := []string{"web"}
	for _, s := range socks {
		args = append(args, "--socket", s)
	}
	var wout syncBuffer
	webCmd := exec.Command(rootgateBin, append(args, "--listen", listen, "--origin", p.origin, "--cert", p.cert, "--key", p.key)...)
	webCmd.Stderr = &wout
	webCmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: p.op.uid, Gid: p.op.gid, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	t.Cleanup(func() { _ = webCmd.Process.Kill(); _ = webCmd.Wait() })
	open := lineWith(t, webCmd, "open: ", &wout)
	testutil.WaitFor(t, "the page's relay attached to every host", 30*time.Second, func() bool {
		for _, d := range ds {
			if !strings.Contains(d.Stderr.String(), "passkey_relay=true") {
				return false
			}
		}
		return true
	})
	p.run(chromedp.Navigate(strings.TrimPrefix(open, "open: ")), chromedp.WaitVisible("#none"))
	p.page = get(p, chromedp.Location())
	if !strings.HasPrefix(p.page, p.origin+"/") || strings.Contains(p.page, "?t=") || len(p.page) != len(p.origin)+34 {
		t.Fatalf("the page's link led to %s", p.page)
	}
}

// ask sends an agent's request, as the operator's account, and returns
// its answer's channel.
func (p *pkTest) ask(id string, pipeline [][]string) chan response {
	return sendAsync(p.d.Sock, p.op, request(map[string]any{"id": id, "reason": "passkey test " + id, "pipeline": pipeline}))
}

// shown waits until the page shows request id, and returns its element's
// selector.
// Each test's request is the only one waiting when it is clicked: one
// still on the page above it could go while the click is under way,
// moving the button from under the pointer.
func (p *pkTest) shown(id string) string {
	p.t.Helper()
	sel := fmt.Sprintf(`div.req[data-id=%q]`, id)
	p.run(chromedp.WaitVisible(sel))
	testutil.WaitFor(p.t, "request "+id+" alone on the page", 30*time.Second, func() bool {
		n, err := chromedp.Run(p.browser, chromedp.Evaluate[int](`document.querySelectorAll("div.req").length`))
		return err == nil && n == 1
	})
	return sel
}

// press reads request sel to its end (scrolls its box down, as a person
// must before Approve works), then presses button (approve or
// grant-approve) once it works.
func (p *pkTest) press(sel, button string) {
	p.t.Helper()
	p.run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.scrollTop = e.scrollHeight; return true })()`, sel+" pre.text"))(ctx, tg)
		return err
	}), chromedp.WaitEnabled(sel+" button."+button), chromedp.Click(sel+" button."+button))
}

func answer(t *testing.T, ch chan response) response {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(90 * time.Second):
		t.Fatal("no answer in 90 s")
	}
	return response{}
}

// startAdd runs `rootgate passkeys add` as root on a terminal of its own
// (a root login's console, which no other uid controls), serving its page
// on listen for origin, and returns it with the enrolment link it printed.
func (p *pkTest) startAdd(t *testing.T, listen, origin, name string) (*approverProc, string) {
	t.Helper()
	cmd := exec.Command(rootgateBin, "passkeys", "add", "--socket", p.d.asock(), "--listen", listen, "--origin", origin, "--cert", p.cert, "--key", p.key, name)
	a := startOnPty(t, cmd, &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL})
	a.See(origin + "/enrol/")
	link := regexp.MustCompile(regexp.QuoteMeta(origin) + `/enrol/[A-Za-z0-9_-]+/`).FindString(a.Screen.Text())
	if link == "" {
		t.Fatalf("passkeys add printed no link:\n%s", a.Screen.Text())
	}
	return a, link
}

// exited waits for passkeys add to end, and returns its exit code.
func exited(t *testing.T, a *approverProc) int {
	t.Helper()
	select {
	case <-a.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("passkeys add did not end:\n%s", a.Screen.Text())
	}
	return a.Cmd.ProcessState.ExitCode()
}

// agentClient is the agent's HTTP client for the pages at localhost. It
// dials the loopback address itself, as a browser does for localhost,
// rather than ask the resolver: in a container of the README's Ubuntu
// run, Go's resolver once sent "localhost" to the DNS server.
func agentClient() *http.Client {
	d := &net.Dialer{}
	return &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if host, port, err := net.SplitHostPort(addr); err == nil && host == "localhost" {
				addr = net.JoinHostPort("127.0.0.1", port)
			}
			return d.DialContext(ctx, network, addr)
		},
	}}
}

// agentPost is the agent's request to the enrolment page at link (it
// holds the link: it drives the operator's browser): a POST of body to
// what, answered with a status and a JSON object (or a text).
func agentPost(t *testing.T, link, what string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	c := agentClient()
	resp, err := c.Post(link+what, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	ans := map[string]any{}
	if json.Unmarshal(raw, &ans) != nil {
		ans["error"] = strings.TrimSpace(string(raw))
	}
	return resp.StatusCode, ans
}

// agentAttest sends the agent's own passkey, made by k for the creation
// options of the enrolment at link (the page at origin), and returns the
// page's answer and the creation challenge.
func agentAttest(t *testing.T, link, origin string, k *testutil.SoftKey) (int, map[string]any, string) {
	t.Helper()
	c := agentClient()
	resp, err := c.Get(link + "options")
	if err != nil {
		t.Fatal(err)
	}
	var opts struct {
		Options string `json:"options"`
	}
	err = json.NewDecoder(resp.Body).Decode(&opts)
	resp.Body.Close()
	var creation struct {
		Challenge string `json:"challenge"`
	}
	if err != nil || json.Unmarshal([]byte(opts.Options), &creation) != nil || creation.Challenge == "" {
		t.Fatalf("the enrolment's options: %v %q", err, opts.Options)
	}
	code, ans := agentPost(t, link, "attest", map[string]string{"attestation": k.Attest(creation.Challenge, origin, "localhost")})
	return code, ans, creation.Challenge
}

// pageText waits until the element sel of the page in the browser holds
// a text, and returns it.
func (p *pkTest) pageText(sel string) string {
	p.t.Helper()
	var text string
	testutil.WaitFor(p.t, "text in "+sel, 30*time.Second, func() bool {
		text, _ = chromedp.Run(p.browser, chromedp.Evaluate[string](fmt.Sprintf(`(e => e ? e.textContent : "")(document.querySelector(%q))`, sel)))
		return text != ""
	})
	return text
}

var (
	consoleCredential  = regexp.MustCompile(`credential +(\S+)`)
	consoleFingerprint = regexp.MustCompile(`fingerprint +([0-9a-f]{4} [0-9a-f]{4} [0-9a-f]{4} [0-9a-f]{4})`)
)

// firstEnrolment enrols the operator's passkey, the first, through
// `rootgate passkeys add` on root's terminal and the enrolment page.
// First the agent, which drives the operator's browser and so holds the
// link, races its own passkey in: root's terminal shows that passkey's
// credential id and fingerprint, the operator's browser finds the link
// used, and root answers n; nothing is stored. Then the operator's own:
// the page and the terminal show the same fingerprint, root answers y.
func firstEnrolment(t *testing.T, p *pkTest, listen string) {
	t.Helper()
	agentRacesFirst(t, p, listen)
	p.credID = operatorEnrols(t, p, listen)
}

// agentRacesFirst: the agent answers the first enrolment's link with its
// own passkey; root's terminal shows it, and root answers n.
func agentRacesFirst(t *testing.T, p *pkTest, listen string) {
	t.Helper()
	add, link := p.startAdd(t, listen, p.origin, "admin")
	agentKey := testutil.NewSoftKey()
	agentID := base64.RawURLEncoding.EncodeToString(agentKey.ID)
	if code, ans, _ := agentAttest(t, link, p.origin, agentKey); code != http.StatusOK || ans["id"] != agentID {
		t.Fatalf("the agent's passkey: %d %v", code, ans)
	}
	add.See("Store this passkey? [y/N]")
	screen := add.Screen.Text()
	for _, want := range []string{"credential     " + agentID, "fingerprint    " + passkey.Fingerprint(agentKey.CreationData("localhost"))} {
		if !strings.Contains(screen, want) {
			t.Fatalf("root's terminal does not show what would be stored (%q):\n%s", want, screen)
		}
	}
	// Nothing is stored while root has not answered.
	if !testutil.Holds(100*time.Millisecond, 2*time.Second, func() bool {
		f, err := passkey.Load(p.keys)
		return err == nil && len(f.Passkeys) == 0
	}) {
		t.Fatal("the agent's passkey was stored before root answered on its terminal")
	}
	p.run(chromedp.Navigate(link))
	if text := p.pageText("body"); !strings.Contains(text, "this enrolment link was used") {
		t.Fatalf("the operator's browser, on the link the agent used: %q", text)
	}
	add.Key("n\r")
	add.See("passkey not stored: it was not confirmed on this terminal")
	if code := exited(t, add); code == 0 {
		t.Fatalf("passkeys add answered n: exit %d:\n%s", code, add.Screen.Text())
	}
	if f, err := passkey.Load(p.keys); err != nil || len(f.Passkeys) != 0 {
		t.Fatalf("the agent's passkey was stored: %v %+v", err, f)
	}
}

// operatorEnrols: the operator's browser answers the first enrolment's
// link; its page and root's terminal show the same fingerprint, root
// answers y. It returns the new passkey's id.
func operatorEnrols(t *testing.T, p *pkTest, listen string) string {
	t.Helper()
	add, link := p.startAdd(t, listen, p.origin, "admin")
	p.run(chromedp.Navigate(link), chromedp.WaitVisible("#rp"))
	testutil.WaitFor(t, "the enrolment page's options", 30*time.Second, func() bool {
		rp, _ := chromedp.Run(p.browser, chromedp.Text("#rp"))
		return rp == "localhost"
	})
	p.run(chromedp.Click("#go"))
	add.See("Store this passkey? [y/N]")
	made, got := p.pageText("#fp"), p.pageText("#gotid")
	screen := add.Screen.Text()
	fp, cred := consoleFingerprint.FindAllStringSubmatch(screen, -1), consoleCredential.FindAllStringSubmatch(screen, -1)
	if len(fp) != 1 || len(cred) != 1 || fp[0][1] != made || cred[0][1] != got {
		t.Fatalf("the page made %s (%s); root's terminal shows:\n%s", made, got, screen)
	}
	add.Key("y\r")
	if msg := p.pageText("p[id=msg], p[id=done]"); msg != "enrolled: "+got {
		t.Fatalf("the enrolment page says %q:\n%s", msg, add.Screen.Text())
	}
	add.See("enrolled admin as " + got)
	if code := exited(t, add); code != 0 || !strings.Contains(add.Screen.Text(), "█") {
		t.Fatalf("passkeys add: exit %d:\n%s", code, add.Screen.Text())
	}
	f, err := passkey.Load(p.keys)
	if err != nil || len(f.Passkeys) != 1 || f.Passkeys[0].ID != got || f.Passkeys[0].Fingerprint != made {
		t.Fatalf("after enrolment: %v %+v", err, f)
	}
	return got
}

// TestPasskeyApproval is the page's whole use: a request of the
// operator's own uid, which no terminal of the operator may approve, is
// shown on the page and approved by the passkey, and runs; one denied;
// one left to time out; a grant given with a passkey and used again.
// Then each attack of an agent with the operator's uid (docs/security.md,
// "Approving with a passkey") fails.
func TestPasskeyApproval(t *testing.T) {
	t.Parallel()
	p := setupPasskeys(t)

	t.Run("approved", func(t *testing.T) {
		ch := p.ask("pk-approve", [][]string{{"echo", "approved by passkey"}})
		sel := p.shown("pk-approve")
		if own := get(p, chromedp.Text(sel+" p.own")); !strings.HasPrefix(own, "FROM YOUR OWN ACCOUNT") {
			t.Errorf("the page does not say the request is from its own account: %q", own)
		}
		text := get(p, chromedp.Text(sel+" pre.text"))
		for _, want := range []string{"pk-approve", "passkey test pk-approve", "/usr/bin/echo", p.op.name} {
			if !strings.Contains(text, want) {
				t.Errorf("the page's request lacks %q:\n%s", want, text)
			}
		}
		p.press(sel, "approve")
		r := answer(t, ch)
		if r.Status != wire.StatusOK || string(r.Stdout) != "approved by passkey\n" {
			t.Fatalf("approved request: %s", r.raw)
		}
		rec := decidedRecord(t, p.d, "pk-approve")
		if rec.Passkey == nil || rec.Passkey.Credential != p.credID || rec.Passkey.Signature == "" || !strings.HasPrefix(rec.By, "passkey admin") {
			t.Fatalf("decided record: %+v", rec)
		}
	})

	t.Run("denied", func(t *testing.T) {
		// A request taller than its box (300 lines of stdin): Approve
		// works only once it has been read to its end.
		var stdin strings.Builder
		for i := range 300 {
			fmt.Fprintf(&stdin, "line %d\n", i)
		}
		ch := sendAsync(p.d.Sock, p.op, request(map[string]any{"id": "pk-deny", "pipeline": [][]string{{"cat"}},
			"stdin": base64.StdEncoding.EncodeToString([]byte(stdin.String()))}))
		sel := p.shown("pk-deny")
		if text := get(p, chromedp.Text(sel+" pre.text")); !strings.Contains(text, "line 299") {
			t.Fatalf("the page does not show the whole stdin:\n%s", text)
		}
		// Past the 2 s dwell, Approve is still off until the end is seen.
		if !testutil.Holds(100*time.Millisecond, 3*time.Second, func() bool {
			off, err := chromedp.Run(p.browser, chromedp.Evaluate[bool](`document.querySelector('div.req[data-id="pk-deny"] button.approve').disabled`))
			return err == nil && off
		}) {
			t.Fatal("Approve worked before the request was read to its end")
		}
		p.run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := chromedp.Evaluate[bool](`(() => { const e = document.querySelector('div.req[data-id="pk-deny"] pre.text'); e.scrollTop = e.scrollHeight; return true })()`)(ctx, tg)
			return err
		}), chromedp.WaitEnabled(sel+" button.approve"))
		p.run(chromedp.Click(sel + " button.deny"))
		if r := answer(t, ch); r.Status != wire.StatusDenied {
			t.Fatalf("denied request: %s", r.raw)
		}
	})

	t.Run("timed out", func(t *testing.T) {
		// On the second host, whose prompts time out sooner.
		ch := sendAsync(p.d2.Sock, p.op, request(map[string]any{"id": "pk-timeout", "pipeline": [][]string{{"true"}}}))
		p.shown("pk-timeout")
		if r := answer(t, ch); r.Status != wire.StatusTimeout {
			t.Fatalf("request left alone: %s", r.raw)
		}
		p.run(chromedp.WaitNotPresent(`div.req[data-id="pk-timeout"]`))
	})

	t.Run("grant used again", func(t *testing.T) {
		ch := p.ask("pk-grant1", [][]string{{"echo", "granted"}})
		sel := p.shown("pk-grant1")
		p.press(sel, "grant-approve")
		if r := answer(t, ch); r.Status != wire.StatusOK {
			t.Fatalf("granted request: %s", r.raw)
		}
		rec := decidedRecord(t, p.d, "pk-grant1")
		if rec.Passkey == nil || rec.Passkey.Grant != 900 {
			t.Fatalf("decided record of the grant: %+v", rec)
		}
		r := answer(t, p.ask("pk-grant2", [][]string{{"echo", "granted"}}))
		if r.Status != wire.StatusOK || !strings.Contains(r.raw, `"by":"grant"`) {
			t.Fatalf("the same request again: %s", r.raw)
		}
	})

	t.Run("second host", func(t *testing.T) {
		// Its own copy of the public key verifies the same passkey.
		ch := sendAsync(p.d2.Sock, p.op, request(map[string]any{"id": "pk-host2", "pipeline": [][]string{{"echo", "on host 2"}}}))
		sel := p.shown("pk-host2")
		p.press(sel, "approve")
		if r := answer(t, ch); r.Status != wire.StatusOK || string(r.Stdout) != "on host 2\n" {
			t.Fatalf("request to the second host: %s", r.raw)
		}
	})

	t.Run("attacks", func(t *testing.T) { passkeyAttacks(t, p) })

	t.Run("removed, shown on the page", func(t *testing.T) {
		out, err := exec.Command(rootgateBin, "passkeys", "remove", "--socket", p.d2.asock(), p.credID).CombinedOutput()
		if err != nil || string(out) != "removed "+p.credID+"\n" {
			t.Fatalf("passkeys remove: %v: %s", err, out)
		}
		p.run(chromedp.WaitVisible(`//ul[@id="notices"]/li[contains(., "passkey ` + p.credID + ` removed by root")]`))
		// The second host no longer takes it.
		ch := sendAsync(p.d2.Sock, p.op, request(map[string]any{"id": "pk-removed", "pipeline": [][]string{{"true"}}}))
		sel := p.shown("pk-removed")
		p.press(sel, "approve")
		var msg string
		testutil.WaitFor(t, "the page's answer to the approval", 30*time.Second, func() bool {
			msg, _ = chromedp.Run(p.browser, chromedp.Text(sel+" p.msg"))
			return msg != ""
		})
		if !strings.Contains(msg, "passkey not enrolled") {
			t.Fatalf("approval with a removed passkey: the page says %q", msg)
		}
		p.run(chromedp.Click(sel + " button.deny"))
		if r := answer(t, ch); r.Status != wire.StatusDenied {
			t.Fatalf("request to the host without passkeys: %s", r.raw)
		}
		var changes []string
		_ = audit.ReadAll([]string{auditPath(p.d2.Dir)}, func(rd audit.Read) error {
			if rd.Record != nil && rd.Record.Kind == audit.KindPasskey {
				changes = append(changes, rd.Record.Passkeys.Change+" "+strings.Join(rd.Record.Passkeys.IDs, ","))
			}
			return nil
		})
		if want := []string{"imported " + p.credID, "removed " + p.credID}; strings.Join(changes, ";") != strings.Join(want, ";") {
			t.Fatalf("the second host's passkeys_changed records: %q, want %q", changes, want)
		}
		// Its log's passkey approval no longer verifies without the key.
		out, err = exec.Command(rootgateBin, "audit", "verify", "--file", auditPath(p.d2.Dir), "--passkeys", filepath.Join(p.d2.Dir, "passkeys.json")).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "passkey approval of request pk-host2 by "+p.credID+" does not verify: passkey not enrolled") {
			t.Fatalf("audit verify without the key: %v: %s", err, out)
		}
	})

	t.Run("a second passkey, confirmed by the first", func(t *testing.T) { secondPasskey(t, p) })

	// rootgate audit show says which passkey approved, and how the
	// passkeys changed.
	shown, err := exec.Command(rootgateBin, "audit", "show", "--file", auditPath(p.d.Dir)).CombinedOutput()
	for _, want := range []string{"passkey:   admin (" + p.credID + ") signed request hash ", ", with a standing grant of 900s",
		"passkeys:  enrolled " + p.credID + " (admin) by root", "confirmed: on root's terminal, by its fingerprint",
		"confirmed: by enrolled passkey " + p.credID} {
		if err != nil || !strings.Contains(string(shown), want) {
			t.Fatalf("audit show lacks %q: %v\n%s", want, err, shown)
		}
	}

	// Every passkey approval in the log verifies against the enrolled key,
	// and so do both enrolments: the first's key is the one root
	// confirmed, the second's confirmation is the first passkey's
	// signature over it.
	out, err := exec.Command(rootgateBin, "audit", "verify", "--file", auditPath(p.d.Dir), "--passkeys", p.keys).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "approval(s) and 2 enrolment(s) checked against") || strings.Contains(string(out), "passkeys: 0 approval") || !strings.Contains(string(out), " 0 broken") {
		t.Fatalf("audit verify --passkeys: %v\n%s", err, out)
	}

	// The second enrolment's record, changed to say that the agent's
	// passkey was the one confirmed, its hash chain made whole again (as
	// whoever could write the log could do): the chain verifies, the
	// confirmation does not.
	agentKey := testutil.NewSoftKey()
	tampered := rechained(t, auditPath(p.d.Dir), func(line string) bool {
		return strings.Contains(line, `"kind":"passkeys_changed"`) && strings.Contains(line, `"name":"second"`)
	}, func(line string) string {
		var rec audit.Record
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		line = strings.Replace(line, `"ids":["`+rec.Passkeys.IDs[0]+`"]`, `"ids":["`+base64.RawURLEncoding.EncodeToString(agentKey.ID)+`"]`, 1)
		return strings.Replace(line, `"public_key":"`+rec.Passkeys.PublicKey+`"`, `"public_key":"`+base64.RawURLEncoding.EncodeToString(agentKey.COSE())+`"`, 1)
	})
	out, err = exec.Command(rootgateBin, "audit", "verify", "--file", tampered, "--passkeys", p.keys).CombinedOutput()
	want := "enrolment of passkey " + base64.RawURLEncoding.EncodeToString(agentKey.ID) + " does not verify: its confirmation by " + p.credID + ": assertion refused"
	if err == nil || !strings.Contains(string(out), "ok: ") || !strings.Contains(string(out), want) || !strings.Contains(string(out), " 1 broken") {
		t.Fatalf("audit verify of the changed record: %v, want %q:\n%s", err, want, out)
	}
}

// secondPasskey enrols a second passkey, which the first must confirm,
// through `rootgate passkeys add` and its page on another port. First
// the agent, holding the link, sends its own passkey, and with it the
// confirmation the operator's passkey made for the passkey the
// operator's device made: refused, since that confirmation names the
// operator's new credential. Then the operator's: the browser's new
// authenticator makes the passkey, the first passkey confirms it on the
// page.
func secondPasskey(t *testing.T, p *pkTest) {
	port := strconv.Itoa(freePort(t))
	origin, listen := "https://localhost:"+port, "127.0.0.1:"+port
	agentKeepsConfirmation(t, p, listen, origin)
	operatorConfirms(t, p, listen, origin)
}

// agentKeepsConfirmation: the agent answers the second enrolment's link
// with its own passkey, and sends with it the confirmation the first
// passkey made for the operator's new one.
func agentKeepsConfirmation(t *testing.T, p *pkTest, listen, origin string) {
	t.Helper()
	add, link := p.startAdd(t, listen, origin, "second")
	agentKey := testutil.NewSoftKey()
	code, ans, creation := agentAttest(t, link, origin, agentKey)
	if code != http.StatusOK || ans["challenge"] == "" {
		t.Fatalf("the agent's passkey: %d %v", code, ans)
	}
	operatorsNew := testutil.NewSoftKey() // what the operator's device made
	confirm := p.sign(p.origin, passkey.EnrolChallenge(creation, "second", base64.RawURLEncoding.EncodeToString(operatorsNew.ID), operatorsNew.COSE()))
	code, ans = agentPost(t, link, "finish", map[string]any{"assertion": confirm})
	if msg, _ := ans["error"].(string); code != http.StatusConflict || !strings.Contains(msg, "passkey change refused: the confirming assertion does not verify: assertion refused") {
		t.Fatalf("the agent's passkey with the operator's confirmation: %d %v", code, ans)
	}
	add.See("the confirming assertion does not verify")
	if code := exited(t, add); code == 0 {
		t.Fatalf("passkeys add took the agent's passkey:\n%s", add.Screen.Text())
	}
	if f, err := passkey.Load(p.keys); err != nil || len(f.Passkeys) != 1 {
		t.Fatalf("the agent's passkey was stored: %v %+v", err, f)
	}
}

// operatorConfirms: the second passkey, made by another authenticator,
// confirmed on the page by the first.
func operatorConfirms(t *testing.T, p *pkTest, listen, origin string) {
	t.Helper()
	// The new passkey is another authenticator's: the first holds one for
	// rootgate's user already, which the options exclude. The first
	// passkey is kept aside meanwhile, and put in a third for the
	// confirmation.
	add, link := p.startAdd(t, listen, origin, "second")
	first := get(p, chromedp.Action[[]*cdpwebauthn.Credential](func(ctx context.Context, tg *chromedp.Target) ([]*cdpwebauthn.Credential, error) {
		res, err := cdp.Call(ctx, tg, cdpwebauthn.GetCredentials, cdpwebauthn.GetCredentialsParams{AuthenticatorID: p.authn})
		return res.Credentials, err
	}))
	p.removeAuthenticator()
	p.authn = addAuthenticator(t, p.browser)
	p.run(chromedp.Navigate(link), chromedp.WaitVisible("#rp"))
	testutil.WaitFor(t, "the enrolment page's options", 30*time.Second, func() bool {
		rp, _ := chromedp.Run(p.browser, chromedp.Text("#rp"))
		return rp == "localhost"
	})
	p.run(chromedp.Click("#go"), chromedp.WaitEnabled("#confirm-go"))
	made, got, id := p.pageText("#fp"), p.pageText("#gotfp"), p.pageText("#gotid")
	if made != got {
		t.Fatalf("the page made %s, rootgated got %s", made, got)
	}
	p.removeAuthenticator()
	p.authn = addAuthenticator(t, p.browser)
	// The passkey without its CMTG fields, which an authenticator without
	// that extension refuses even when false.
	var kept map[string]any
	b, _ := json.Marshal(first[0])
	_ = json.Unmarshal(b, &kept)
	for k := range kept {
		if strings.Contains(strings.ToLower(k), "cmtg") {
			delete(kept, k)
		}
	}
	addCredential := cdp.Command[map[string]any, cdp.Empty]{Method: cdpwebauthn.CommandAddCredential}
	p.run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, addCredential, map[string]any{"authenticatorId": p.authn, "credential": kept})
		return err
	}))
	p.run(chromedp.Click("#confirm-go"))
	if msg := p.pageText("p[id=msg], p[id=done]"); msg != "enrolled: "+id {
		t.Fatalf("the enrolment page says %q:\n%s", msg, add.Screen.Text())
	}
	add.See("enrolled second as " + id)
	if code := exited(t, add); code != 0 {
		t.Fatalf("passkeys add: exit %d:\n%s", code, add.Screen.Text())
	}
	f, err := passkey.Load(p.keys)
	if err != nil || len(f.Passkeys) != 2 || f.Passkeys[1].ID != id || f.Passkeys[1].Name != "second" || f.Passkeys[1].Fingerprint != made {
		t.Fatalf("after the second enrolment: %v %+v", err, f)
	}
	var confirmedBy string
	_ = audit.ReadAll([]string{auditPath(p.d.Dir)}, func(rd audit.Read) error {
		if rd.Record != nil && rd.Record.Kind == audit.KindPasskey && rd.Record.Passkeys.Name == "second" {
			confirmedBy = rd.Record.Passkeys.ConfirmedBy
		}
		return nil
	})
	if confirmedBy != p.credID {
		t.Fatalf("the second enrolment's record: confirmed by %q", confirmedBy)
	}
	p.run(chromedp.Navigate(p.page))
	p.run(chromedp.WaitVisible(`//ul[@id="notices"]/li[contains(., "passkey second (` + id + `) enrolled by root, confirmed by passkey ` + p.credID + `")]`))
}

// removeAuthenticator takes the browser's virtual authenticator away.
func (p *pkTest) removeAuthenticator() {
	p.t.Helper()
	p.run(chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := cdp.Call(ctx, tg, cdpwebauthn.RemoveVirtualAuthenticator, cdpwebauthn.RemoveVirtualAuthenticatorParams{AuthenticatorID: p.authn})
		return err
	}))
}

// rechained writes a copy of the audit log at path in which the first
// record pick takes is changed by edit, and its hash and every later
// record's prev and hash are computed again, and returns the copy's
// path.
func rechained(t *testing.T, path string, pick func(string) bool, edit func(string) string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const hashKey = `,"hash":"`
	hashOf := func(line string) string { return line[len(line)-2-64 : len(line)-2] }
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	changed, oldPrev, newPrev := false, "", ""
	for i, line := range lines {
		old := hashOf(line)
		switch {
		case !changed && pick(line):
			line, changed = edit(line), true
		case changed:
			line = strings.Replace(line, `"prev":"`+oldPrev+`"`, `"prev":"`+newPrev+`"`, 1)
		default:
			continue
		}
		body := line[:len(line)-len(hashKey)-64-2] + "}"
		sum := sha256.Sum256([]byte(body))
		lines[i] = body[:len(body)-1] + hashKey + fmt.Sprintf("%x", sum) + `"}`
		oldPrev, newPrev = old, hashOf(lines[i])
	}
	if !changed {
		t.Fatal("no record to change")
	}
	out := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(out, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return out
}

// decidedRecord is the decided record of request id in d's audit log.
func decidedRecord(t *testing.T, d *daemonProc, id string) *audit.Decision {
	t.Helper()
	var dec *audit.Decision
	testutil.WaitFor(t, "the decided record of "+id, 10*time.Second, func() bool {
		_ = audit.ReadAll([]string{auditPath(d.Dir)}, func(rd audit.Read) error {
			if rd.Record != nil && rd.Record.ID == id && rd.Record.Kind == audit.KindDecided {
				dec = rd.Record.Decision
			}
			return nil
		})
		return dec != nil
	})
	return dec
}

// agentRelay is an approver client of the agent's own, as the operator's
// account (a process of the test binary, relayProxy), that says it is a
// passkey relay: what a compromised page process, or an agent with the
// operator's uid, can send.
type agentRelay struct {
	t    *testing.T
	in   io.WriteCloser
	mu   sync.Mutex // serialises writes
	msgs chan *remote.Message
}

func startAgentRelay(t *testing.T, p *pkTest) *agentRelay {
	t.Helper()
	return startAgentRelayOn(t, p.op, selfCopy(t), p.d.asock())
}

// selfCopy is a copy of the test binary where any account may run it.
func selfCopy(t *testing.T) string {
	t.Helper()
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(shortDir(t), "self")
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, self, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

// startAgentRelayOn is an agent's relay, as the account op, attached to
// the approver socket sock; bin is selfCopy's.
func startAgentRelayOn(t *testing.T, op userAccount, bin, sock string) *agentRelay {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{proxyEnv + "=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: op.uid, Gid: op.gid, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	in, _ := cmd.StdinPipe()
	outp, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	a := &agentRelay{t: t, in: in, msgs: make(chan *remote.Message, 100)}
	go func() {
		br := bufio.NewReaderSize(outp, 1<<20)
		defer close(a.msgs)
		for {
			m, err := remote.ReadMessage(br, remote.MaxDaemonLine)
			if err != nil {
				return
			}
			if m.Type == remote.MsgPing {
				a.mu.Lock()
				_ = remote.WriteMessage(a.in, &remote.Message{Type: remote.MsgPong})
				a.mu.Unlock()
				continue
			}
			a.msgs <- m
		}
	}()
	a.send(&remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: "agent", Capabilities: []string{remote.CapPasskey, remote.CapGroup}})
	if m := a.next(func(m *remote.Message) bool { return m.Type == remote.MsgWelcome }); m.RPID != "localhost" {
		t.Fatalf("welcome: %+v", m)
	}
	return a
}

func (a *agentRelay) send(m *remote.Message) {
	a.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := remote.WriteMessage(a.in, m); err != nil {
		a.t.Fatal(err)
	}
}

// next returns the next message that want takes, dropping the others.
func (a *agentRelay) next(want func(*remote.Message) bool) *remote.Message {
	a.t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case m, ok := <-a.msgs:
			if !ok {
				a.t.Fatal("the agent's relay was disconnected")
			}
			if want(m) {
				return m
			}
		case <-timeout:
			a.t.Fatal("no message in 60 s")
		}
	}
}

// prompt waits for the prompt of request id.
func (a *agentRelay) prompt(id string) *remote.Message {
	a.t.Helper()
	return a.next(func(m *remote.Message) bool { return m.Type == remote.MsgPrompt && m.ID == id })
}

// approve sends an approval of prompt pr with assertion as, and returns
// the daemon's refusal, or "" when it was accepted. A refused assertion
// uses the prompt's nonce up: pr gets the new one.
func (a *agentRelay) approve(pr *remote.Message, as *passkey.Assertion) string {
	a.t.Helper()
	yes := true
	a.send(&remote.Message{Type: remote.MsgDecision, ID: pr.ID, Hash: pr.Hash, Approve: &yes, Assertion: as})
	m := a.next(func(m *remote.Message) bool {
		return m.ID == pr.ID && (m.Type == remote.MsgAccepted || m.Type == remote.MsgError || m.Type == remote.MsgNonce)
	})
	if m.Type == remote.MsgNonce {
		pr.Nonce = m.Nonce
		m = a.next(func(m *remote.Message) bool { return m.ID == pr.ID && m.Type == remote.MsgError })
	}
	if m.Type == remote.MsgAccepted {
		return ""
	}
	return m.Message
}

// sign has the browser's passkey sign challenge on the page at origin (a
// page of the agent's, or the real one), as navigator.credentials.get.
func (p *pkTest) sign(origin string, challenge []byte) *passkey.Assertion {
	p.t.Helper()
	cur := get(p, chromedp.Location())
	if !strings.HasPrefix(cur, origin) {
		p.run(chromedp.Navigate(origin + "/"))
	}
	js := fmt.Sprintf(`(async () => {
		const enc = b => btoa(String.fromCharCode(...new Uint8Array(b))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
		const dec = s => Uint8Array.from(atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) %% 4)), c => c.charCodeAt(0));
		const c = await navigator.credentials.get({publicKey: {challenge: dec(%q), rpId: "localhost", userVerification: "required",
			allowCredentials: [{type: "public-key", id: dec(%q)}]}});
		return JSON.stringify({credential_id: enc(c.rawId), authenticator_data: enc(c.response.authenticatorData),
			client_data: enc(c.response.clientDataJSON), signature: enc(c.response.signature)});
	})()`, base64.RawURLEncoding.EncodeToString(challenge), p.credID)
	out := get(p, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	var a passkey.Assertion
	if err := json.Unmarshal([]byte(out), &a); err != nil {
		p.t.Fatal(err)
	}
	return &a
}

// passkeyAttacks: each way an agent with the operator's uid has of
// approving its own request, each refused, the request then denied from
// the page so it never runs.
func passkeyAttacks(t *testing.T, p *pkTest) {
	marks := t.TempDir()
	// Each request of an attack would leave a file of its own if it ran.
	touch := func(id string) [][]string { return [][]string{{"touch", filepath.Join(marks, id)}} }
	ran := func(id string) bool { _, err := os.Stat(filepath.Join(marks, id)); return err == nil }
	agent := startAgentRelay(t, p)
	// denyOnPage ends request id from the page, and checks it did not run.
	denyOnPage := func(t *testing.T, id string, ch chan response) {
		t.Helper()
		sel := p.shown(id)
		p.run(chromedp.Click(sel + " button.deny"))
		if r := answer(t, ch); r.Status != wire.StatusDenied || ran(id) {
			t.Fatalf("%s: %s (ran: %v)", id, r.raw, ran(id))
		}
	}

	t.Run("typing into the approver's terminal", func(t *testing.T) {
		// The operator's own `rootgate approve`, on a terminal the
		// operator's uid (so the agent) can type into.
		a := startApprover(t, p.d.asock(), p.op.uid)
		a.See("attached to rootgated")
		ch := p.ask("pk-atk-tty", touch("pk-atk-tty"))
		p.shown("pk-atk-tty")
		// The agent types y into it for 4 s, past the prompt's dwell time
		// (keys count a second after a prompt appears), as it would were
		// the request put there.
		if !testutil.Holds(200*time.Millisecond, 4*time.Second, func() bool { a.Key("y"); return !ran("pk-atk-tty") }) {
			t.Fatal("a y typed into the operator's terminal ran the request")
		}
		denyOnPage(t, "pk-atk-tty", ch)
	})

	t.Run("decision without an assertion", func(t *testing.T) {
		ch := p.ask("pk-atk-none", touch("pk-atk-none"))
		pr := agent.prompt("pk-atk-none")
		if msg := agent.approve(pr, nil); msg != remote.ApproverNoAssertion {
			t.Fatalf("approval without an assertion: %q", msg)
		}
		denyOnPage(t, "pk-atk-none", ch)
	})

	t.Run("replayed assertion", func(t *testing.T) {
		old := decidedRecord(t, p.d, "pk-approve").Passkey
		ch := p.ask("pk-atk-replay", touch("pk-atk-replay"))
		pr := agent.prompt("pk-atk-replay")
		msg := agent.approve(pr, &passkey.Assertion{CredentialID: old.Credential, AuthenticatorData: old.AuthenticatorData, ClientData: old.ClientData, Signature: old.Signature})
		if !strings.HasPrefix(msg, "decision refused: the passkey assertion for request \"pk-atk-replay\" does not verify") {
			t.Fatalf("replayed assertion: %q", msg)
		}
		denyOnPage(t, "pk-atk-replay", ch)
	})

	t.Run("assertion for another request or nonce", func(t *testing.T) {
		ch := p.ask("pk-atk-other", touch("pk-atk-other"))
		pr := agent.prompt("pk-atk-other")
		for name, challenge := range map[string][]byte{
			"another request": passkey.Challenge(strings.Repeat("0", 64), pr.Nonce, 0, false),
			"another nonce":   passkey.Challenge(pr.Hash, passkey.Nonce(), 0, false),
			"another grant":   passkey.Challenge(pr.Hash, pr.Nonce, 28800, false),
		} {
			as := p.sign(p.origin, challenge)
			if msg := agent.approve(pr, as); !strings.Contains(msg, "does not verify") {
				t.Fatalf("%s: %q", name, msg)
			}
		}
		p.run(chromedp.Navigate(p.page))
		denyOnPage(t, "pk-atk-other", ch)
	})

	t.Run("request swapped after the page rendered it", func(t *testing.T) {
		// The page shows one request; the person signs for it; the agent
		// withdraws it and sends another, and hands the signature on.
		first := make(chan response, 1)
		firstCtx, cancel := context.WithCancel(context.Background())
		go func() {
			cmd := exec.CommandContext(firstCtx, rootgateBin, "run", "--socket", p.d.Sock, "--reason", "harmless", "--", "true")
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: p.op.uid, Gid: p.op.gid, Groups: []uint32{}}}
			b, _ := cmd.CombinedOutput()
			first <- response{raw: string(b)}
		}()
		shownPr := agent.next(func(m *remote.Message) bool {
			return m.Type == remote.MsgPrompt && m.Request != nil && m.Request.Reason == "harmless"
		})
		signed := p.sign(p.origin, passkey.Challenge(shownPr.Hash, shownPr.Nonce, 0, false))
		cancel()
		<-first
		ch := p.ask("pk-atk-swap", touch("pk-atk-swap"))
		pr := agent.prompt("pk-atk-swap")
		if msg := agent.approve(pr, signed); !strings.Contains(msg, "does not verify") {
			t.Fatalf("swapped request: %q", msg)
		}
		p.run(chromedp.Navigate(p.page))
		denyOnPage(t, "pk-atk-swap", ch)
	})

	t.Run("a credential the agent made itself", func(t *testing.T) {
		ch := p.ask("pk-atk-own", touch("pk-atk-own"))
		pr := agent.prompt("pk-atk-own")
		msg := agent.approve(pr, ownAssertion(t, passkey.Challenge(pr.Hash, pr.Nonce, 0, false), p.origin))
		if !strings.Contains(msg, "passkey not enrolled") {
			t.Fatalf("the agent's own credential: %q", msg)
		}
		// Nor may the agent enrol one: only root changes passkeys.
		var out syncBuffer
		add := exec.Command(rootgateBin, "passkeys", "add", "--socket", p.d.asock(), "--listen", "127.0.0.1:"+strconv.Itoa(freePort(t)), "agentkey")
		add.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: p.op.uid, Gid: p.op.gid, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
		add.Stdout, add.Stderr = &out, &out
		time.AfterFunc(20*time.Second, func() { _ = add.Process.Kill() }) // were it let in, it would wait for a browser
		if err := add.Run(); err == nil || !strings.Contains(out.String(), remote.ApproverPasskeyRootOnly) {
			t.Fatalf("the agent's passkeys add: %v: %s", err, out.String())
		}
		denyOnPage(t, "pk-atk-own", ch)
	})

	t.Run("a page on another origin", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "<!doctype html><title>the agent's page</title>")
		})}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		evil := "http://localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		ch := p.ask("pk-atk-origin", touch("pk-atk-origin"))
		pr := agent.prompt("pk-atk-origin")
		as := p.sign(evil, passkey.Challenge(pr.Hash, pr.Nonce, 0, false))
		if msg := agent.approve(pr, as); !strings.Contains(msg, "does not verify") || !strings.Contains(msg, "rigin") {
			t.Fatalf("assertion from another origin: %q", msg)
		}
		p.run(chromedp.Navigate(p.page))
		denyOnPage(t, "pk-atk-origin", ch)
	})

	t.Run("a compromised page process approving", func(t *testing.T) {
		// The page process's forgery: the enrolled credential's id, made-up
		// authenticator data and client data for this very request, and a
		// signature of its own.
		ch := p.ask("pk-atk-page", touch("pk-atk-page"))
		pr := agent.prompt("pk-atk-page")
		forged := ownAssertion(t, passkey.Challenge(pr.Hash, pr.Nonce, 0, false), p.origin)
		forged.CredentialID = p.credID
		if msg := agent.approve(pr, forged); !strings.Contains(msg, "does not verify") {
			t.Fatalf("forged assertion: %q", msg)
		}
		denyOnPage(t, "pk-atk-page", ch)
	})
}

// ownAssertion is an assertion over challenge by a P-256 key the agent
// made itself, with flags UP and UV, as a software authenticator of its
// own would make it.
func ownAssertion(t *testing.T, challenge []byte, origin string) *passkey.Assertion {
	t.Helper()
	k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rpHash := sha256.Sum256([]byte("localhost"))
	ad := append(rpHash[:], 0x05, 0, 0, 0, 9) // UP|UV, counter 9
	cd, _ := json.Marshal(map[string]any{"type": "webauthn.get", "challenge": base64.RawURLEncoding.EncodeToString(challenge), "origin": origin, "crossOrigin": false})
	cdHash := sha256.Sum256(cd)
	digest := sha256.Sum256(append(append([]byte{}, ad...), cdHash[:]...))
	sig, err := ecdsa.SignASN1(rand.Reader, k, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	enc := base64.RawURLEncoding.EncodeToString
	return &passkey.Assertion{CredentialID: enc(id), AuthenticatorData: enc(ad), ClientData: enc(cd), Signature: enc(sig)}
}

// firstUnconfirmed: a root client that does not ask on its terminal (not
// rootgate passkeys add) is refused the first passkey, whose only
// confirmation is root's there.
func firstUnconfirmed(t *testing.T) {
	dir := shortDir(t)
	keys := filepath.Join(dir, "passkeys.json")
	d := approverDaemon(t, "--passkeys", keys)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const origin = "http://localhost:8443"
	en, err := remote.StartEnrol(ctx, d.asock(), "unasked", origin)
	if err != nil || en.Options.Confirm {
		t.Fatalf("a first enrolment: %v %+v", err, en)
	}
	defer en.Close()
	k := testutil.NewSoftKey()
	m, err := en.Attest(k.Attest(en.Options.Challenge, origin, "localhost"))
	if err != nil || m.ID != base64.RawURLEncoding.EncodeToString(k.ID) || m.Fingerprint != passkey.Fingerprint(k.CreationData("localhost")) || m.Challenge != "" {
		t.Fatalf("the new credential: %v %+v", err, m)
	}
	if _, err := en.Finish(nil, false); err == nil || !strings.Contains(err.Error(), "passkey change refused: the first passkey is stored only once root confirmed its fingerprint on the terminal of rootgate passkeys add") {
		t.Fatalf("a first passkey without root's word: %v", err)
	}
	if f, err := passkey.Load(keys); err != nil || len(f.Passkeys) != 0 {
		t.Fatalf("stored: %v %+v", err, f)
	}
}

// TestPasskeyRelayRefusals: what a daemon says to a passkey relay it will
// not take, and to decisions that misuse an assertion (docs/protocol.md,
// "Passkeys"), on a real rootgated, without a browser.
func TestPasskeyRelayRefusals(t *testing.T) {
	t.Parallel()
	hello := func(t *testing.T, sock string, m *remote.Message) (*bufio.Reader, net.Conn, *remote.Message) {
		t.Helper()
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if err := remote.WriteMessage(c, m); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		ans, err := remote.ReadMessage(br, remote.MaxDaemonLine)
		if err != nil {
			t.Fatal(err)
		}
		return br, c, ans
	}
	relayHello := &remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Capabilities: []string{remote.CapPasskey}}

	t.Run("no passkey enrolled", func(t *testing.T) {
		d := approverDaemon(t, "--passkeys", "")
		if _, _, m := hello(t, d.asock(), relayHello); m.Type != remote.MsgError || m.Message != remote.ApproverNoPasskeys {
			t.Fatalf("relay to a daemon without passkeys: %+v", m)
		}
		dir := shortDir(t)
		d2 := approverDaemon(t, "--passkeys", filepath.Join(dir, "none.json"))
		if _, _, m := hello(t, d2.asock(), relayHello); m.Type != remote.MsgError || m.Message != remote.ApproverNoPasskeys {
			t.Fatalf("relay to a daemon whose file is missing: %+v", m)
		}
	})

	t.Run("a first passkey not confirmed on root's terminal", firstUnconfirmed)

	t.Run("misused assertions", func(t *testing.T) {
		// A daemon with one passkey, made here: its key is a test key, as
		// a virtual authenticator's would be; only the refusals before
		// any signature is checked are looked at.
		dir := shortDir(t)
		keys := filepath.Join(dir, "passkeys.json")
		id := base64.RawURLEncoding.EncodeToString([]byte("test-credential-1"))
		f := &passkey.File{Version: passkey.FileVersion, RPID: "localhost", Origins: []string{"http://localhost:8443"}}
		f.Passkeys = append(f.Passkeys, passkey.Enrolled{ID: id, Name: "test", Added: time.Now()})
		f.Passkeys[0].Credential.ID = []byte("test-credential-1")
		f.Passkeys[0].Credential.PublicKey = []byte{0xa0}
		if err := f.Save(keys); err != nil {
			t.Fatal(err)
		}
		d := approverDaemon(t, "--passkeys", keys)
		if _, _, m := hello(t, d.asock(), &remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion,
			Capabilities: []string{remote.CapPasskey}, AgentSocket: "/run/agent.sock"}); m.Message != remote.ApproverPasskeyAgent {
			t.Fatalf("relay offering an agent: %+v", m)
		}
		br, c, w := hello(t, d.asock(), relayHello)
		if w.Type != remote.MsgWelcome || w.RPID != "localhost" || len(w.Credentials) != 1 || w.Credentials[0] != id || w.RuleFile != "" {
			t.Fatalf("relay's welcome: %+v", w)
		}
		// A plain approver, root's, on a terminal of its own, beside it.
		pbr, pc, pw := hello(t, d.asock(), &remote.Message{Type: remote.MsgHello, Version: remote.ProtoVersion, Name: "plain"})
		if pw.Type != remote.MsgWelcome {
			t.Fatalf("plain approver: %+v", pw)
		}
		ch := sendAsync(d.Sock, userAccount{name: "root"}, request(map[string]any{"id": "pk-misuse", "pipeline": [][]string{{"true"}}}))
		read := func(br *bufio.Reader, typ string) *remote.Message {
			for {
				m, err := remote.ReadMessage(br, remote.MaxDaemonLine)
				if err != nil {
					t.Fatal(err)
				}
				if m.Type == typ && (m.ID == "pk-misuse" || typ == remote.MsgPrompt && m.Request != nil && m.Request.ID == "pk-misuse") {
					return m
				}
			}
		}
		pr, ppr := read(br, remote.MsgPrompt), read(pbr, remote.MsgPrompt)
		if pr.Nonce == "" || ppr.Nonce != "" {
			t.Fatalf("nonces: relay %q, plain approver %q", pr.Nonce, ppr.Nonce)
		}
		yes, no := true, false
		as := &passkey.Assertion{CredentialID: id, AuthenticatorData: "AA", ClientData: "AA", Signature: "AA"}
		for _, c := range []struct {
			name string
			conn net.Conn
			br   *bufio.Reader
			m    *remote.Message
			want string
		}{
			{"a rule with a passkey approval", c, br, &remote.Message{Type: remote.MsgDecision, ID: pr.ID, Hash: pr.Hash, Approve: &yes, Assertion: as, Rule: "allow privileged true"}, remote.ApproverPasskeyRule},
			{"an assertion on a denial", c, br, &remote.Message{Type: remote.MsgDecision, ID: pr.ID, Hash: pr.Hash, Approve: &no, Assertion: as}, remote.ApproverAssertionUnasked},
			{"an assertion from a plain approver", pc, pbr, &remote.Message{Type: remote.MsgDecision, ID: ppr.ID, Hash: ppr.Hash, Approve: &yes, Assertion: as}, remote.ApproverAssertionUnasked},
		} {
			if err := remote.WriteMessage(c.conn, c.m); err != nil {
				t.Fatal(err)
			}
			if m := read(c.br, remote.MsgError); m.Message != c.want {
				t.Fatalf("%s: %q, want %q", c.name, m.Message, c.want)
			}
		}
		// The relay's denial needs no assertion.
		if err := remote.WriteMessage(c, &remote.Message{Type: remote.MsgDecision, ID: pr.ID, Hash: pr.Hash, Approve: &no}); err != nil {
			t.Fatal(err)
		}
		if m := read(br, remote.MsgAccepted); m.ID != "pk-misuse" {
			t.Fatalf("denial: %+v", m)
		}
		if r := <-ch; r.Status != wire.StatusDenied {
			t.Fatalf("request: %s", r.raw)
		}
	})
}
