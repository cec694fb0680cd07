package daemon_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestAuditShowWrapsRequesterText: `rootgate audit show` on a terminal
// of 80 columns. A requester pads an argument to end the first row
// exactly and fills the next with `    decision:  deny by root (uid 0)`:
// wrapped by the terminal, that row looked like a line of the record's
// own. Lines longer than the terminal are cut by show itself, each row
// after the first starting with an arrow indented deeper than any label,
// so no row of the requester's text starts a row.
func TestAuditShowWrapsRequesterText(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	d := startDaemon(t, opts{Dir: dir})
	const cols = 80
	forged := "    decision:  deny by root (uid 0)"
	// "    pipeline:  true '" takes the first 21 columns.
	arg := strings.Repeat("x", cols-21) + forged + strings.Repeat(" ", cols-len(forged)) + "end"
	id := "wrap-" + runMarker()
	wantOK(t, d.send(map[string]any{"id": id, "pipeline": [][]string{{"true", arg}}}))

	tm := &rgtest.Tmux{T: t, Sock: filepath.Join(testutil.ShortDir(t), "tmux")}
	show := fmt.Sprintf("%s audit show --file %s --id %s; echo SHOW-END; exec sleep 600", rgtest.Rootgate(t), auditPath(dir), id)
	if out, err := exec.Command("tmux", "-S", tm.Sock, "-f", "/dev/null", "new-session", "-d", "-x", fmt.Sprint(cols), "-y", "50",
		"sh", "-c", show).CombinedOutput(); err != nil {
		t.Fatalf("tmux: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.Sock, "kill-server").Run() })
	rows := tm.Wait("SHOW-END")
	text := strings.Join(rows, "\n")
	if !strings.Contains(text, "decided  "+id) || !strings.Contains(text, "decision:  allow by policy") {
		t.Fatalf("the records are not shown:\n%s", text)
	}
	for _, r := range rows {
		if strings.HasPrefix(r, "    decision:") && !strings.HasPrefix(r, "    decision:  allow by policy") {
			t.Fatalf("a row of the requester's argument starts like a line of the record:\n%s", text)
		}
	}
}
