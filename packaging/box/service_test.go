package box

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// The versions of the two packages: the first is installed, the second
// upgrades it with the daemon running.
const (
	version1    = "0.9.1-box.1"
	version2    = "0.9.2-box.1"
	debVersion1 = "0.9.1~box.1" // nfpm's Debian spelling
)

// The accounts made in the box: alice may ask (group rootgate), bob may
// not. The approver is root, in tmux under a unit of its own.
const (
	requester = "alice"
	outsider  = "bob"
)

// root is the top of the source tree.
const root = "../.."

// TestService is the end-to-end suite under a real systemd: the .deb
// installed in a booted Debian, used as an operator and an agent would.
// Its subtests run in order on one box, each building on the state the
// one before left; a failed step fails the rest with it.
func TestService(t *testing.T) {
	needTools(t)
	start := time.Now()
	t.Cleanup(func() { t.Logf("the systemd suite took %s", time.Since(start).Round(time.Second)) })

	// The packages are built while the root filesystem is made (or found).
	var (
		wg          sync.WaitGroup
		deb1, deb2  string
		buildErr    error
		buildOutput string
	)
	dist := t.TempDir()
	wg.Add(1)
	go func() {
		defer wg.Done()
		deb1, buildOutput, buildErr = buildDeb(filepath.Join(dist, "1"), version1)
		if buildErr == nil {
			deb2, buildOutput, buildErr = buildDeb(filepath.Join(dist, "2"), version2)
		}
	}()
	lower := rootfs(t, debian12)
	wg.Wait()
	if buildErr != nil {
		t.Fatalf("make packages: %v\n%s", buildErr, buildOutput)
	}
	t.Logf("box: root filesystem and packages ready after %s", time.Since(start).Round(time.Second))

	t.Run("install in a chroot without /proc", func(t *testing.T) {
		chrootInstall(t, lower, deb1)
	})

	b := boot(t, lower)
	ok := true
	step := func(name string, f func(t *testing.T)) {
		t.Helper()
		if !ok {
			t.Run(name, func(t *testing.T) { t.Fatal("not run: an earlier step failed") })
			return
		}
		ok = t.Run(name, f)
	}

	step("install", func(t *testing.T) {
		b.copyIn(t, deb1, "root/rootgate-1.deb")
		out := b.sh(t, "dpkg -i /root/rootgate-1.deb 2>&1")
		if strings.Contains(out, "systemd is not running") {
			t.Errorf("dpkg -i under a running systemd says it is not running:\n%s", out)
		}
		if got := b.sh(t, "dpkg-query -W -f '${Status} ${Version}' rootgate"); got != "install ok installed "+debVersion1 {
			t.Errorf("dpkg status %q, want installed %s", got, debVersion1)
		}
		if got := strings.Fields(b.sh(t, "systemctl is-enabled rootgate.socket rootgate-approve.socket")); strings.Join(got, " ") != "enabled enabled" {
			t.Errorf("after install the sockets are %v, want both enabled", got)
		}
		// Nothing has connected yet: the sockets listen, the daemon is not
		// running.
		if got := unitStates(b, "rootgate.socket", "rootgate-approve.socket", "rootgate.service"); got != "active active inactive" {
			t.Errorf("after install: rootgate.socket, rootgate-approve.socket, rootgate.service are %q, want active active inactive", got)
		}
		uid := requesterUID()
		b.sh(t, fmt.Sprintf("useradd -m -u %d -G rootgate %s && useradd -m %s", uid, requester, outsider))
	})

	step("sockets listen with their owners and modes", func(t *testing.T) {
		got := b.sh(t, "stat -c '%n %U:%G %a %F' /run/rootgate /run/rootgate/rootgate.sock /run/rootgate/approve.sock")
		want := "/run/rootgate root:root 755 directory\n" +
			"/run/rootgate/rootgate.sock root:rootgate 660 socket\n" +
			"/run/rootgate/approve.sock root:root 600 socket\n"
		if got != want {
			t.Errorf("the runtime directory and sockets are:\n%swant:\n%s", got, want)
		}
		// bob, outside group rootgate, cannot even connect.
		out, err := b.exec("", "runuser", "-u", outsider, "--", "rootgate", "ping")
		if err == nil || !strings.Contains(out, "permission denied") {
			t.Errorf("rootgate ping by %s (not in group rootgate): %v, %q; want permission denied", outsider, err, out)
		}
		if got := unitStates(b, "rootgate.service"); got != "inactive" {
			t.Errorf("a refused connection started the daemon: rootgate.service is %s", got)
		}
	})

	step("a group member's request activates the daemon", func(t *testing.T) {
		out, err := b.exec("", "runuser", "-u", requester, "--", "rootgate", "ping")
		if err != nil || out != "pong (rootgated "+version1+")\n" {
			t.Fatalf("rootgate ping by %s: %v, %q; want pong from rootgated %s", requester, err, out, version1)
		}
		if got := unitStates(b, "rootgate.service"); got != "active" {
			t.Errorf("after %s's ping rootgate.service is %s, want active (socket activation)", requester, got)
		}
	})

	ap := &approver{b: b}
	step("rootgate approve in tmux approves a group member's request", func(t *testing.T) {
		ap.start(t)
		req := b.requestAs(t, requester, "who am I", "id", "-un")
		ap.approve(t, "who am I")
		if out, err := req.wait(t); err != nil || out != "root\n" {
			t.Errorf("the approved run as root: %v, output %q; want root", err, out)
		}
	})

	step("every run in a cgroup of its own, killed whole at its end", func(t *testing.T) {
		stepCgroups(t, b, ap)
	})

	step("reload applies a policy change and the run in progress survives", func(t *testing.T) {
		pid := mainPID(t, b)
		long := b.longRun(t, ap, "a long run across reload")
		// A drop-in, under the shipped policy (which has no rule).
		b.sh(t, "printf 'allow privileged,env=LANG hostname\\n' | install -D -m 0644 /dev/stdin /etc/rootgate/policy.d/50-box.policy")
		b.sh(t, "systemctl reload rootgate.service")
		waitFor(t, "the daemon to log the reload", 30*time.Second, func() bool {
			out, _ := b.exec("", "journalctl", "-q", "-u", "rootgate.service", "MESSAGE=policy reloaded", "-o", "cat")
			return strings.TrimSpace(out) != ""
		})
		// The new rule decides without a prompt; bounded, in case it asks.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := b.command("runuser", "-u", requester, "--", "rootgate", "run", "--reason", "allowed by the new rule", "--", "hostname")
		out, err := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...).CombinedOutput()
		if host := b.sh(t, "hostname"); err != nil || string(out) != host {
			t.Errorf("after the reload, hostname (allowed by the new rule): %v, %q; want %q without a prompt\napprover:\n%s", err, out, host, ap.screen(t))
		}
		if got := mainPID(t, b); got != pid {
			t.Errorf("the reload restarted the daemon: MainPID %s, was %s", got, pid)
		}
		long.finish(t)
	})

	step("the journal carries the audit fields", func(t *testing.T) {
		entries := journal(t, b, "-u", "rootgate.service")
		// alice's first run (approved in tmux; her ping came before it),
		// from received to finished.
		var id string
		for _, e := range entries {
			if e["EVENT"] == "started" && e["REQUESTER_UID"] == fmt.Sprint(requesterUID()) {
				id = e["REQUEST_ID"]
				break
			}
		}
		if id == "" {
			t.Fatalf("no EVENT=started entry with REQUESTER_UID=%d in journalctl -u rootgate -o json (%d entries)", requesterUID(), len(entries))
		}
		seen := map[string]map[string]string{}
		for _, e := range entries {
			if e["REQUEST_ID"] == id {
				seen[e["EVENT"]] = e
			}
		}
		for _, ev := range []string{"received", "decided", "started", "finished"} {
			e := seen[ev]
			if e == nil {
				t.Errorf("no EVENT=%s entry for REQUEST_ID=%s", ev, id)
				continue
			}
			if e["SYSLOG_IDENTIFIER"] != "rootgated" || e["AUDIT_SEQ"] == "" || e["AUDIT_HASH"] == "" {
				t.Errorf("EVENT=%s entry lacks SYSLOG_IDENTIFIER=rootgated, AUDIT_SEQ or AUDIT_HASH: %v", ev, e)
			}
		}
		if e := seen["decided"]; e != nil && (e["DECISION"] != "allow" || e["DECIDED_BY"] == "") {
			t.Errorf("EVENT=decided: DECISION=%q DECIDED_BY=%q, want allow by the approver", e["DECISION"], e["DECIDED_BY"])
		}
		if e := seen["finished"]; e != nil && (e["OUTCOME"] == "" || e["EXIT_CODES"] == "") {
			t.Errorf("EVENT=finished: OUTCOME=%q EXIT_CODES=%q", e["OUTCOME"], e["EXIT_CODES"])
		}
		// The same request in the audit log, whose chain verifies.
		if out := b.sh(t, "rootgate audit show --id "+id); !strings.Contains(out, "finished") {
			t.Errorf("rootgate audit show --id %s:\n%s", id, out)
		}
		b.sh(t, "rootgate audit verify")
	})

	step("stop: the waiting request, its audit record, the approver, the documented stop", func(t *testing.T) {
		stepStop(t, b, ap)
	})

	step("a typo in the policy fails the service, not in a loop, and clients are told", func(t *testing.T) {
		stepPolicyTypo(t, b, ap)
	})

	step("idle exit", func(t *testing.T) {
		// A drop-in shortens --idle-exit, and --max-skew with it the
		// replay window (2 × --max-skew), which an idle exit also waits
		// out. The later flag wins, so the unit's own ExecStart= is kept,
		// whatever it says. The replay window that the daemons so far kept
		// in /run/rootgate (2 minutes long) goes, as at a reboot: rootgate
		// is stopped the documented way for that, since the approver would
		// start a daemon stopped alone again.
		execStart := ""
		for _, l := range strings.Split(b.sh(t, "cat /usr/lib/systemd/system/rootgate.service"), "\n") {
			if strings.HasPrefix(l, "ExecStart=") {
				execStart = l
			}
		}
		if execStart == "" {
			t.Fatal("no ExecStart= in rootgate.service")
		}
		attached := ap.count(t, "attached to rootgated")
		b.sh(t, "mkdir -p /etc/systemd/system/rootgate.service.d && printf '[Service]\\nExecStart=\\n"+execStart+" --idle-exit 2s --max-skew 1s\\n' > /etc/systemd/system/rootgate.service.d/idle.conf && systemctl daemon-reload && "+stopCommand+" && find /run/rootgate -maxdepth 1 -type f -delete && systemctl start rootgate.socket rootgate-approve.socket")
		t.Cleanup(func() { b.sh(t, "rm -r /etc/systemd/system/rootgate.service.d && systemctl daemon-reload") })
		// The approver re-attaches, which starts the daemon.
		ap.waitCount(t, "attached to rootgated", attached+1)
		pid := mainPID(t, b)
		lastRequest := func(reason string) {
			t.Helper()
			if out, err := b.exec("", "runuser", "-u", requester, "--", "rootgate", "run", "--reason", reason, "--", "hostname"); err != nil {
				t.Fatalf("a request before the idle exit: %v, %s", err, out)
			}
		}
		lastRequest("last before idle, approver attached")
		// An attached approver is a connection: the daemon stays past
		// --idle-exit and the replay window, both over 2 s after the
		// request.
		var got string
		if !testutil.Holds(200*time.Millisecond, 3*time.Second, func() bool { got = unitStates(b, "rootgate.service"); return got == "active" }) {
			t.Fatalf("with rootgate approve attached the daemon exited idle (rootgate.service %s); the docs say it never does", got)
		}
		// Detached, the daemon exits --idle-exit after that connection.
		t0 := time.Now()
		ap.stop(t)
		waitFor(t, "the daemon to exit idle", 30*time.Second, func() bool { return unitStates(b, "rootgate.service") == "inactive" })
		took := time.Since(t0)
		t.Logf("idle exit %s after the approver detached (--idle-exit 2s)", took.Round(100*time.Millisecond))
		if took < 2*time.Second {
			t.Errorf("the daemon exited %s after the approver detached, before --idle-exit 2s", took.Round(100*time.Millisecond))
		}
		if st := b.sh(t, "systemctl show -p ExecMainPID -p ExecMainStatus -p Result rootgate.service | sort"); st != "ExecMainPID="+pid+"\nExecMainStatus=0\nResult=success\n" {
			t.Errorf("the idle exit of pid %s:\n%swant that pid, status 0, result success", pid, st)
		}
		if got := unitStates(b, "rootgate.socket", "rootgate-approve.socket"); got != "active active" {
			t.Errorf("after the idle exit the sockets are %q, want active", got)
		}
		// The next connection starts it again; with no approver, it exits
		// --idle-exit after that request, or at the end of its replay
		// window if later.
		// (Timed from before the request: its connection ends before
		// the client's process does.)
		t0 = time.Now()
		lastRequest("last before idle")
		waitFor(t, "the daemon to exit idle", 30*time.Second, func() bool { return unitStates(b, "rootgate.service") == "inactive" })
		took = time.Since(t0)
		t.Logf("idle exit %s after the last request began (--idle-exit 2s, replay window 2s)", took.Round(100*time.Millisecond))
		if took < 2*time.Second {
			t.Errorf("the daemon exited %s after the last request, before --idle-exit 2s", took.Round(100*time.Millisecond))
		}
		if st := b.sh(t, "systemctl show -p ExecMainStatus -p Result rootgate.service | sort"); st != "ExecMainStatus=0\nResult=success\n" {
			t.Errorf("the second idle exit:\n%swant status 0, result success", st)
		}
	})

	step("upgrade with the daemon running keeps its run", func(t *testing.T) {
		ap.start(t)
		pid := mainPID(t, b)
		long := b.longRun(t, ap, "a long run across upgrade")
		b.copyIn(t, deb2, "root/rootgate-2.deb")
		out := b.sh(t, "dpkg -i /root/rootgate-2.deb 2>&1")
		if !strings.Contains(out, "the running rootgated is the old version") {
			t.Errorf("dpkg -i of the upgrade does not say the old daemon is still running:\n%s", out)
		}
		if got := mainPID(t, b); got != pid {
			t.Errorf("the upgrade restarted the daemon: MainPID %s, was %s", got, pid)
		}
		// Still in its own cgroup, which the unit's reload left alone
		// (Delegate=yes).
		if cg := long.cgroup(t); !strings.HasPrefix(cg, "0::/system.slice/rootgate.service/runs/") {
			t.Errorf("after the upgrade, the run in progress is in cgroup %q, want one in rootgate.service/runs", cg)
		}
		long.finish(t)
		if got := b.sh(t, "rootgate --version"); got != "rootgate "+version2+"\n" {
			t.Errorf("rootgate --version after the upgrade: %q", got)
		}
		if out, _ := b.exec("", "rootgate", "ping"); out != "pong (rootgated "+version1+")\n" {
			t.Errorf("the running daemon after the upgrade answers %q, want the old version until restarted", out)
		}
		attached := ap.count(t, "attached to rootgated")
		b.sh(t, "systemctl restart rootgate.service")
		ap.waitCount(t, "attached to rootgated", attached+1)
		if out, _ := b.exec("", "rootgate", "ping"); out != "pong (rootgated "+version2+")\n" {
			t.Errorf("after systemctl restart the daemon answers %q, want version %s", out, version2)
		}
		if got := unitStates(b, "rootgate.socket", "rootgate-approve.socket"); got != "active active" {
			t.Errorf("after the upgrade the sockets are %q", got)
		}
	})

	step("audit entries reach another journal through systemd-journal-upload", func(t *testing.T) {
		shipJournal(t, b)
	})

	step("remove and purge", func(t *testing.T) {
		ap.stop(t)
		mainPID(t, b) // running, as it is removed
		b.sh(t, "dpkg -r rootgate")
		if got := unitStates(b, "rootgate.socket", "rootgate-approve.socket", "rootgate.service"); got != "inactive inactive inactive" {
			t.Errorf("after dpkg -r: %q, want every unit inactive", got)
		}
		if out, err := b.exec("", "ls", "-A", "/run/rootgate"); err == nil {
			t.Errorf("/run/rootgate is still there after dpkg -r, holding: %q", out)
		}
		if st := b.sh(t, "dpkg-query -W -f '${Status}' rootgate"); st != "deinstall ok config-files" {
			t.Errorf("status after dpkg -r: %q", st)
		}
		b.sh(t, "test -f /etc/rootgate/policy && test -f /var/log/rootgate/audit.jsonl")
		b.sh(t, "dpkg -P rootgate")
		for _, d := range []string{"/etc/rootgate", "/var/log/rootgate", "/var/lib/rootgate", "/run/rootgate"} {
			if out, err := b.exec("", "ls", "-d", d); err == nil {
				t.Errorf("%s is still there after dpkg -P: %s", d, out)
			}
		}
		if out, err := b.exec("", "systemctl", "cat", "rootgate.socket"); err == nil {
			t.Errorf("systemd still knows rootgate.socket after the purge:\n%s", out)
		}
	})
}

// buildDeb runs `make packages` for the .deb only, at version, into dist.
func buildDeb(dist, version string) (deb, output string, err error) {
	cmd := exec.Command("make", "-C", root, "packages", "PACKAGERS=deb", "DIST="+dist, "BUILD="+filepath.Join(dist, "build"), "VERSION="+version)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", string(out), err
	}
	debs, _ := filepath.Glob(filepath.Join(dist, "rootgate_*.deb"))
	if len(debs) != 1 {
		return "", string(out), fmt.Errorf("want one .deb in %s, got %v", dist, debs)
	}
	return debs[0], "", nil
}

// chrootInstall installs the .deb in a chroot of the root filesystem with
// nothing mounted in it, no /proc in particular, as an image build does:
// dpkg must configure it.
func chrootInstall(t *testing.T, lower, deb string) {
	dir := overlay(t, lower)
	if _, err := os.Stat(filepath.Join(dir, "proc/self")); err == nil {
		t.Fatal("/proc is mounted in the chroot")
	}
	data, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "root/rootgate.deb"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	chroot := func(args ...string) (string, error) {
		cmd := exec.Command("chroot", append([]string{dir}, args...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := chroot("dpkg", "-i", "/root/rootgate.deb"); err != nil {
		st, _ := chroot("dpkg-query", "-W", "-f", "${Status}", "rootgate")
		t.Fatalf("dpkg -i in a chroot without /proc: %v (package status %q)\n%s", err, st, out)
	}
	if st, _ := chroot("dpkg-query", "-W", "-f", "${Status}", "rootgate"); st != "install ok installed" {
		t.Errorf("status after dpkg -i in the chroot: %q", st)
	}
	if out, err := chroot("getent", "group", "rootgate"); err != nil {
		t.Errorf("no group rootgate in the chroot: %v %s", err, out)
	}
	if out, _ := chroot("stat", "-c", "%U:%G %a", "/var/log/rootgate"); out != "root:root 700\n" {
		t.Errorf("/var/log/rootgate in the chroot: %q, want root:root 700", out)
	}
	// Nothing can be started there; the operator is told what to do.
	if out, _ := chroot("dpkg", "-i", "/root/rootgate.deb"); !strings.Contains(out, "systemctl enable --now rootgate.socket rootgate-approve.socket") {
		t.Errorf("dpkg -i in the chroot does not say how to enable the sockets:\n%s", out)
	}
}

// requesterUID is alice's uid in the box: one that differs from the
// login uid every process there inherits from the host (through nspawn),
// or the daemon would take alice for the owner of the approver's session.
func requesterUID() int {
	uid := 2001
	if b, err := os.ReadFile("/proc/self/loginuid"); err == nil && strings.TrimSpace(string(b)) == fmt.Sprint(uid) {
		uid++
	}
	return uid
}

// unitStates is systemctl is-active for units, space-separated.
func unitStates(b *Box, units ...string) string {
	out, _ := b.exec("", append([]string{"systemctl", "is-active"}, units...)...)
	return strings.Join(strings.Fields(out), " ")
}

// mainPID is rootgate.service's main pid; the service must be running.
func mainPID(t *testing.T, b *Box) string {
	t.Helper()
	pid := strings.TrimSpace(b.sh(t, "systemctl show -p MainPID --value rootgate.service"))
	if pid == "" || pid == "0" {
		t.Fatalf("rootgate.service is not running (MainPID %q)", pid)
	}
	return pid
}

// journal returns the box's journal entries selected by args, parsed
// from journalctl -o json.
func journal(t *testing.T, b *Box, args ...string) []map[string]string {
	t.Helper()
	out, err := b.output(append([]string{"journalctl", "-q", "-o", "json"}, args...)...)
	if err != nil {
		t.Fatalf("journalctl -o json %s: %v", strings.Join(args, " "), err)
	}
	return journalLines(t, out)
}

// journalUntil is journal, read again until ok holds for its entries or
// 15 s have passed (journald files entries on its own time); it returns
// the last entries read.
func journalUntil(t *testing.T, b *Box, ok func([]map[string]string) bool, args ...string) []map[string]string {
	t.Helper()
	var entries []map[string]string
	testutil.PollEvery(200*time.Millisecond, 15*time.Second, func() bool {
		entries = journal(t, b, args...)
		return ok(entries)
	})
	return entries
}

// journalLines parses journalctl -o json output, leaving out binary
// fields.
func journalLines(t *testing.T, out string) []map[string]string {
	t.Helper()
	var entries []map[string]string
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<22)
	for sc.Scan() {
		var raw map[string]any
		if err := json.Unmarshal(sc.Bytes(), &raw); err != nil {
			t.Fatalf("journalctl -o json line %q: %v", sc.Text(), err)
		}
		e := map[string]string{}
		for k, v := range raw {
			if s, ok := v.(string); ok { // binary values are arrays: skipped
				e[k] = s
			}
		}
		entries = append(entries, e)
	}
	return entries
}

// request is a `rootgate run` started in the box.
type request struct {
	cmd  *exec.Cmd
	out  strings.Builder
	done chan error
}

// requestAs starts `rootgate run --reason reason -- argv` as user in the
// box, not waiting for its end.
func (b *Box) requestAs(t *testing.T, user, reason string, argv ...string) *request {
	t.Helper()
	r := &request{cmd: b.command(append([]string{"runuser", "-u", user, "--", "rootgate", "run", "--reason", reason, "--"}, argv...)...), done: make(chan error, 1)}
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() { _ = r.cmd.Process.Kill() })
	return r
}

// wait waits for the request's end (a minute at most) and returns its
// output, stdout and stderr together.
func (r *request) wait(t *testing.T) (string, error) {
	t.Helper()
	select {
	case err := <-r.done:
		return r.out.String(), err
	case <-time.After(time.Minute):
		t.Fatalf("rootgate run %q did not end within a minute", r.cmd.Args)
		return "", nil
	}
}

// long is a run in progress: it waits for a file to appear in the box.
type long struct {
	b    *Box
	req  *request
	file string
}

// longRun starts a run, approved through ap, that goes on until finish
// and waits until it has started.
func (b *Box) longRun(t *testing.T, ap *approver, reason string) *long {
	t.Helper()
	l := &long{b: b, file: fmt.Sprintf("/run/box-go-%d", time.Now().UnixNano())}
	script := "touch " + l.file + ".started; until [ -e " + l.file + " ]; do sleep 0.05; done; echo survived"
	l.req = b.requestAs(t, requester, reason, "sh", "-c", script)
	ap.approve(t, reason)
	waitFor(t, "the long run to start", 30*time.Second, func() bool {
		_, err := b.exec("", "test", "-e", l.file+".started")
		return err == nil
	})
	return l
}

// cgroup is the cgroup v2 line of the run's shell (its command line
// starts with sh; the clients' lines, which hold the script too, do not).
func (l *long) cgroup(t *testing.T) string {
	t.Helper()
	return strings.TrimSpace(l.b.sh(t, "grep ^0:: /proc/$(pgrep -n -f '^sh -c touch "+l.file+"')/cgroup"))
}

// finish lets the run end and checks it ran to its end.
func (l *long) finish(t *testing.T) {
	t.Helper()
	l.b.sh(t, "touch "+l.file)
	if out, err := l.req.wait(t); err != nil || out != "survived\n" {
		t.Errorf("the run in progress: %v, output %q; want it to finish with \"survived\"", err, out)
	}
}

// approver is `rootgate approve` as root in a tmux session in the box,
// under a transient unit of its own, as an operator's login would be:
// started by the box's systemd, not by the test's process.
type approver struct{ b *Box }

func (a *approver) start(t *testing.T) {
	t.Helper()
	a.b.sh(t, "systemd-run --quiet --unit=rg-approver --collect -p Type=forking --setenv=TERM=xterm-256color "+
		"tmux new-session -d -s appr -x 200 -y 60 rootgate approve")
	a.waitScreen(t, "attached to rootgated")
}

func (a *approver) stop(t *testing.T) {
	t.Helper()
	a.b.sh(t, "systemctl stop rg-approver.service")
}

// screen is what the approver's window shows now.
func (a *approver) screen(t *testing.T) string {
	out, _ := a.b.exec("", "tmux", "capture-pane", "-p", "-t", "appr")
	return out
}

// count is how many times want is in the window's history and screen.
func (a *approver) count(t *testing.T, want string) int {
	out, _ := a.b.exec("", "tmux", "capture-pane", "-p", "-J", "-S", "-", "-t", "appr")
	return strings.Count(out, want)
}

// waitCount waits until want is in the window's history n times.
func (a *approver) waitCount(t *testing.T, want string, n int) {
	t.Helper()
	if !testutil.PollEvery(100*time.Millisecond, 30*time.Second, func() bool { return a.count(t, want) >= n }) {
		t.Fatalf("the approver's window did not show %q %d times within 30 s; it shows:\n%s", want, n, a.screen(t))
	}
}

// waitScreen waits until the window shows want.
func (a *approver) waitScreen(t *testing.T, want string) {
	t.Helper()
	var s string
	if !testutil.PollEvery(100*time.Millisecond, 30*time.Second, func() bool { s = a.screen(t); return strings.Contains(s, want) }) {
		t.Fatalf("the approver's window did not show %q within 30 s; it shows:\n%s", want, s)
	}
}

// waitPrompt waits until the window shows the prompt for the request
// with reason, with its keys live (the dwell over).
func (a *approver) waitPrompt(t *testing.T, reason string) {
	t.Helper()
	var s string
	if !testutil.PollEvery(100*time.Millisecond, 30*time.Second, func() bool {
		s = a.screen(t)
		return strings.Contains(s, reason) && strings.Contains(s, "y approve · n or Esc deny")
	}) {
		t.Fatalf("the approver's window did not show the prompt for %q within 30 s; it shows:\n%s", reason, s)
	}
}

// approve waits for the prompt for reason and types y.
func (a *approver) approve(t *testing.T, reason string) {
	t.Helper()
	a.waitPrompt(t, reason)
	a.b.sh(t, "tmux send-keys -t appr -l y")
}
