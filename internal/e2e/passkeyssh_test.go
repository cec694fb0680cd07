package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/wire"
)

// pkSSHOperator is TestPasskeyOverSSH's operator: the account that runs
// the page and its forward on "laptop", and its login on the far host.
// No other test uses it, so that the test runs in parallel.
const pkSSHOperator = "rgpksop"

// twinEnv makes the test binary send the request line on its stdin to
// each unix socket the variable names (one a line), all from this one
// process, and print each answer as it comes, after the socket's index
// (twinSend): an agent sending the very same request to two daemons.
const twinEnv = "ROOTGATE_TEST_TWIN_SEND"

// twinSend is twinEnv's process.
func twinSend(socks string) int {
	line, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	var conns []net.Conn
	for _, s := range strings.Split(socks, "\n") {
		c, err := net.Dial("unix", s)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if _, err := c.Write(line); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		conns = append(conns, c)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			ans, _ := bufio.NewReaderSize(c, 1<<20).ReadString('\n')
			mu.Lock()
			fmt.Printf("%d %s", i, ans)
			mu.Unlock()
		})
	}
	wg.Wait()
	return 0
}

// sendTwins sends line from one process of op's (bin is selfCopy's) to
// each of socks, and returns a channel for each answer.
func sendTwins(t *testing.T, op userAccount, bin, line string, socks ...string) []chan response {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = []string{twinEnv + "=" + strings.Join(socks, "\n")}
	cmd.Stdin = strings.NewReader(line)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: op.uid, Gid: op.gid, Groups: []uint32{}}, Pdeathsig: syscall.SIGKILL}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	chs := make([]chan response, len(socks))
	for i := range chs {
		chs[i] = make(chan response, 1)
	}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			n, raw, _ := strings.Cut(sc.Text(), " ")
			i, err := strconv.Atoi(n)
			if err != nil || i < 0 || i >= len(chs) {
				continue
			}
			var r response
			r.raw = raw
			if err := json.Unmarshal([]byte(raw), &r.Response); err != nil {
				r.raw = fmt.Sprintf("%q: %v (stderr: %s)", raw, err, &stderr)
			}
			chs[i] <- r
		}
	}()
	return chs
}

// accountOf is u as a userAccount.
func accountOf(u *user.User) userAccount {
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return userAccount{name: u.Username, uid: uint32(uid), gid: uint32(gid)}
}

// TestPasskeyOverSSH is docs/passkeys.md's "Many hosts", the far host
// reached as docs/remote.md's "One approver for many hosts" says. Two
// real daemons: "near", on this machine's sockets, and "far", in a UTS
// namespace of its own (host name rgtfarhost) behind a real sshd, its
// approver socket reached only through the doc's ssh -L forward through
// the operator's login there. The passkey is enrolled on near, and far
// takes it through the doc's own lines, `rootgate passkeys export` and
// `ssh root@web2 rootgate passkeys import -`. One `rootgate web`, run by
// the operator's account, attaches to near's approver socket and to the
// forward. The agent, with that account's uid (the page process
// compromised, or the page run as the operator's own account), sends the
// very same request to both daemons from one process, so that both
// prompts are the same request with the same hash; the page shows both,
// each naming its host, and the passkey approves near's. The agent
// replays that assertion to far over the forward: refused, since far's
// prompt has its own nonce. Then the passkey approves far's on the page,
// and it runs there, its decided record holding the assertion, which
// `rootgate audit verify --passkeys` checks against far's copy of the key.
func TestPasskeyOverSSH(t *testing.T) {
	t.Parallel()
	h := startSSHHostWith(t, sshAccounts{operator: pkSSHOperator, root: true})
	op := accountOf(h.operator)
	p, listen := newPKTest(t, op)
	p.credID = operatorEnrols(t, p, listen)
	nearHost, err := os.Hostname()
	if err != nil || nearHost == farHost {
		t.Fatalf("this machine's host name %q: %v", nearHost, err)
	}

	farDir := shortDir(t)
	farKeys := filepath.Join(farDir, "passkeys.json")
	far := startDaemon(t, opts{Dir: farDir, Policy: "ask any\n", Prefix: inUTS(farHost),
		Args: []string{"--prompt-timeout", "40s", "--approver", op.name, "--passkeys", farKeys}})
	openToAll(t, far) // the operator's login reaches its approver socket, the agent its request socket
	importOverSSH(t, h, p, far)

	// The operator's forward of far's approver socket, run by the account
	// that runs the page, into a runtime directory of its own.
	local := pageAccountForward(t, h, op, far)
	p.openPage(listen, []string{p.d.asock(), local}, p.d, far)
	relayIsSSHD(t, far, op)

	// The agent: a relay of its own through the same forward, and the
	// very same request sent to both daemons.
	bin := selfCopy(t)
	agent := startAgentRelayOn(t, op, bin, local)
	const id = "pk-ssh-twin"
	answers := sendTwins(t, op, bin, request(map[string]any{"id": id, "reason": "the same on both hosts", "pipeline": [][]string{{"hostname"}}}), p.d.Sock, far.Sock)
	farPrompt := agent.prompt(id)

	// The page shows both, each from its host; the far one is reached
	// through the forward.
	nearSel := fmt.Sprintf(`div.req[data-key^=%q][data-id=%q]`, p.d.asock(), id)
	farSel := fmt.Sprintf(`div.req[data-key^=%q][data-id=%q]`, local, id)
	p.run(chromedp.WaitVisible(nearSel), chromedp.WaitVisible(farSel))
	for sel, want := range map[string]string{nearSel: "from rootgated on host " + nearHost + " at " + p.d.asock(), farSel: "from rootgated on host " + farHost + " at " + local} {
		if got := get(p, chromedp.Text(sel+" p:first-child")); got != want {
			t.Fatalf("the page says %q, want %q", got, want)
		}
		if text := get(p, chromedp.Text(sel+" pre.text")); !strings.Contains(text, "/usr/bin/hostname") {
			t.Fatalf("the page's request from %s:\n%s", want, text)
		}
	}

	// The passkey approves near's, and it runs there.
	p.press(nearSel, "approve")
	if r := answer(t, answers[0]); r.Status != wire.StatusOK || string(r.Stdout) != nearHost+"\n" {
		t.Fatalf("near's request: %s", r.raw)
	}
	signed := decidedRecord(t, p.d, id).Passkey
	if signed == nil || signed.RequestHash != farPrompt.Hash {
		t.Fatalf("near's approval %+v is not over the request far asks about (hash %s)", signed, farPrompt.Hash)
	}

	// Replayed to far over the forward, the same passkey's signature
	// over the same request is refused: far's prompt has its own nonce.
	msg := agent.approve(farPrompt, &passkey.Assertion{CredentialID: signed.Credential, AuthenticatorData: signed.AuthenticatorData, ClientData: signed.ClientData, Signature: signed.Signature, UserHandle: signed.UserHandle})
	if !strings.HasPrefix(msg, `decision refused: the passkey assertion for request "`+id+`" does not verify`) {
		t.Fatalf("near's assertion replayed to far: %q", msg)
	}

	// The passkey approves far's on the page; it runs on far.
	p.run(chromedp.WaitNotPresent(nearSel))
	p.press(farSel, "approve")
	if r := answer(t, answers[1]); r.Status != wire.StatusOK || string(r.Stdout) != farHost+"\n" {
		t.Fatalf("far's request: %s", r.raw)
	}
	farRecorded(t, far, id, p.credID, farPrompt.Hash, signed)
}

// relayIsSSHD: the page's relay attached to far, as op, is the operator's
// sshd session forwarding (sshd, or from OpenSSH 9.8 on, sshd-session).
func relayIsSSHD(t *testing.T, far *daemonProc, op userAccount) {
	t.Helper()
	attached := regexp.MustCompile(`msg="approver attached" approver_uid=` + strconv.Itoa(int(op.uid)) + ` approver_pid=(\d+) name="` + op.name + ` on web" .* passkey_relay=true`).FindStringSubmatch(far.Stderr.String())
	if attached == nil {
		t.Fatalf("far's log has no relay of %s attached:\n%s", op.name, far.Stderr)
	}
	if exe, err := os.Readlink("/proc/" + attached[1] + "/exe"); err != nil || !strings.HasPrefix(filepath.Base(exe), "sshd") {
		t.Fatalf("far's relay is pid %s, %q (%v), not sshd", attached[1], exe, err)
	}
}

// farRecorded: far's decided record of request id holds the passkey
// credID's own assertion, over the request hash with far's nonce, not
// near's (signed), and `rootgate audit verify --passkeys` checks it
// against far's copy of the key.
func farRecorded(t *testing.T, far *daemonProc, id, credID, hash string, signed *audit.Passkey) {
	t.Helper()
	rec := decidedRecord(t, far, id)
	if pk := rec.Passkey; pk == nil || pk.Credential != credID || pk.RequestHash != hash || pk.Nonce == signed.Nonce || pk.Signature == signed.Signature || !strings.HasPrefix(rec.By, "passkey admin") {
		t.Fatalf("far's decided record: %+v (near's: %+v)", rec, signed)
	}
	out, err := exec.Command(rootgateBin, "audit", "verify", "--file", auditPath(far.Dir), "--passkeys", filepath.Join(far.Dir, "passkeys.json")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "passkeys: 1 approval(s)") || !strings.Contains(string(out), " 0 broken") {
		t.Fatalf("audit verify --passkeys of far's log: %v\n%s", err, out)
	}
}

// importOverSSH runs docs/passkeys.md's export and import lines: near's
// passkeys exported as root, imported on far through root's ssh login to
// the test's sshd, from root's session there.
func importOverSSH(t *testing.T, h *sshHost, p *pkTest, far *daemonProc) {
	t.Helper()
	export := docLine(t, "passkeys.md", "rootgate passkeys export > ")
	imp := docLine(t, "passkeys.md", "ssh root@web2 rootgate passkeys import - ")
	ssh := strings.Join(h.reach("ssh -i "+h.rootKey+" -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile="+h.knownHost), " ")
	script := strings.NewReplacer(
		"rootgate passkeys export", rootgateBin+" passkeys export --file "+p.keys,
		"ssh root@web2 rootgate passkeys import -", "ssh "+ssh+" root@web2 "+rootgateBin+" passkeys import --socket "+far.asock()+" -",
	).Replace(export + "\n" + imp + "\n")
	cmd := exec.Command("sh", "-ec", script)
	cmd.Dir = t.TempDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "imported 1 passkey(s)") {
		t.Fatalf("docs/passkeys.md's export and import:\n%s\n%v: %s", script, err, out)
	}
	f, err := passkey.Load(filepath.Join(far.Dir, "passkeys.json"))
	if err != nil || len(f.Passkeys) != 1 || f.Passkeys[0].ID != p.credID {
		t.Fatalf("far's passkeys after the import: %v %+v", err, f)
	}
	var changes []string
	_ = audit.ReadAll([]string{auditPath(far.Dir)}, func(rd audit.Read) error {
		if rd.Record != nil && rd.Record.Kind == audit.KindPasskey {
			changes = append(changes, rd.Record.Passkeys.Change+" "+strings.Join(rd.Record.Passkeys.IDs, ","))
		}
		return nil
	})
	if len(changes) != 1 || changes[0] != "imported "+p.credID {
		t.Fatalf("far's passkeys_changed records: %q", changes)
	}
}

// pageAccountForward runs docs/remote.md's forward of far's approver
// socket as op, the account that runs the page (never the agent's:
// docs/remote.md), with its own copy of the operator's key and of the
// pinned host key, into a runtime directory only op may use; it returns
// the forward's local socket.
func pageAccountForward(t *testing.T, h *sshHost, op userAccount, far *daemonProc) string {
	t.Helper()
	runtime := shortDir(t)
	dotSSH := filepath.Join(h.operator.HomeDir, ".ssh")
	key, known := filepath.Join(dotSSH, "rootgate-web1"), filepath.Join(dotSSH, "known_hosts.web1")
	for from, to := range map[string]string{h.opKey: key, h.knownHost: known} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(to, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{runtime, key, known} {
		if err := os.Chown(f, int(op.uid), int(op.gid)); err != nil {
			t.Fatal(err)
		}
	}
	local := filepath.Join(runtime, "rootgate-web1.approve.sock")
	h.runForwardAs(h.operator, h.operatorForwardArgs(local, far.asock(), key, known), local, "the page account's forward")
	return local
}
