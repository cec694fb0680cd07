package e2e

import (
	"strings"
	"testing"
)

// TestForwardAgentRelayDirNotWritable: the run that is lent the agent,
// and every other process of its uid while it runs, can reach the relay
// socket but write nothing beside it. The relay's directory was the
// run-as user's own, in the daemon's runtime directory: any process of
// that uid could fill the tmpfs under /run, which holds the daemon's
// replay window and the whole system's runtime state, for as long as
// the run lasted.
func TestForwardAgentRelayDirNotWritable(t *testing.T) {
	const nobody = 65534
	agentSock, comment := testAgent(t)
	d := approverDaemon(t)
	openToAll(t, d)
	t.Setenv("SSH_AUTH_SOCK", agentSock)
	a := startApproverArgs(t, d.asock(), 0, "--forward-agent")
	a.See("attached to rootgated")
	script := `dir=$(dirname "$SSH_AUTH_SOCK")
if echo x > "$dir/fill" 2>/dev/null; then echo wrote; fi
if mv "$SSH_AUTH_SOCK" "$dir/moved" 2>/dev/null; then echo moved; fi
ssh-add -l`
	line := request(map[string]any{"id": "agent-dir", "privileged": false, "forward_agent": true,
		"pipeline": [][]string{{"sh", "-c", script}}})
	ch := make(chan response, 1)
	go func() {
		r, err := trySendAs(d.Sock, nobody, nobody, []uint32{}, line)
		if err != nil {
			t.Error(err)
		}
		ch <- r
	}()
	a.See("agent-dir")
	a.See("n or Esc deny")
	a.Key("y")
	r := wantOK(t, <-ch)
	out := string(r.Stdout)
	if strings.Contains(out, "wrote") || strings.Contains(out, "moved") {
		t.Fatalf("the run changed the relay's directory: %q", out)
	}
	if !strings.Contains(out, comment) {
		t.Fatalf("the run could not use the forwarded agent: %q (stderr %q)", out, r.Stages[0].Stderr)
	}
}
