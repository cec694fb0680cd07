package daemon_test

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// TestReloadFailureJournalMessage: a policy reload that fails says why
// (the file, the line and the error) in the journal entry's message
// itself, which is all `journalctl -u rootgate -p err` shows, not only in
// fields that `-o verbose` shows. The journal socket is the test's, bound
// where go-systemd looks for it, as in TestAuditJournal.
func TestReloadFailureJournalMessage(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	jdir := filepath.Join(dir, "sd")
	if err := os.MkdirAll(filepath.Join(jdir, "journal"), 0o755); err != nil {
		t.Fatal(err)
	}
	js, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(jdir, "journal", "socket"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer js.Close()
	entries := make(chan map[string]string, 1000)
	go func() {
		buf := make([]byte, 1<<20)
		for {
			n, _, err := js.ReadFromUnix(buf)
			if err != nil {
				return
			}
			if m, err := testutil.ParseJournal(buf[:n]); err == nil {
				entries <- m
			}
		}
	}()
	policyFile := filepath.Join(dir, "policy")
	if err := os.WriteFile(policyFile, []byte("allow any\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, dir)
	d.Cmd = exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$0" /run/systemd && exec "$@"`, jdir,
		rootgated, "--socket", d.Sock, "--approver-socket", "", "--runtime-dir", filepath.Join(dir, "run"),
		"--policy", policyFile, "--audit", auditPath(dir))
	d.Start()
	d.WaitReady()

	d.writePolicy("allow any echo\nalow any ls\n")
	d.hup()
	deadline := time.After(30 * time.Second)
	for {
		var e map[string]string
		select {
		case e = <-entries:
		case <-deadline:
			t.Fatalf("no journal entry for the failed reload\n%s", d.Stderr)
		}
		if e["PRIORITY"] != "3" || !strings.Contains(e["MESSAGE"], "policy reload failed") {
			continue
		}
		for _, w := range []string{policyFile + ":2", `unknown action "alow"`, "the policy in force stays"} {
			if !strings.Contains(e["MESSAGE"], w) {
				t.Errorf("MESSAGE %q lacks %q", e["MESSAGE"], w)
			}
		}
		return
	}
}
