package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestParseSudo: each spelling of sudo's options that rootgate sudo
// accepts reads as the same request, and what it refuses is refused.
func TestParseSudo(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want sudoOptions
	}{
		{"plain", []string{"apt-get", "install", "-y", "nginx"}, sudoOptions{argv: []string{"apt-get", "install", "-y", "nginx"}}},
		{"options end at the command", []string{"-n", "ls", "-l", "-u", "x"}, sudoOptions{nonInteractive: true, argv: []string{"ls", "-l", "-u", "x"}}},
		{"--", []string{"-n", "--", "-x", "-n"}, sudoOptions{nonInteractive: true, argv: []string{"-x", "-n"}}},
		{"-nE", []string{"-nE", "env"}, sudoOptions{nonInteractive: true, preserveAll: true, argv: []string{"env"}}},
		{"-u postgres", []string{"-u", "postgres", "psql"}, sudoOptions{user: "postgres", argv: []string{"psql"}}},
		{"-upostgres", []string{"-upostgres", "psql"}, sudoOptions{user: "postgres", argv: []string{"psql"}}},
		{"-nupostgres", []string{"-nupostgres", "psql"}, sudoOptions{nonInteractive: true, user: "postgres", argv: []string{"psql"}}},
		{"--user=postgres", []string{"--user=postgres", "psql"}, sudoOptions{user: "postgres", argv: []string{"psql"}}},
		{"--user postgres", []string{"--user", "postgres", "psql"}, sudoOptions{user: "postgres", argv: []string{"psql"}}},
		{"-g and -u", []string{"-u", "www-data", "-gadm", "id"}, sudoOptions{user: "www-data", group: "adm", argv: []string{"id"}}},
		{"--group=adm", []string{"--group=adm", "id"}, sudoOptions{group: "adm", argv: []string{"id"}}},
		{"NAME=value", []string{"-n", "TZ=Europe/Paris", "LANG=", "date", "A=b"}, sudoOptions{nonInteractive: true, setEnv: []envVar{{"TZ", "Europe/Paris", true}, {"LANG", "", true}}, argv: []string{"date", "A=b"}}},
		{"-- NAME=value", []string{"--", "TZ=UTC", "=x"}, sudoOptions{setEnv: []envVar{{"TZ", "UTC", true}}, argv: []string{"=x"}}},
		{"--preserve-env=LIST", []string{"--preserve-env=LANG,TZ", "--preserve-env=TERM", "date"}, sudoOptions{preserve: []string{"LANG", "TZ", "TERM"}, argv: []string{"date"}}},
		{"--preserve-env", []string{"--preserve-env", "date"}, sudoOptions{preserveAll: true, argv: []string{"date"}}},
		{"--reason", []string{"--reason", "why", "--reason=really", "id"}, sudoOptions{reason: "really", reasonGiven: true, argv: []string{"id"}}},
		// An empty reason is a reason given (the approver is told it is
		// empty), unlike an empty account or group name.
		{"--reason ''", []string{"--reason", "", "id"}, sudoOptions{reasonGiven: true, argv: []string{"id"}}},
		{"--reason=", []string{"--reason=", "id"}, sudoOptions{reasonGiven: true, argv: []string{"id"}}},
		{"-S", []string{"-S", "id"}, sudoOptions{password: true, argv: []string{"id"}}},
		{"-nS", []string{"-nSu", "nobody", "id"}, sudoOptions{nonInteractive: true, password: true, user: "nobody", argv: []string{"id"}}},
		{"--stdin", []string{"--stdin", "id"}, sudoOptions{password: true, argv: []string{"id"}}},
		{"-H", []string{"-H", "pip", "install", "x"}, sudoOptions{argv: []string{"pip", "install", "x"}}},
		{"-v", []string{"-v"}, sudoOptions{validate: true, argv: []string{}}},
		{"-k CMD", []string{"-k", "id"}, sudoOptions{forget: true, argv: []string{"id"}}},
		{"-l CMD", []string{"-l", "id"}, sudoOptions{list: true, argv: []string{"id"}}},
		{"a shell with -c", []string{"bash", "-c", "echo hi"}, sudoOptions{argv: []string{"bash", "-c", "echo hi"}}},
		{"a shell with -ec", []string{"sh", "-ec", "echo hi"}, sudoOptions{argv: []string{"sh", "-ec", "echo hi"}}},
		{"a shell with a script", []string{"/bin/sh", "/usr/local/sbin/x.sh"}, sudoOptions{argv: []string{"/bin/sh", "/usr/local/sbin/x.sh"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := parseSudo(c.args)
			if err != nil {
				t.Fatalf("parseSudo(%q): %v", c.args, err)
			}
			if got.argv == nil {
				got.argv = []string{}
			}
			if c.want.argv == nil {
				c.want.argv = []string{}
			}
			if !sameOptions(got, c.want) {
				t.Errorf("parseSudo(%q) =\n%+v\nwant\n%+v", c.args, got, c.want)
			}
		})
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-i"}, "sudo -i: "},
		{[]string{"-ni"}, "sudo -i: "},
		{[]string{"--login"}, "sudo -i: "},
		{[]string{"-s"}, "sudo -s: "},
		{[]string{"--shell", "id"}, "sudo -s: "},
		{[]string{"-e", "/etc/hosts"}, "sudo -e: "},
		{[]string{"--edit", "/etc/hosts"}, "sudo -e: "},
		{[]string{"su"}, "sudo su: "},
		{[]string{"-u", "postgres", "su", "-c", "id"}, "sudo su: "},
		{[]string{"/bin/su", "-"}, "sudo su: "},
		{[]string{"bash"}, "sudo bash: "},
		{[]string{"bash", "-l"}, "sudo bash: "},
		{[]string{"--", "zsh", "--login", "-i"}, "sudo zsh: "},
		{[]string{"-A", "id"}, "sudo: unknown option -A; "},
		{[]string{"--stdin=x", "id"}, "sudo --stdin takes no value"},
		{[]string{"-nX", "id"}, "sudo: unknown option -X; "},
		{[]string{"-p", "", "id"}, "sudo: unknown option -p; "},
		{[]string{"--askpass", "id"}, "sudo: unknown option --askpass; "},
		{[]string{"-n\x1b[2J", "id"}, `sudo: unknown option $'-\x1b'; `},
		{[]string{"-u"}, "sudo -u needs a user name"},
		// An empty account or group name is never a run as root.
		{[]string{"-u", "", "id"}, "sudo -u needs a user name, not an empty one"},
		{[]string{"-nu", "", "id"}, "sudo -u needs a user name, not an empty one"},
		{[]string{"--user=", "id"}, "sudo --user needs a user name, not an empty one"},
		{[]string{"--user", "", "id"}, "sudo --user needs a user name, not an empty one"},
		{[]string{"-g", "", "id"}, "sudo -g needs a group name, not an empty one"},
		{[]string{"--group=", "id"}, "sudo --group needs a group name, not an empty one"},
		{[]string{"--group", "", "id"}, "sudo --group needs a group name, not an empty one"},
		{[]string{"--policy=", "-l"}, "sudo --policy needs a file, not an empty one"},
		{[]string{"--group"}, "sudo --group needs a group name"},
		{[]string{"--non-interactive=yes", "id"}, "sudo --non-interactive takes no value"},
	} {
		_, err := parseSudo(c.args)
		var r *sudoRefusal
		if !errors.As(err, &r) || !strings.HasPrefix(r.msg, c.want) || strings.ContainsAny(r.msg, "\n\x1b") {
			t.Errorf("parseSudo(%q): %v, want a one-line refusal starting %q", c.args, err, c.want)
		}
	}
}

func sameOptions(a, b sudoOptions) bool {
	return a.nonInteractive == b.nonInteractive && a.password == b.password && a.user == b.user && a.group == b.group &&
		a.preserveAll == b.preserveAll && slices.Equal(a.preserve, b.preserve) &&
		a.reason == b.reason && a.reasonGiven == b.reasonGiven && a.validate == b.validate &&
		a.forget == b.forget && a.list == b.list && a.help == b.help && a.version == b.version &&
		slices.Equal(a.argv, b.argv) && slices.Equal(a.setEnv, b.setEnv)
}

// sudoCmd is the real rootgate binary called as sudo (through a symlink of
// that name, as /usr/lib/rootgate/agent-bin/sudo is), asking daemon d.
func sudoCmd(t *testing.T, d *rgtest.Daemon, args ...string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sudo")
	if err := os.Symlink(rgtest.Rootgate(t), bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "ROOTGATE_SOCKET=" + d.Sock}
	return cmd
}

// auditKinds counts the records of each kind in d's audit log.
func auditKinds(t *testing.T, d *rgtest.Daemon) map[string]int {
	t.Helper()
	data, err := os.ReadFile(rgtest.AuditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, line := range strings.Split(string(data), "\n") {
		if _, rest, ok := strings.Cut(line, `"kind":"`); ok {
			k, _, _ := strings.Cut(rest, `"`)
			kinds[k]++
		}
	}
	return kinds
}

// TestSudoNonInteractiveNeverAsks: sudo -n with an approver attached who
// would be asked: a command the policy allows runs; one it does not allow
// is denied at once, and no person is ever shown it (the daemon records no
// decision for it: no prompt was put up and withdrawn). Without -n, the
// same command is put to the approver.
func TestSudoNonInteractiveNeverAsks(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "allow privileged id ...\n", Args: []string{"--prompt-timeout", "120s"}})
	a := rgtest.StartApprover(t, d.ApproverSock(), 0)
	a.See("attached to rootgated")

	out, err := sudoCmd(t, d, "-n", "id", "-un").Output()
	if err != nil || string(out) != "root\n" {
		t.Fatalf("sudo -n id -un: %q, %v", out, err)
	}

	before := auditKinds(t, d)
	// Its standard input is a pipe that never ends, as some agents' tools
	// leave it: -n waits for that no more than for a person.
	stderr, err := withStdinOpen(t, sudoCmd(t, d, "-n", "ls", "/rootgate-sudo-n"), func() string {
		return "sudo -n ls still waits after 15s (the prompt times out in 120s):\n" + a.Screen.Text()
	})
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitDenied {
		t.Fatalf("sudo -n ls: %v, want exit %d\n%s", err, exitDenied, stderr)
	}
	if !strings.Contains(stderr, "rootgate: denied: sudo -n: ") {
		t.Errorf("stderr %q", stderr)
	}
	after := auditKinds(t, d)
	if after["decided"] != before["decided"] || after["started"] != before["started"] {
		t.Errorf("sudo -n ls was decided or run: audit kinds before %v, after %v", before, after)
	}
	if strings.Contains(a.Screen.Text(), "rootgate-sudo-n") {
		t.Errorf("the approver was shown the request:\n%s", a.Screen.Text())
	}

	// Without -n the approver is asked: the denial above was -n's.
	cmd := sudoCmd(t, d, "ls", "/rootgate-sudo-n")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	a.See("/rootgate-sudo-n")
}

// TestSudoStdin: standard input is read to its end before the request is
// sent; while a pipe stays open, rootgate sudo says on stderr that it waits
// for it, and sends what came once it ends, dated then: a request dated
// when rootgate sudo started would be refused as too old. A terminal is
// not read: the command gets nothing and rootgate sudo does not wait for
// the terminal.
func TestSudoStdin(t *testing.T) {
	t.Parallel()
	const maxSkew = 3 * time.Second
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "allow privileged cat\nallow privileged wc -c\n", Args: []string{"--max-skew", maxSkew.String()}})

	t.Run("a pipe held open", func(t *testing.T) {
		cmd := sudoCmd(t, d, "cat")
		w, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stdout, stderr testutil.SyncBuffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		start := time.Now()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { cmd.Process.Kill() })
		if _, err := w.Write([]byte("first\n")); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the notice that stdin has not ended", 30*time.Second, func() bool {
			return strings.Contains(stderr.String(), "rootgate: waiting: standard input has not ended: rootgate sudo sends it with the request; if the command reads none, give it </dev/null\n")
		})
		// Past the daemon's time window, counted from the start.
		testutil.WaitFor(t, "the time window since the start to pass", 30*time.Second, func() bool {
			return time.Since(start) > maxSkew+time.Second
		})
		if _, err := w.Write([]byte("second\n")); err != nil {
			t.Fatal(err)
		}
		w.Close()
		select {
		case err := <-done:
			if err != nil || stdout.String() != "first\nsecond\n" {
				t.Fatalf("sudo cat: %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("sudo cat did not end after its stdin did: stderr %q", stderr.String())
		}
	})

	t.Run("a terminal", func(t *testing.T) {
		cmd := sudoCmd(t, d, "wc", "-c")
		cmd.Env = append(cmd.Env, "TERM=xterm-256color")
		a := rgtest.StartOnPty(t, cmd, &syscall.SysProcAttr{Setsid: true, Setctty: true})
		select {
		case <-a.Done():
		case <-time.After(30 * time.Second):
			t.Fatalf("sudo wc -c on a terminal waited for it:\n%s", a.Screen.Text())
		}
		if code := a.Cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("sudo wc -c on a terminal: exit %d\n%s", code, a.Screen.Text())
		}
		testutil.WaitFor(t, "wc -c to print 0", 30*time.Second, func() bool { return strings.TrimSpace(a.Screen.Text()) == "0" })
	})
}

// TestSudoShimAsAgentAccount: the secure setup end to end. The agent runs
// under its own account (nobody) with the packaged shim's directory first
// in its PATH, and types sudo into a child shell as its Bash tool does;
// the operator approves from a terminal of their own. The prompt shows
// the command and, with no reason given, which process asked, as the
// requester's words; y runs it as root, n denies it with 77.
func TestSudoShimAsAgentAccount(t *testing.T) {
	t.Parallel()
	dir := testutil.ShortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil { // the agent's shim lives here
		t.Fatal(err)
	}
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: dir, Policy: "deny any rm ...\n", Args: []string{"--prompt-timeout", "60s"}})
	if err := os.Chmod(d.Sock, 0o666); err != nil { // the agent account may ask
		t.Fatal(err)
	}
	agentBin := filepath.Join(dir, "agent-bin")
	if err := os.Mkdir(agentBin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(rgtest.Rootgate(t), filepath.Join(agentBin, "sudo")); err != nil {
		t.Fatal(err)
	}
	a := rgtest.StartApprover(t, d.ApproverSock(), 0)
	a.See("attached to rootgated")

	agent := func(script string) (*exec.Cmd, *testutil.SyncBuffer, chan error) {
		cmd := exec.Command("/bin/sh", "-c", script)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=" + agentBin + ":/usr/bin:/bin", "HOME=/nonexistent", "ROOTGATE_SOCKET=" + d.Sock}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
		out := &testutil.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { cmd.Process.Kill() })
		return cmd, out, done
	}
	wait := func(what string, done chan error, out *testutil.SyncBuffer) error {
		t.Helper()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not end:\n%s", what, out)
			return nil
		}
	}

	_, out, done := agent("sudo id -un; echo code=$?")
	a.See("id -un")
	a.SeeRe(regexp.MustCompile(`no reason given \(rootgate sudo, run by pid \d+ sh, as the requester\s*(┊\s*)?names it\)`))
	a.See("y approve · n or Esc deny")
	a.Key("y")
	if err := wait("sudo id -un", done, out); err != nil || out.String() != "root\ncode=0\n" {
		t.Fatalf("the agent's sudo id -un: %v\n%s", err, out)
	}

	// The policy file is root's alone here: -l says it cannot read it.
	_, out, done = agent("sudo -l --policy " + filepath.Join(dir, "policy"))
	if err := wait("sudo -l", done, out); err != nil || !strings.Contains(out.String(), "The policy cannot be read here (policy: open "+filepath.Join(dir, "policy")+": permission denied).\n") {
		t.Fatalf("the agent's sudo -l: %v\n%s", err, out)
	}

	_, out, done = agent("sudo ls /root; echo code=$?")
	a.See("ls /root")
	a.See("n or Esc deny")
	a.Key("n")
	if err := wait("sudo ls /root", done, out); err != nil || !regexp.MustCompile(`^rootgate: denied: denied by operator root on pts/\d+\ncode=77\n$`).MatchString(out.String()) {
		t.Fatalf("the agent's denied sudo ls /root: %v\n%s", err, out)
	}
}

// TestSudoRunAsAccount: sudo -u, in each spelling, through the agent-bin
// shim in a child shell, runs the command as that account with that
// account's environment, where a policy rule scoped to the account allows
// it; the same command as root falls outside that rule (with -n: denied at
// once), and an unknown account is the daemon's error.
func TestSudoRunAsAccount(t *testing.T) {
	t.Parallel()
	const account = "rgsudo1"
	addRunAsAccount(t, account)
	u, err := user.Lookup(account)
	if err != nil {
		t.Fatal(err)
	}
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: testutil.ShortDir(t), Policy: "allow privileged,runas=" + account + " id -un\nallow privileged,runas=" + account + " printenv USER HOME LOGNAME\n"})
	agentBin := t.TempDir()
	if err := os.Symlink(rgtest.Rootgate(t), filepath.Join(agentBin, "sudo")); err != nil {
		t.Fatal(err)
	}
	shell := func(script string) (stdout, stderr string) {
		t.Helper()
		cmd := exec.Command("/bin/sh", "-c", script)
		// A directory the account may enter: the daemon refuses a run
		// whose account cannot enter its cwd, and a checkout in a home
		// of mode 0750 (Ubuntu's default) is not one.
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=" + agentBin + ":/usr/bin:/bin", "ROOTGATE_SOCKET=" + d.Sock}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("sh -c %q: %v\n%s", script, err, &e)
		}
		return o.String(), e.String()
	}
	for _, form := range []string{"-u " + account, "-u" + account, "--user=" + account, "--user " + account, "-nu " + account, "-u '#" + u.Uid + "'"} {
		if out, errs := shell("sudo " + form + " id -un; echo code=$?"); out != account+"\ncode=0\n" {
			t.Errorf("sudo %s id -un: %q, stderr %q", form, out, errs)
		}
	}
	if out, errs := shell("sudo -u " + account + " printenv USER HOME LOGNAME"); out != account+"\n"+u.HomeDir+"\n"+account+"\n" {
		t.Errorf("sudo -u %s printenv: %q, stderr %q; want the account's environment", account, out, errs)
	}
	if out, errs := shell("sudo -n id -un; echo code=$?"); out != "code=77\n" || !strings.Contains(errs, "sudo -n: the policy does not allow this without asking a person") {
		t.Errorf("sudo -n id -un as root, outside the rule for %s: %q, stderr %q", account, out, errs)
	}
	if out, errs := shell("sudo -u rgsudo-none id -un; echo code=$?"); out != "code=70\n" || !strings.HasPrefix(errs, "rootgate: error: ") {
		t.Errorf("sudo -u an unknown account: %q, stderr %q", out, errs)
	}
}

// TestSudoPromptTimeout: a request no one decides in time ends rootgate
// sudo with rootgate run's timeout code, 124, and the daemon's words.
func TestSudoPromptTimeout(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "1s"}})
	a := rgtest.StartApprover(t, d.ApproverSock(), 0)
	a.See("attached to rootgated")
	cmd := sudoCmd(t, d, "ls", "/rootgate-sudo-timeout")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitTimeout || stderr.String() != "rootgate: timeout: no approval decision within 1s\n" {
		t.Fatalf("sudo ls with no decision: %v, stderr %q", err, &stderr)
	}
}

// TestSudoNonInteractiveWithdrawsWhenAsked: sudo -n whose check the policy
// allowed, but whose run the daemon puts to a person all the same (the
// policy was reloaded in between, here while sudo read its standard
// input), withdraws the request at once and is denied: it never waits
// for the person.
func TestSudoNonInteractiveWithdrawsWhenAsked(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "allow privileged cat\n", Args: []string{"--prompt-timeout", "120s"}})
	a := rgtest.StartApprover(t, d.ApproverSock(), 0)
	a.See("attached to rootgated")

	cmd := sudoCmd(t, d, "-n", "cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	var stdout, stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })

	audit := func() string {
		b, _ := os.ReadFile(rgtest.AuditPath(d.Dir))
		return string(b)
	}
	testutil.WaitFor(t, "the check request in the audit log", 30*time.Second, func() bool { return strings.Contains(audit(), `"check":true`) })
	// The policy changes: cat is no longer allowed.
	if err := os.WriteFile(filepath.Join(d.Dir, "policy"), []byte("ask any\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the reload in the audit log", 30*time.Second, func() bool { return strings.Contains(audit(), `"kind":"policy_reload"`) })
	if _, err := stdin.Write([]byte("data\n")); err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	select {
	case err = <-exited:
	case <-time.After(15 * time.Second):
		t.Fatalf("sudo -n still waits after 15s (the prompt times out in 120s):\n%s", a.Screen.Text())
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != exitDenied || stdout.String() != "" ||
		stderr.String() != "rootgate: denied: sudo -n: rootgated put the request to a person, so it was withdrawn: -n does not wait for one\n" {
		t.Fatalf("sudo -n cat: %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
	}
	testutil.WaitFor(t, "the withdrawal in the audit log", 30*time.Second, func() bool { return strings.Contains(audit(), `"verdict":"withdrawn"`) })
}

// TestSudoNonInteractiveDeniedAtOnce: sudo -n whose check a deny rule
// answers reports the denial at once, in the words and with the exit code
// of the daemon's own denial (the same command without -n is denied so),
// without reading its standard input, here a pipe held open as some
// agents' tools leave it, and without sending a run: the daemon records
// only the check.
func TestSudoNonInteractiveDeniedAtOnce(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "deny any rm ...\n"})

	// The daemon's own denial of the run, stdin closed.
	cmd := sudoCmd(t, d, "rm", "/rootgate-sudo-n-deny")
	var daemonSaid bytes.Buffer
	cmd.Stderr = &daemonSaid
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != exitDenied ||
		daemonSaid.String() != "rootgate: denied: denied by policy rule at "+d.Dir+"/policy:1: deny any rm ...\n" {
		t.Fatalf("sudo rm: %v, stderr %q", err, &daemonSaid)
	}

	before := auditKinds(t, d)
	stderr, err := withStdinOpen(t, sudoCmd(t, d, "-n", "rm", "/rootgate-sudo-n-deny"), func() string {
		return "sudo -n rm under a deny rule still waits after 15s, its stdin open"
	})
	if !errors.As(err, &exit) || exit.ExitCode() != exitDenied || stderr != daemonSaid.String() {
		t.Fatalf("sudo -n rm: %v, stderr %q; want exit %d and the daemon's words %q", err, stderr, exitDenied, &daemonSaid)
	}
	after := auditKinds(t, d)
	if after["received"] != before["received"]+1 || after["decided"] != before["decided"] {
		t.Errorf("sudo -n rm sent more than its check: audit kinds before %v, after %v", before, after)
	}
}

// TestSudoNonInteractiveGrant: a person gives a standing grant at a real
// `rootgate approve` for a sudo command; sudo -n of exactly that command
// then runs it without asking (its check sees the grant, as the run
// does), sudo -l names the grant, and sudo -n of another command is still
// denied at once without the approver being shown it.
func TestSudoNonInteractiveGrant(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Policy: "deny any rm ...\n", Args: []string{"--prompt-timeout", "120s"}})
	a := rgtest.StartApprover(t, d.ApproverSock(), 0)
	a.See("attached to rootgated")

	cmd := sudoCmd(t, d, "echo", "granted-sudo-n")
	var stdout, stderr testutil.SyncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill() })
	a.See("echo granted-sudo-n")
	a.See("y approve ·") // shown once keys count
	a.Key("g")
	a.See("STANDING GRANT for 15 min")
	a.See("GRANT: y approve and grant for 15 min")
	a.Key("y")
	select {
	case err := <-done:
		if err != nil || stdout.String() != "granted-sudo-n\n" {
			t.Fatalf("sudo echo, granted: %v, stdout %q, stderr %q", err, stdout.String(), stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("sudo echo did not end once granted:\n%s", a.Screen.Text())
	}
	a.See("approved, with a standing grant for 15 min")

	cmd = sudoCmd(t, d, "-n", "echo", "granted-sudo-n")
	var nOut, nErr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &nOut, &nErr
	if err := cmd.Run(); err != nil || nOut.String() != "granted-sudo-n\n" {
		t.Fatalf("sudo -n echo, granted: %v, stdout %q, stderr %q", err, &nOut, &nErr)
	}
	out, err := sudoCmd(t, d, "-l", "echo", "granted-sudo-n").Output()
	if err != nil || !regexp.MustCompile(`^allow: standing grant g1 allows this request without asking, until \S+ \(standing grant g1 from root \(uid 0\) on \S+\)\n$`).Match(out) {
		t.Fatalf("sudo -l echo, granted: %v, %q", err, out)
	}
	data, err := os.ReadFile(rgtest.AuditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	// The -n run was decided by the grant, as its check said.
	if !strings.Contains(string(data), `"kind":"decided",`) || !strings.Contains(string(data), `"verdict":"allow","by":"grant g1 from root on `) {
		t.Errorf("no run was decided by grant g1:\n%s", data)
	}

	cmd = sudoCmd(t, d, "-n", "echo", "not-granted-sudo-n")
	var oErr bytes.Buffer
	cmd.Stderr = &oErr
	var exit *exec.ExitError
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != exitDenied ||
		oErr.String() != "rootgate: denied: sudo -n: the policy does not allow this without asking a person, nor does a standing grant, and -n does not wait for one\n" {
		t.Fatalf("sudo -n echo, not granted: %v, stderr %q", err, &oErr)
	}
	if strings.Contains(a.Screen.Text(), "not-granted-sudo-n") {
		t.Errorf("the approver was shown the command no grant covers:\n%s", a.Screen.Text())
	}
}

// withStdinOpen runs cmd with its standard input a pipe held open, as
// some agents' tools leave it, and returns how it exited and what it
// wrote to stderr; if it is still running after 15 s, it kills it and
// fails with stuck's words.
func withStdinOpen(t *testing.T, cmd *exec.Cmd, stuck func() string) (stderr string, err error) {
	t.Helper()
	var out testutil.SyncBuffer
	cmd.Stderr = &out
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer stdin.Close()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
	case <-time.After(15 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("%s; stderr %q", stuck(), out.String())
	}
	return out.String(), err
}
