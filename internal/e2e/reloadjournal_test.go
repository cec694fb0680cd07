package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReloadFailureJournalMessage: a policy reload that fails says why
// (the file, the line and the error) in the journal entry's message
// itself, which is all `journalctl -u rootgate -p err` shows, not only in
// fields that `-o verbose` shows. The journal socket is the test's, bound
// where go-systemd looks for it, as in TestAuditJournal.
func TestReloadFailureJournalMessage(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	jdir, entries := fakeJournal(t, dir)
	policyFile := filepath.Join(dir, "policy")
	if err := os.WriteFile(policyFile, []byte("allow any\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := startWithJournal(t, dir, jdir, policyFile)

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
