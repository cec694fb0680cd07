package box

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// The steps of the systemd suite that check what issue 16's run under a
// real systemd found, and the containment of runs in cgroups there.

// hostileScript is installed in the box as /usr/local/bin/box-hostile: a
// run that leaves a process behind the way a hostile command would,
// forked twice, in a session of its own (setsid) and with an environment
// of its own (env -i: no ROOTGATE_RUN tag), so that only the run's cgroup
// still holds it. It writes the escaped pid to $1.pid, then waits for $1
// to appear, then prints "done".
const hostileScript = `#!/bin/sh
rm -f "$1.pid"
setsid sh -c 'sh -c "env -i sleep 4242 & echo \$! > $0.pid"' "$1" </dev/null >/dev/null 2>&1 &
until [ -s "$1.pid" ]; do sleep 0.05; done
until [ -e "$1" ]; do sleep 0.05; done
echo done
`

// installHostile writes hostileScript into the box.
func installHostile(t *testing.T, b *Box) {
	t.Helper()
	b.sh(t, "cat > /usr/local/bin/box-hostile <<'EOF'\n"+hostileScript+"EOF\nchmod 0755 /usr/local/bin/box-hostile")
}

// escapee is the process a box-hostile run left behind.
type escapee struct {
	b    *Box
	file string // box-hostile's argument: the run ends once it exists
	pid  string
}

// waitEscaped waits for the run of box-hostile with argument file to
// have left its process behind, and returns it.
func waitEscaped(t *testing.T, b *Box, file string) *escapee {
	t.Helper()
	e := &escapee{b: b, file: file}
	waitFor(t, "the hostile run to leave a process behind", 30*time.Second, func() bool {
		out, err := b.exec("", "cat", file+".pid")
		e.pid = strings.TrimSpace(out)
		return err == nil && e.pid != ""
	})
	// It is what it set out to be: a sleep of its own session (not the
	// run's), with an empty environment. The pid is written as soon as
	// the shell forks it, before it has become env and then sleep.
	waitFor(t, "the escaped pid "+e.pid+" to be the hostile run's sleep", 30*time.Second, func() bool {
		st := e.stat(t)
		return st != nil && st.comm == "sleep"
	})
	if env := b.sh(t, "cat /proc/"+e.pid+"/environ | wc -c"); strings.TrimSpace(env) != "0" {
		t.Errorf("the escaped process has an environment of %s bytes, want none (env -i)", strings.TrimSpace(env))
	}
	return e
}

type procStat struct {
	comm       string
	ppid, sess int
}

// stat reads the escapee's /proc stat; nil once it is gone (or a zombie,
// which nothing can keep running).
func (e *escapee) stat(t *testing.T) *procStat {
	out, err := e.b.exec("", "cat", "/proc/"+e.pid+"/stat")
	if err != nil {
		return nil
	}
	i, j := strings.IndexByte(out, '('), strings.LastIndexByte(out, ')')
	if i < 0 || j < i {
		return nil
	}
	f := strings.Fields(out[j+1:])
	if len(f) < 5 || f[0] == "Z" || f[0] == "X" {
		return nil
	}
	ppid, _ := strconv.Atoi(f[1])
	sess, _ := strconv.Atoi(f[3])
	return &procStat{comm: out[i+1 : j], ppid: ppid, sess: sess}
}

// cgroup is the escapee's cgroup v2 path inside the box.
func (e *escapee) cgroup(t *testing.T) string {
	t.Helper()
	out := e.b.sh(t, "cat /proc/"+e.pid+"/cgroup")
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p
		}
	}
	t.Fatalf("no cgroup v2 line in /proc/%s/cgroup:\n%s", e.pid, out)
	return ""
}

// waitGone fails t unless the escapee is gone within a few seconds.
func (e *escapee) waitGone(t *testing.T, when string) {
	t.Helper()
	if !testutil.PollEvery(100*time.Millisecond, 5*time.Second, func() bool { return e.stat(t) == nil }) {
		ps, _ := e.b.exec("", "ps", "-o", "pid,ppid,sid,args", "-p", e.pid)
		t.Fatalf("the process the hostile run left behind (setsid, double fork, env -i) survived %s:\n%s", when, ps)
	}
}

// auditRecords is the box's audit log, parsed.
func auditRecords(t *testing.T, b *Box) []map[string]any {
	t.Helper()
	out := b.sh(t, "cat /var/log/rootgate/audit.jsonl")
	var recs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r map[string]any
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("audit log line %q: %v", l, err)
		}
		recs = append(recs, r)
	}
	return recs
}

// auditID is the id of the last request received with reason.
func auditID(t *testing.T, b *Box, reason string) string {
	t.Helper()
	id := ""
	for _, r := range auditRecords(t, b) {
		if req, _ := r["request"].(map[string]any); r["kind"] == "received" && req != nil && req["reason"] == reason {
			id, _ = r["id"].(string)
		}
	}
	if id == "" {
		t.Fatalf("no received record with reason %q in the audit log", reason)
	}
	return id
}

// auditRecord is the record of kind for request id, or nil.
func auditRecord(t *testing.T, b *Box, id, kind string) map[string]any {
	t.Helper()
	for _, r := range auditRecords(t, b) {
		if r["id"] == id && r["kind"] == kind {
			return r
		}
	}
	return nil
}

// checkUsage fails t unless m (an answer or a record's result) holds
// usage with the cgroup's CPU time.
func checkUsage(t *testing.T, what string, m map[string]any) {
	t.Helper()
	u, _ := m["usage"].(map[string]any)
	for _, k := range []string{"cpu_usec", "user_usec", "system_usec"} {
		if _, ok := u[k].(float64); !ok {
			t.Errorf("%s has no usage.%s: %v", what, k, m)
		}
	}
	if cpu, _ := u["cpu_usec"].(float64); cpu <= 0 {
		t.Errorf("%s: usage.cpu_usec %v, want the run's CPU time (> 0)", what, u["cpu_usec"])
	}
}

// stepCgroups: every run in a cgroup of its own under the real systemd.
// The daemon says at start that runs are contained; a run's processes
// are in rootgate.service/runs/ID; a process that leaves its session and
// its environment behind is killed when its run ends; the answer and the
// audit record carry the cgroup's CPU time.
func stepCgroups(t *testing.T, b *Box, ap *approver) {
	var line string
	said := func(entries []map[string]string) bool {
		return slices.ContainsFunc(entries, func(e map[string]string) bool { return strings.HasPrefix(e["MESSAGE"], "cgroup:") })
	}
	for _, e := range journalUntil(t, b, said, "-u", "rootgate.service", "SYSLOG_IDENTIFIER=rootgated") {
		if strings.HasPrefix(e["MESSAGE"], "cgroup:") {
			line = e["MESSAGE"]
		}
	}
	if !strings.HasPrefix(line, "cgroup: /sys/fs/cgroup/system.slice/rootgate.service/runs: runs contained") {
		t.Errorf("the daemon's start-up line about cgroups is %q, want it to say runs are contained in /sys/fs/cgroup/system.slice/rootgate.service/runs", line)
	}
	if got := strings.TrimSpace(b.sh(t, "cat /proc/$(systemctl show -p MainPID --value rootgate.service)/cgroup | grep ^0::")); got != "0::/system.slice/rootgate.service/daemon" {
		t.Errorf("the daemon's cgroup is %q, want 0::/system.slice/rootgate.service/daemon", got)
	}
	// The daemon bounds its own leaf's memory where the unit's cgroup has
	// the memory controller, and says why not where it has none
	// (docs/operations.md, "The daemon's own memory").
	var own string
	for _, e := range journalUntil(t, b, func(entries []map[string]string) bool {
		return slices.ContainsFunc(entries, func(e map[string]string) bool { return strings.Contains(e["MESSAGE"], "own memory") })
	}, "-u", "rootgate.service", "SYSLOG_IDENTIFIER=rootgated") {
		if strings.Contains(e["MESSAGE"], "own memory") {
			own = e["MESSAGE"]
		}
	}
	const unitCgroup = "/sys/fs/cgroup/system.slice/rootgate.service"
	if strings.Contains(b.sh(t, "cat "+unitCgroup+"/cgroup.controllers"), "memory") {
		if max := strings.TrimSpace(b.sh(t, "cat "+unitCgroup+"/daemon/memory.max")); !strings.HasPrefix(own, "the daemon's own memory is bounded") || max != "402653184" {
			t.Errorf("with the memory controller the daemon says %q and its leaf's memory.max is %s; want it bounded at 402653184 (384 MiB)", own, max)
		}
	} else if !strings.Contains(own, "not bounded") || !strings.Contains(own, "no memory controller") {
		t.Errorf("without a memory controller the daemon says %q; want it to say its memory is not bounded, and why", own)
	}

	installHostile(t, b)
	// A raw request with an id of our own, through rootgate send; its
	// answer is the protocol's response line.
	id := fmt.Sprintf("box-hostile-%d", time.Now().UnixNano())
	file := "/run/" + id
	req, _ := json.Marshal(map[string]any{
		"id": id, "time": time.Now().UTC().Format(time.RFC3339), "reason": "hostile run in a cgroup",
		"pipeline": [][]string{{"box-hostile", file}},
	})
	r := b.startAs(t, requester, string(req)+"\n", "rootgate", "send")
	ap.approve(t, "hostile run in a cgroup")
	esc := waitEscaped(t, b, file)
	if got, want := esc.cgroup(t), "/system.slice/rootgate.service/runs/"+id; got != want {
		t.Errorf("the run's escaped process is in cgroup %s, want %s", got, want)
	}
	b.sh(t, "touch "+file)
	out, err := r.wait(t)
	var ans map[string]any
	if jerr := json.Unmarshal([]byte(out), &ans); err != nil || jerr != nil {
		t.Fatalf("rootgate send of the hostile run: %v, %v, %q", err, jerr, out)
	}
	if ans["status"] != "ok" {
		t.Errorf("the hostile run's answer: %s", out)
	}
	checkUsage(t, "the answer to rootgate send", ans)
	esc.waitGone(t, "its run's end")
	// The end record of the audit log carries the usage too.
	fin := auditRecord(t, b, id, "finished")
	if fin == nil {
		t.Fatalf("no finished record for %s in the audit log", id)
	}
	res, _ := fin["result"].(map[string]any)
	checkUsage(t, "the audit log's finished record", res)
	// The daemon removes a run's cgroup once it has answered.
	waitFor(t, "the run's cgroup removed", 10*time.Second, func() bool {
		left, _ := b.exec("", "find", "/sys/fs/cgroup/system.slice/rootgate.service/runs", "-mindepth", "1", "-type", "d")
		return strings.TrimSpace(left) == ""
	})
}

// startAs starts argv as user in the box with stdin, not waiting for its
// end; its stdout alone is kept.
func (b *Box) startAs(t *testing.T, user, stdin string, argv ...string) *request {
	t.Helper()
	r := &request{cmd: b.command(append([]string{"runuser", "-u", user, "--"}, argv...)...), done: make(chan error, 1)}
	r.cmd.Stdin = strings.NewReader(stdin)
	r.cmd.Stdout = &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() { _ = r.cmd.Process.Kill() })
	return r
}

// exitCode is err's exit code, 0 for nil, -1 for a failure to run.
func exitCode(err error) int {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	}
	return -1
}

// stopCommand is what the README and docs/operations.md say stops
// rootgate.
const stopCommand = "systemctl stop rootgate.socket rootgate-approve.socket rootgate.service"

// stepStop: a request waiting for its prompt when the daemon stops is
// told "daemon stopping" and audited as ended by the daemon's stop;
// stopping the service alone with rootgate approve attached is a restart,
// as documented; the documented stop stops rootgate for good, killing
// the runs in progress whatever their processes did, and the approver
// waits without starting anything until the sockets are started again.
func stepStop(t *testing.T, b *Box, ap *approver) {
	req := b.requestAs(t, requester, "waiting when stopped", "true")
	ap.waitPrompt(t, "waiting when stopped")
	pid := mainPID(t, b)
	lost := ap.count(t, "connection to rootgated lost")
	attached := ap.count(t, "attached to rootgated")
	b.sh(t, "systemctl stop rootgate.service")
	out, err := req.wait(t)
	if err == nil || !strings.Contains(out, "daemon stopping") {
		t.Errorf("the waiting request, when the daemon stopped: %v, %q; want an error saying daemon stopping", err, out)
	}
	// Who ended it: the daemon's stop, not its requester.
	id := auditID(t, b, "waiting when stopped")
	if d, _ := auditRecord(t, b, id, "decided")["decision"].(map[string]any); d["verdict"] != "withdrawn" || d["by"] != "daemon stopping" {
		t.Errorf("the audit log's decided record of the request waiting when the daemon stopped: %v; want verdict withdrawn by daemon stopping", d)
	}
	dec := journalUntil(t, b, func(e []map[string]string) bool { return len(e) > 0 }, "-u", "rootgate.service", "REQUEST_ID="+id, "EVENT=decided")
	if len(dec) != 1 || dec[0]["DECISION"] != "withdrawn" || dec[0]["DECIDED_BY"] != "daemon stopping" {
		t.Errorf("the journal's EVENT=decided entries of that request: %v; want one, DECISION=withdrawn DECIDED_BY=daemon stopping", dec)
	}

	// The service alone: the approver re-attaches at once, which starts
	// a new daemon, and says what stops rootgate.
	ap.waitCount(t, "connection to rootgated lost", lost+1)
	ap.waitCount(t, "attached to rootgated", attached+1)
	if n := ap.count(t, "to stop rootgate, stop its sockets too: "+stopCommand); n < 1 {
		t.Errorf("the approver does not say how to stop rootgate (%q):\n%s", stopCommand, ap.screen(t))
	}
	if got := mainPID(t, b); got == pid {
		t.Errorf("after systemctl stop rootgate.service with the approver attached, the daemon is still pid %s; want a new one (a restart)", pid)
	}

	// The documented stop, with a run in progress whose process left
	// its session and environment behind.
	file := fmt.Sprintf("/run/box-stop-%d", time.Now().UnixNano())
	run := b.requestAs(t, requester, "running when stopped", "box-hostile", file)
	ap.approve(t, "running when stopped")
	esc := waitEscaped(t, b, file)
	lost = ap.count(t, "connection to rootgated lost")
	waiting := ap.count(t, "waiting for rootgated at /run/rootgate/approve.sock")
	b.sh(t, stopCommand)
	if out, err := run.wait(t); err == nil || !strings.Contains(out, "daemon stopping") {
		t.Errorf("the run in progress, when rootgate stopped: %v, %q; want an error saying daemon stopping", err, out)
	}
	esc.waitGone(t, "the documented stop ("+stopCommand+")")
	ap.waitCount(t, "connection to rootgated lost", lost+1)
	ap.waitCount(t, "waiting for rootgated at /run/rootgate/approve.sock", waiting+1)
	// The approver keeps trying (after 0.25, 0.5, 1 s, …, every 5 s at
	// most) and starts nothing: watched over its next three tries.
	var got string
	if !testutil.Holds(200*time.Millisecond, 3*time.Second, func() bool {
		got = unitStates(b, "rootgate.socket", "rootgate-approve.socket", "rootgate.service")
		return got == "inactive inactive inactive"
	}) {
		t.Fatalf("after %s with the approver attached: %q, want all inactive\napprover:\n%s", stopCommand, got, ap.screen(t))
	}
	out, err = b.exec("", "runuser", "-u", requester, "--", "rootgate", "ping")
	if exitCode(err) != 70 || !strings.Contains(out, "systemctl start rootgate.socket rootgate-approve.socket") {
		t.Errorf("rootgate ping with rootgate stopped: %v, %q; want exit 70 and the command that starts it", err, out)
	}
	attached = ap.count(t, "attached to rootgated")
	b.sh(t, "systemctl start rootgate.socket rootgate-approve.socket")
	// The approver, retrying all along, attaches again.
	ap.waitCount(t, "attached to rootgated", attached+1)
}

// stepPolicyTypo: a policy that does not parse fails the service with
// exit 78 and no restart loop, the journal says why at error level with
// the file and line, clients end within their deadline saying what to
// check, and the documented recovery brings rootgate back. The approver
// is detached meanwhile, so that only the clients' connections start the
// daemon: the first is reset once the start limit fails the sockets, the
// next is refused, and each has its hint.
func stepPolicyTypo(t *testing.T, b *Box, ap *approver) {
	ap.stop(t)
	b.sh(t, "cp /etc/rootgate/policy /root/policy.good && echo 'alow privileged hostname' >> /etc/rootgate/policy")
	line := strings.TrimSpace(b.sh(t, "wc -l < /etc/rootgate/policy"))
	want := "rootgated: error: policy /etc/rootgate/policy:" + line + `: unknown action "alow"`
	starts := func() int {
		out, _ := b.exec("", "journalctl", "-q", "-u", "rootgate.service", "-o", "cat", "MESSAGE="+want)
		return strings.Count(out, want)
	}
	if out, err := b.exec("", "systemctl", "restart", "rootgate.service"); err == nil {
		t.Errorf("systemctl restart rootgate.service with a typo in the policy succeeded:\n%s", out)
	}
	show := func() string {
		return b.sh(t, "systemctl show -p NRestarts -p Result -p ExecMainStatus -p ActiveState rootgate.service | sort")
	}
	const failed = "ActiveState=failed\nExecMainStatus=78\nNRestarts=0\nResult=exit-code\n"
	if got := show(); got != failed {
		t.Fatalf("rootgate.service after a restart with a typo in the policy:\n%swant:\n%s", got, failed)
	}
	// No restart loop: past RestartSec=2s it is still failed, never
	// restarted.
	var got string
	if !testutil.Holds(200*time.Millisecond, 3*time.Second, func() bool { got = show(); return got == failed }) {
		t.Fatalf("rootgate.service with a typo in the policy is no longer failed as it was:\n%swant:\n%s", got, failed)
	}
	// journald reads the daemon's stderr stream on its own time: wait for
	// the line rather than reading once.
	var errLines string
	testutil.PollEvery(200*time.Millisecond, 15*time.Second, func() bool {
		errLines = b.sh(t, "journalctl -q -u rootgate.service -p err -o cat")
		return strings.Contains(errLines, want)
	})
	if !strings.Contains(errLines, want) {
		all, _ := b.exec("", "journalctl", "-q", "-u", "rootgate.service", "-n", "40", "-o", "verbose")
		t.Errorf("journalctl -u rootgate -p err does not show %q:\n%s\nthe unit's last entries:\n%s", want, errLines, all)
	}
	// Clients end within their deadline and say what to check. The
	// first connection starts the daemon until the start limit fails the
	// unit and its sockets (which resets that connection); the next one is
	// refused.
	for _, argv := range [][]string{{"ping"}, {"run", "--reason", "while failed", "--", "hostname"}} {
		t0 := time.Now()
		out, err := b.exec("", append([]string{"runuser", "-u", requester, "--", "env", "ROOTGATE_ANSWER_WITHIN=2s", "rootgate"}, argv...)...)
		took := time.Since(t0)
		if exitCode(err) != 70 || !strings.Contains(out, "systemctl status rootgate") {
			t.Errorf("rootgate %s with the service failed: %v after %s, %q; want exit 70 and a hint naming systemctl status rootgate", argv[0], err, took.Round(time.Millisecond), out)
		}
		if took > 5*time.Second {
			t.Errorf("rootgate %s with the service failed took %s; want it within its deadline (ROOTGATE_ANSWER_WITHIN=2s)", argv[0], took.Round(time.Millisecond))
		}
	}
	if got := unitStates(b, "rootgate.socket", "rootgate-approve.socket", "rootgate.service"); got != "failed failed failed" {
		t.Errorf("after the start limit: rootgate.socket, rootgate-approve.socket, rootgate.service are %q, want all failed", got)
	}
	if got := show(); got != failed {
		t.Errorf("rootgate.service after the start limit:\n%swant:\n%s", got, failed)
	}
	if n := starts(); n < 1 || n > 5 {
		t.Errorf("the daemon logged the policy error %d times; want at least once and at most StartLimitBurst=5", n)
	}
	// The documented way back: fix the policy, check it, clear the failed
	// state and start the sockets.
	b.sh(t, "cp /root/policy.good /etc/rootgate/policy && rootgate policy check")
	b.sh(t, "systemctl reset-failed rootgate.service rootgate.socket rootgate-approve.socket && systemctl start rootgate.socket rootgate-approve.socket")
	if out, err := b.exec("", "runuser", "-u", requester, "--", "rootgate", "ping"); err != nil || !strings.HasPrefix(out, "pong") {
		t.Errorf("rootgate ping after the fix: %v, %q", err, out)
	}
	ap.start(t)
}
