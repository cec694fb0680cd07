package e2e

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/audit"
)

// TestPromptExeOwnNamespace (issue 27): the requester's executable as the
// kernel names it is a path in the requester's mount namespace. A
// requester in a namespace of its own bind-mounts its client over
// /usr/bin/apt-get and asks from there: the prompt must not name
// /usr/bin/apt-get as the kernel's word, but say that the path is the
// requester's own. From the daemon's namespace the path is the kernel's.
func TestPromptExeOwnNamespace(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("no unshare here")
	}
	d := startDaemon(t, opts{Policy: "ask any\n", Args: []string{"--prompt-timeout", "60s"}})
	a := attachRaw(t, d)

	fake := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount --bind "$1" /usr/bin/apt-get && exec /usr/bin/apt-get run --socket "$2" --reason fake -- true`, "sh", rootgateBin, d.Sock)
	if err := fake.Start(); err != nil {
		t.Fatal(err)
	}
	p := a.prompt()
	r := p.Request.Requester
	if r.Exe != "/usr/bin/apt-get" || !r.ExeOwnNamespace {
		t.Errorf("from its own namespace: exe %q, own namespace %v; want /usr/bin/apt-get, marked its own", r.Exe, r.ExeOwnNamespace)
	}
	text := approval.Render(p.Request)
	if !strings.Contains(text, "exe /usr/bin/apt-get, a path in its own mount namespace: its own word, not a file here") {
		t.Errorf("the prompt does not say the path is the requester's own:\n%s", text)
	}
	for _, rec := range trail(t, d.Dir, p.ID) {
		if rec.Kind == audit.KindReceived && (rec.Peer == nil || !rec.Peer.ExeOwnNamespace) {
			t.Errorf("the received record does not mark the exe as the requester's own: %+v", rec.Peer)
		}
	}
	a.decide(p, false)
	_ = fake.Wait()

	// From the daemon's own namespace, the path is the kernel's.
	same := exec.Command(rootgateBin, "run", "--socket", d.Sock, "--reason", "plain", "--", "true")
	if err := same.Start(); err != nil {
		t.Fatal(err)
	}
	p = a.prompt()
	if r := p.Request.Requester; r.Exe != rootgateBin || r.ExeOwnNamespace {
		t.Errorf("from the daemon's namespace: exe %q, own namespace %v; want %s, not marked", r.Exe, r.ExeOwnNamespace, rootgateBin)
	}
	if text := approval.Render(p.Request); strings.Contains(text, "own mount namespace") {
		t.Errorf("a requester in the daemon's namespace is marked:\n%s", text)
	}
	a.decide(p, false)
	_ = same.Wait()
}
