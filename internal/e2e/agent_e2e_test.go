package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testAgent starts a real ssh-agent holding a fresh key; it returns the
// agent's socket and the key's public line.
func testAgent(t *testing.T) (sock, comment string) {
	t.Helper()
	dir := shortDir(t)
	sock = filepath.Join(dir, "agent")
	key := filepath.Join(dir, "key")
	comment = "rootgate-e2e-key"
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen (Debian package openssh-client): %v: %s", err, out)
	}
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	agent.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := agent.Start(); err != nil {
		t.Fatalf("ssh-agent: %v", err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	waitFor(t, "ssh-agent's socket", 10*time.Second, func() bool { _, err := os.Stat(sock); return err == nil })
	add := exec.Command("ssh-add", key)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v: %s", err, out)
	}
	return sock, comment
}

func TestForwardAgent(t *testing.T) {
	const nobody = 65534
	agentSock, comment := testAgent(t)
	d := approverDaemon(t)
	openToAll(t, d)
	t.Setenv("SSH_AUTH_SOCK", agentSock)
	a := startApproverArgs(t, d.asock(), 0, "--forward-agent")
	a.See("attached to rootgated")
	line := request(map[string]any{"id": "agent-1", "privileged": false, "forward_agent": true,
		"pipeline": [][]string{{"sh", "-c", "id -u; ssh-add -l; echo $SSH_AUTH_SOCK"}}})
	type result struct {
		r   response
		err error
	}
	ch := make(chan result, 1)
	go func() {
		r, err := trySendAs(d.Sock, nobody, nobody, []uint32{}, line)
		ch <- result{r, err}
	}()
	t.Cleanup(func() { // why the prompt never came, if it did not
		select {
		case res := <-ch:
			if t.Failed() {
				t.Logf("the request's answer: %v %s\ndaemon log:\n%s", res.err, res.r.raw, d.Stderr.String())
			}
		default:
		}
	})
	a.See("agent-1")
	a.See("n or Esc deny")
	a.Key("y")
	res := <-ch
	ch <- res
	if res.err != nil {
		t.Fatal(res.err)
	}
	r := wantOK(t, res.r)
	out := strings.Split(strings.TrimSpace(string(r.Stdout)), "\n")
	if len(out) != 3 || out[0] != "65534" || !strings.Contains(out[1], comment) {
		t.Fatalf("run as nobody with the forwarded agent printed %q (stderr %q)", r.Stdout, r.Stages[0].Stderr)
	}
	relaySock := out[2]
	if relaySock == agentSock || !strings.HasPrefix(relaySock, filepath.Join(d.Dir, "run", "agent")+"/") {
		t.Errorf("SSH_AUTH_SOCK of the run is %q", relaySock)
	}
	if _, err := os.Stat(filepath.Dir(relaySock)); !os.IsNotExist(err) {
		t.Errorf("the relay's directory is still there after the run: %v", err)
	}

	// A privileged request with forward_agent is refused outright.
	rp := d.send(map[string]any{"forward_agent": true, "privileged": true})
	wantError(t, rp, `forward_agent requires "privileged": false`)
}

func TestForwardAgentNeedsAnOffer(t *testing.T) {
	d := approverDaemon(t)
	a := startApprover(t, d.asock(), 0) // attached, but offers no agent
	a.See("attached to rootgated")
	wantError(t, d.send(map[string]any{"forward_agent": true, "privileged": false}),
		"no SSH agent to forward: start the approver with --forward-agent")
}
