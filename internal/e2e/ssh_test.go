package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The accounts these tests create; the doc's names stand for them.
const (
	agentUser    = "rgtcag" // docs/remote.md's rootgate-agent
	operatorUser = "rgtcop" // docs/remote.md's alice
)

// addUser creates a test account (addAccount) with a home and a shell,
// usable for public-key logins without PAM.
func addUser(t *testing.T, name, shell string) *user.User {
	t.Helper()
	addAccount(t, name, "--create-home", "--shell", shell)
	// Without PAM, sshd refuses an account whose password is locked ("!").
	if out, err := exec.Command("usermod", "-p", "*", name).CombinedOutput(); err != nil {
		t.Fatalf("usermod %s: %v\n%s", name, err, out)
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// docBlock returns the body of docs/remote.md's fenced block of info
// string lang.
func docBlock(t *testing.T, lang string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/remote.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```\n").FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("docs/remote.md has no ```%s block", lang)
	}
	return m[1]
}

// docSSH returns docs/remote.md's ssh command starting with prefix, its
// continuation lines joined.
func docSSH(t *testing.T, prefix string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/remote.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(strings.ReplaceAll(string(b), "\\\n", ""), "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("docs/remote.md has no line starting %q", prefix)
	return ""
}

// sshHost is a real sshd on 127.0.0.1 standing for docs/remote.md's web1,
// configured as the doc says, with the agent's account and key set up as
// the doc says.
type sshHost struct {
	t         *testing.T
	dir       string
	port      int
	knownHost string     // the pinned host key file, as the doc's ~/.ssh/known_hosts.web1
	agentKey  string     // the agent's private key, as the doc's ~/.ssh/rootgate-agent
	opKey     string     // the operator's private key
	rootKey   string     // root's private key, when root may log in (sshAccounts.root)
	agent     *user.User // nil when the host has no agent's account
	operator  *user.User
	stderr    *syncBuffer
}

func keygen(t *testing.T, path string) string {
	t.Helper()
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "", "-f", path).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(path + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(pub))
}

// authorize installs line as name's authorized_keys, as sshd's StrictModes
// wants it.
func authorize(t *testing.T, u *user.User, line string) {
	t.Helper()
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := filepath.Join(u.HomeDir, ".ssh")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(file, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, file} {
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
}

// sshAccounts are the accounts a test's sshHost makes, each test its
// own names, so that tests with hosts of their own may run in parallel:
// the agent's forward-only account ("" for none) and the operator's. With
// root set, root logs in too, with a key of the test's (sshHost.rootKey).
type sshAccounts struct {
	agent, operator string
	root            bool
}

// startSSHHost starts sshd -D with the doc's sshd_config block, the agent's
// account with the doc's authorized_keys options, and the operator's
// account with a plain key.
func startSSHHost(t *testing.T) *sshHost {
	t.Helper()
	return startSSHHostWith(t, sshAccounts{agent: agentUser, operator: operatorUser})
}

// startSSHHostWith is startSSHHost with the accounts of acc.
func startSSHHostWith(t *testing.T, acc sshAccounts) *sshHost {
	t.Helper()
	h := &sshHost{t: t, dir: shortDir(t), stderr: &syncBuffer{}}
	h.operator = addUser(t, acc.operator, "/bin/sh")

	hostPub := keygen(t, filepath.Join(h.dir, "hostkey"))
	h.knownHost = filepath.Join(h.dir, "known_hosts")
	// The doc's known_hosts line: "web1 <host key>".
	kh := strings.Fields(docBlock(t, "known_hosts"))[0] + " " + hostPub + "\n"
	if err := os.WriteFile(h.knownHost, []byte(kh), 0o600); err != nil {
		t.Fatal(err)
	}

	if acc.agent != "" {
		h.agent = addUser(t, acc.agent, "/usr/sbin/nologin")
		h.agentKey = filepath.Join(h.dir, "agent")
		agentPub := keygen(t, h.agentKey)
		opts, _, ok := strings.Cut(strings.TrimSpace(docBlock(t, "authorized_keys")), " ssh-ed25519 ")
		if !ok {
			t.Fatal("docs/remote.md's authorized_keys line has no ssh-ed25519 key")
		}
		authorize(t, h.agent, opts+" "+agentPub)
	}
	h.opKey = filepath.Join(h.dir, "operator")
	authorize(t, h.operator, keygen(t, h.opKey))
	// The test's sshd takes no root login (root's own keys) unless asked.
	permitRoot, rootMatch := "no", ""
	if acc.root {
		permitRoot, rootMatch = "prohibit-password", h.rootLogin()
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := fmt.Sprintf(`Port %d
ListenAddress 127.0.0.1
HostKey %s
PidFile %s
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
AuthorizedKeysFile .ssh/authorized_keys
StrictModes yes
LogLevel VERBOSE
PermitRootLogin %s
`, h.port, filepath.Join(h.dir, "hostkey"), filepath.Join(h.dir, "sshd.pid"), permitRoot)
	sshdConfig := docBlock(t, "sshd_config")
	if acc.agent != "" {
		sshdConfig = strings.ReplaceAll(sshdConfig, "rootgate-agent", acc.agent)
	}
	cfg += sshdConfig + rootMatch
	conf := filepath.Join(h.dir, "sshd_config")
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // privilege separation
		t.Fatal(err)
	}
	if out, err := exec.Command("/usr/sbin/sshd", "-t", "-f", conf).CombinedOutput(); err != nil {
		t.Fatalf("sshd -t: %v\n%s", err, out)
	}
	cmd := exec.Command("/usr/sbin/sshd", "-D", "-e", "-f", conf)
	cmd.Stderr = h.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if t.Failed() {
			t.Logf("sshd's log:\n%s", h.stderr)
		}
	})
	waitFor(t, "sshd to listen", 20*time.Second, func() bool {
		return strings.Contains(h.stderr.String(), "Server listening")
	})
	return h
}

// rootLogin lets root log in to this sshd with a key of the test's
// (h.rootKey), as docs/passkeys.md's `ssh root@web2` does, and returns the
// Match block for the end of sshd_config that names root's authorized
// keys: a file of the test's, on a path StrictModes takes (each directory
// up to / root's and writable by root alone, which /tmp is not).
func (h *sshHost) rootLogin() string {
	h.t.Helper()
	// sshd without PAM refuses the logins of a locked account.
	if b, err := exec.Command("getent", "shadow", "root").Output(); err != nil || strings.HasPrefix(strings.SplitN(string(b), ":", 3)[1], "!") {
		h.t.Fatalf("root's password is locked (\"!\" in /etc/shadow: %v), and the test's sshd, without PAM, takes no login of a locked account: usermod -p '*' root unlocks it, still without a password", err)
	}
	dir, err := os.MkdirTemp("/run", "rgtsshroot")
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { os.RemoveAll(dir) })
	h.rootKey = filepath.Join(h.dir, "root")
	file := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(file, []byte(keygen(h.t, h.rootKey)+"\n"), 0o600); err != nil {
		h.t.Fatal(err)
	}
	return "\nMatch User root\n    AuthorizedKeysFile " + file + "\n"
}

// reach points an ssh command line of the doc at this sshd: "web1" is the
// pinned host-key name, the connection goes to 127.0.0.1:port.
func (h *sshHost) reach(line string) []string {
	args := strings.Fields(line)
	if args[0] != "ssh" {
		h.t.Fatalf("not an ssh command: %s", line)
	}
	more := []string{"-F", "none", "-o", "HostKeyAlias=web1", "-o", "HostName=127.0.0.1", "-p", strconv.Itoa(h.port), "-o", "BatchMode=yes"}
	return append(more, args[1:]...)
}

// agentArgs is the doc's forward command with local and remote sockets,
// the agent's key and the pinned host key of this test.
func (h *sshHost) agentArgs(local, remote string) []string {
	line := docSSH(h.t, "ssh -N ")
	line = strings.NewReplacer(
		"~/.ssh/rootgate-agent", h.agentKey,
		"~/.ssh/known_hosts.web1", h.knownHost,
		"/run/user/1000/rootgate-web1.sock", local,
		"/run/rootgate/rootgate.sock", remote,
		"rootgate-agent@web1", agentUser+"@web1",
	).Replace(line)
	return h.reach(line)
}

// forward runs the doc's forward command and waits until its local socket
// accepts connections. It is stopped at cleanup.
func (h *sshHost) forward(local, remote string) {
	h.t.Helper()
	h.runForward(h.agentArgs(local, remote), local, "the ssh forward's socket")
}

// runForward runs ssh with args, a forward to the local socket local,
// and waits until that socket exists. It is killed at cleanup.
func (h *sshHost) runForward(args []string, local, what string) *exec.Cmd {
	h.t.Helper()
	return h.runForwardAs(nil, args, local, what)
}

// runForwardAs is runForward with ssh run as the account u (as root when
// nil), with u's home as HOME.
func (h *sshHost) runForwardAs(u *user.User, args []string, local, what string) *exec.Cmd {
	h.t.Helper()
	cmd := exec.Command("ssh", args...)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if u != nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}
		cmd.Env = append(os.Environ(), "HOME="+u.HomeDir, "USER="+u.Username, "LOGNAME="+u.Username)
	}
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	h.t.Cleanup(func() { cmd.Process.Kill(); <-done })
	waitFor(h.t, what, 20*time.Second, func() bool {
		select {
		case <-done:
			h.t.Fatalf("ssh -N exited: %s", stderr)
		default:
		}
		_, err := os.Stat(local)
		return err == nil
	})
	return cmd
}

// openTo lets account u reach sock of a test daemon: search on its
// directory, and the socket in u's group, as group rootgate would.
func openTo(t *testing.T, d *daemonProc, u *user.User) {
	t.Helper()
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chmod(d.Dir, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(d.Sock, 0, gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.Sock, 0o660); err != nil {
		t.Fatal(err)
	}
}

// requestWithReason waits for the received record of the request with
// reason and returns its id.
func requestWithReason(t *testing.T, d *daemonProc, reason string) string {
	t.Helper()
	var id string
	waitFor(t, "the request "+reason+" in the audit log", 20*time.Second, func() bool {
		for _, r := range records(t, d.Dir) {
			if r.Request != nil && r.Request.Reason == reason {
				id = r.ID
				return true
			}
		}
		return false
	})
	return id
}

// forwardedDaemon is a test daemon with an approver on the terminal, the
// doc's sshd in front, and the doc's forward to its request socket; it
// returns the daemon and the forward's local socket.
func forwardedDaemon(t *testing.T, o opts) (*daemonProc, string) {
	h := startSSHHost(t)
	d := startDaemon(t, o)
	openTo(t, d, h.agent)
	local := filepath.Join(shortDir(t), "fwd.sock")
	h.forward(local, d.Sock)
	return d, local
}

// TestForwardedCancelWithdrawsPrompt: `rootgate run` through an ssh -L
// forward is interrupted while its prompt is shown. sshd passes the close
// on as a half-close only; the request said eof_withdraws, so the prompt is
// withdrawn and recorded so, and an approval pressed after it runs nothing.
func TestForwardedCancelWithdrawsPrompt(t *testing.T) {
	d, local := forwardedDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s"}})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	marker := filepath.Join(shortDir(t), "ran")
	const reason = "withdraw me over ssh"
	run := exec.Command(rootgateBin, "run", "--socket", local, "--reason", reason, "--", "touch", marker)
	out := &syncBuffer{}
	run.Stdout, run.Stderr = out, out
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	a.See(reason)
	a.See("n or Esc deny")
	id := requestWithReason(t, d, reason)
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	run.Wait()
	a.See("withdrawn")
	rs := waitTrail(t, d.Dir, id, "received decided")
	if v := rs[1].Decision.Verdict; v != "withdrawn" {
		t.Fatalf("decided %q, want withdrawn", v)
	}
	a.Key("y") // too late: there is nothing left to approve
	d.alive()
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the withdrawn request ran")
	}
	if got := kinds(trail(t, d.Dir, id)); got != "received decided" {
		t.Fatalf("records %q after the withdrawal", got)
	}
}

// TestForwardedCancelKillsRun: `rootgate run` through an ssh -L forward is
// interrupted while its command runs: the run is killed and recorded as
// cancelled.
func TestForwardedCancelKillsRun(t *testing.T) {
	d, local := forwardedDaemon(t, opts{Args: []string{"--kill-grace", "1s"}})
	marker := fmt.Sprintf("60.%d", 100000+time.Now().Nanosecond()%900000)
	const reason = "kill me over ssh"
	run := exec.Command(rootgateBin, "run", "--socket", local, "--reason", reason, "--", "sleep", marker)
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	// The client's own command line holds the marker too: wait for sleep.
	waitFor(t, "the run to start", 20*time.Second, func() bool {
		for _, pid := range procsWith(marker) {
			if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.HasPrefix(string(b), "sleep\x00") {
				return true
			}
		}
		return false
	})
	id := requestWithReason(t, d, reason)
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	run.Wait()
	noSurvivors(t, marker)
	defer func() {
		if t.Failed() {
			t.Logf("records of %s: %s\ndaemon log:\n%s", id, kinds(trail(t, d.Dir, id)), d.Stderr)
		}
	}()
	waitTrail(t, d.Dir, id, "received decided started cancelled")
}

// TestForwardedHalfCloseStillAnswered: a plain client that half-closes
// after its line and does not say eof_withdraws (nc -N, socat, a script)
// still gets its answer, through the forward and locally.
func TestForwardedHalfCloseStillAnswered(t *testing.T) {
	d, local := forwardedDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s"}})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")
	for _, sock := range []string{local, d.Sock} {
		reason := "half-closed through " + filepath.Base(sock)
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write([]byte(request(map[string]any{"reason": reason, "pipeline": [][]string{{"echo", "answered"}}}))); err != nil {
			t.Fatal(err)
		}
		if err := c.(*net.UnixConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		a.See(reason)
		a.See("n or Esc deny")
		a.Key("y")
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
		if r := wantOK(t, readResponse(t, c)); string(r.Stdout) != "answered\n" {
			t.Fatalf("%s: %s", sock, r.raw)
		}
	}
}

// agentSSH runs ssh with the agent's key and the pinned host key (as the
// doc's forward command has them) and the given further arguments, and
// returns what it printed and how it ended. An ssh still running after
// 20 s (a forward that was granted) is killed.
func (h *sshHost) agentSSH(stdin string, args ...string) (string, error) {
	line := "ssh -i " + h.agentKey + " -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=" + h.knownHost
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", append(h.reach(line), args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestRemoteRecipe follows docs/remote.md with a real sshd standing for
// web1: its sshd_config block, authorized_keys options, known_hosts line
// and ssh commands. The agent's key forwards the request socket and its
// request arrives; the same key runs no command, gets no shell, and an
// approver attached through its forward is refused; the operator's own
// login attaches an approver and approves.
func TestRemoteRecipe(t *testing.T) {
	h := startSSHHost(t)
	d := startDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s", "--approver", operatorUser}})
	openTo(t, d, h.agent)

	// Step 5: the operator's login attaches an approver.
	line := strings.NewReplacer(
		"~/.ssh/known_hosts.web1", h.knownHost,
		"alice@web1", operatorUser+"@web1",
		" rootgate approve", " "+rootgateBin+" approve --socket "+d.asock(),
	).Replace(docSSH(t, "ssh -t "))
	args := append([]string{"-i", h.opKey, "-o", "IdentitiesOnly=yes"}, h.reach(line)...)
	opCmd := exec.Command("ssh", args...)
	opCmd.Env = append(os.Environ(), "TERM=xterm-256color")
	op := startOnPty(t, opCmd, &syscall.SysProcAttr{Setsid: true, Setctty: true, Pdeathsig: syscall.SIGKILL})
	op.See("attached to rootgated")
	op.See("as " + operatorUser)

	// Step 4 and 6: the agent's forward, and the doc's request through it.
	local := filepath.Join(shortDir(t), "rootgate-web1.sock")
	h.forward(local, d.Sock)
	const forwarded = "/run/user/1000/rootgate-web1.sock"
	req := docCommand(t, "ROOTGATE_SOCKET="+forwarded+" rootgate run ")
	req = strings.NewReplacer(forwarded, local, "rootgate run", rootgateBin+" run", "systemctl status nginx", "id -un").Replace(req)
	out := make(chan string, 1)
	go func() {
		b, _ := exec.Command("sh", "-c", req+"; echo code=$?").CombinedOutput()
		out <- string(b)
	}()
	op.See("check nginx on web1")
	op.See("n or Esc deny")
	if !strings.Contains(op.Screen.Text(), agentUser) {
		t.Errorf("the prompt does not name the requester %s", agentUser)
	}
	op.Key("y")
	if got := <-out; got != "root\ncode=0\n" {
		t.Fatalf("the doc's request printed %q", got)
	}

	// The agent's key runs no command and gets no shell.
	for _, tc := range []struct {
		name, stdin string
		args        []string
	}{
		{"a command", "", []string{agentUser + "@web1", "id"}},
		{"a shell", "id\nexit\n", []string{"-tt", agentUser + "@web1"}},
		{"a shell without a terminal", "id\nexit\n", []string{agentUser + "@web1"}},
	} {
		got, err := h.agentSSH(tc.stdin, tc.args...)
		if err == nil || strings.Contains(got, "uid=") {
			t.Errorf("the agent's key got %s: %v\n%s", tc.name, err, got)
		}
	}

	// Nor does it offer anything on web1: remote forwards are refused.
	offered := filepath.Join(h.agent.HomeDir, "offered.sock") // a path the account may bind
	for _, spec := range []string{offered + ":" + local, "0:127.0.0.1:1"} {
		got, err := h.agentSSH("", "-N", "-o", "ExitOnForwardFailure=yes", "-R", spec, agentUser+"@web1")
		if err == nil || !strings.Contains(got, "forwarding failed") {
			t.Errorf("-R %s: %v\n%s", spec, err, got)
		}
	}
	if _, err := os.Stat(offered); err == nil {
		t.Error("the agent's key offered a socket on web1")
	}

	// The host key is pinned: another key under web1's name stops ssh.
	pinned, err := os.ReadFile(h.knownHost)
	if err != nil {
		t.Fatal(err)
	}
	kh := "web1 " + keygen(t, filepath.Join(shortDir(t), "other")) + "\n"
	if err := os.WriteFile(h.knownHost, []byte(kh), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := exec.Command("ssh", h.agentArgs(filepath.Join(shortDir(t), "x.sock"), d.Sock)...).CombinedOutput()
	if err == nil || !strings.Contains(string(got), "Host key verification failed") {
		t.Errorf("forward with a changed host key: %v\n%s", err, got)
	}
	if err := os.WriteFile(h.knownHost, pinned, 0o600); err != nil {
		t.Fatal(err)
	}

	// An approver through the agent's own forward of the approver socket
	// connects as the agent's account, which may not approve.
	alocal := filepath.Join(shortDir(t), "approver.sock")
	h.forward(alocal, d.asock())
	sneak := startApprover(t, alocal, 0)
	sneak.See(agentUser + ") may not approve")
	select {
	case <-sneak.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the approver through the agent's forward did not exit")
	}
	d.waitLog("approver refused") // the test's copy of stderr may lag
	if n := strings.Count(strings.ToLower(d.Stderr.String()), "approver refused"); n != 1 {
		t.Errorf("%d approvers refused, want 1\n%s", n, d.Stderr)
	}
}

// TestForwardedMCPCancelWithdrawsPrompt: an MCP call to `rootgate mcp`
// for a host reached through an ssh -L forward is cancelled while its
// prompt is shown: the prompt is withdrawn and recorded so.
func TestForwardedMCPCancelWithdrawsPrompt(t *testing.T) {
	d, local := forwardedDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s"}})
	a := startApprover(t, d.asock(), 0)
	a.See("attached to rootgated")

	cmd := exec.Command(rootgateBin, "mcp", "--host", "web1="+local)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "ssh-agent", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	marker := filepath.Join(shortDir(t), "ran")
	const reason = "cancel me over ssh"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "execute", Arguments: map[string]any{
			"argv": []string{"touch", marker}, "reason": reason, "host": "web1",
		}})
		done <- err
	}()
	a.See(reason)
	a.See("n or Esc deny")
	id := requestWithReason(t, d, reason)
	cancel()
	if err := <-done; err == nil {
		t.Error("a cancelled call returned no error")
	}
	a.See("withdrawn")
	rs := waitTrail(t, d.Dir, id, "received decided")
	if v := rs[1].Decision.Verdict; v != "withdrawn" {
		t.Fatalf("decided %q, want withdrawn", v)
	}
	a.Key("y")
	d.alive()
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the cancelled request ran")
	}
}
