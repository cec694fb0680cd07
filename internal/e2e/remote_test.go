package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// TestRemoteDocs runs docs/remote.md's request command against two daemons
// on two sockets, the one ssh -L would forward standing for web1: the
// request reaches web1's daemon and is approved by web1's approver, while
// the local daemon never sees it.
func TestRemoteDocs(t *testing.T) {
	t.Parallel()
	const forwarded = "/run/user/1000/rootgate-web1.sock"
	cmdLine := docCommand(t, "ROOTGATE_SOCKET="+forwarded+" rootgate run ")
	web1 := approverDaemon(t)
	local := startDaemon(t, opts{Policy: "deny any\n"})
	a := startApprover(t, web1.asock(), 0)
	a.See("attached to rootgated")

	// The doc's line, with the forwarded path standing for web1's socket.
	cmdLine = strings.Replace(cmdLine, forwarded, web1.Sock, 1)
	cmdLine = strings.Replace(cmdLine, "rootgate run", rootgateBin+" run", 1)
	cmdLine = strings.Replace(cmdLine, "systemctl status nginx", "hostname", 1)
	out := make(chan string, 1)
	go func() {
		b, _ := exec.Command("sh", "-c", cmdLine+"; echo code=$?").CombinedOutput()
		out <- string(b)
	}()
	a.See(`check nginx on web1`)
	a.See("n or Esc deny")
	a.Key("y")
	host, _ := os.Hostname()
	if got := <-out; got != host+"\ncode=0\n" {
		t.Fatalf("doc command printed %q", got)
	}
	if strings.Contains(local.Stderr.String(), "asking for approval") || strings.Contains(local.Stderr.String(), "audit: started") {
		t.Fatal("the local daemon saw the request")
	}
	local.alive()
	if r := local.send(map[string]any{"pipeline": [][]string{{"hostname"}}}); r.Status != wire.StatusDenied {
		t.Fatalf("local daemon: %s", r.raw)
	}
}

// docCommand returns the first line of docs/remote.md that starts with
// prefix.
func docCommand(t *testing.T, prefix string) string {
	t.Helper()
	return docLine(t, "remote.md", prefix)
}

// docLine returns the first line of docs/NAME that starts with prefix.
func docLine(t *testing.T, name, prefix string) string {
	t.Helper()
	b, err := os.ReadFile("../../docs/" + name)
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		if l = strings.TrimSuffix(l, "\n"); strings.HasPrefix(l, prefix) {
			return l
		}
	}
	t.Fatalf("docs/%s has no line starting %q", name, prefix)
	return ""
}

// TestRemoteDocsSSH checks the doc's ssh commands with `ssh -G`, which
// parses a command line and prints the configuration it would use without
// connecting anywhere.
func TestRemoteDocsSSH(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/remote.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.ReplaceAll(string(b), "\\\n", "")
	var forward, approve string
	for _, l := range strings.Split(doc, "\n") {
		switch {
		case strings.HasPrefix(l, "ssh -N "):
			forward = l
		case strings.HasPrefix(l, "ssh -t "):
			approve = l
		}
	}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{forward, []string{"hostname web1", "user rootgate-agent", "exitonforwardfailure yes", "streamlocalbindunlink yes",
			"serveraliveinterval 15", "stricthostkeychecking true", "identitiesonly yes",
			"localforward /run/user/1000/rootgate-web1.sock /run/rootgate/rootgate.sock"}},
		{approve, []string{"hostname web1", "user alice", "requesttty true", "serveraliveinterval 15", "stricthostkeychecking true"}},
	} {
		if tc.line == "" {
			t.Fatal("docs/remote.md lacks an ssh command")
		}
		args := append([]string{"-G"}, strings.Fields(strings.TrimPrefix(tc.line, "ssh "))...)
		out, err := exec.Command("ssh", args...).Output()
		if err != nil {
			t.Fatalf("ssh %q: %v", args, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(string(out), "\n"+w+"\n") {
				t.Errorf("%s: ssh -G lacks %q", tc.line, w)
			}
		}
	}
}
