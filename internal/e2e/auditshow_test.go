package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestAuditShowWrapsRequesterText: `rootgate audit show` on a terminal
// of 80, 20 and 10 columns. A requester pads an argument to end a row
// exactly and fills the next with `    decision:  deny by root (uid 0)`:
// wrapped by the terminal, that row looked like a line of the record's
// own. Lines longer than the terminal are cut by show itself, each row
// after the first starting with an arrow (indented deeper than any label
// where there is room), so no row of the requester's text starts a row;
// and no row is wider than the terminal, which would wrap it again.
func TestAuditShowWrapsRequesterText(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	d := startDaemon(t, opts{Dir: dir})
	const (
		forged = "    decision:  deny by root (uid 0)"
		// "    pipeline:  true '" comes before the argument.
		before = len("    pipeline:  true '")
	)
	for _, cols := range []int{80, 20, 10} {
		t.Run(fmt.Sprint(cols), func(t *testing.T) {
			t.Parallel()
			// The forged text starts the first row the argument reaches
			// the start of, and the rest of its last row is blank.
			rows := (before + cols - 1) / cols
			arg := strings.Repeat("x", rows*cols-before) + forged + strings.Repeat(" ", (cols-len(forged)%cols)%cols) + "end"
			id := fmt.Sprintf("wrap%d-%s", cols, runMarker())
			wantOK(t, d.send(map[string]any{"id": id, "pipeline": [][]string{{"true", arg}}}))

			// Not on a terminal, show does not cut lines: the record's own
			// decision lines.
			plain, err := exec.Command(rgtest.Rootgate(t), "audit", "show", "--file", auditPath(dir), "--id", id).Output()
			if err != nil {
				t.Fatalf("audit show: %v", err)
			}
			own := strings.Count(string(plain), "\n    decision:")
			if own == 0 || !strings.Contains(string(plain), "    decision:  allow by policy") {
				t.Fatalf("the records are not shown:\n%s", plain)
			}

			tm := &rgtest.Tmux{T: t, Sock: filepath.Join(testutil.ShortDir(t), "tmux")}
			show := fmt.Sprintf("%s audit show --file %s --id %s; echo SHOW-END; exec sleep 600", rgtest.Rootgate(t), auditPath(dir), id)
			if out, err := exec.Command("tmux", "-S", tm.Sock, "-f", "/dev/null", "new-session", "-d", "-x", fmt.Sprint(cols), "-y", "50",
				"sh", "-c", show).CombinedOutput(); err != nil {
				t.Fatalf("tmux: %v: %s", err, out)
			}
			t.Cleanup(func() { _ = exec.Command("tmux", "-S", tm.Sock, "kill-server").Run() })
			tm.Wait("SHOW-END")
			// The whole output, as shown in rows, and with the rows the
			// terminal wrapped itself joined again.
			capture := func(args ...string) []string {
				out, err := exec.Command("tmux", append([]string{"-S", tm.Sock, "capture-pane", "-p", "-S", "-"}, args...)...).Output()
				if err != nil {
					t.Fatalf("capture-pane: %v", err)
				}
				return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
			}
			shown, lines := capture(), capture("-J")
			text := strings.Join(shown, "\n")
			for _, l := range lines {
				if termsafe.Cells(l) > cols {
					t.Fatalf("a line of %d cells on a terminal of %d columns, wrapped by the terminal:\n%s\nshown as:\n%s", termsafe.Cells(l), cols, l, text)
				}
			}
			// Each row starting like a decision line is the start of one
			// of the record's own.
			head := forged[:min(cols, len("    decision:"))]
			n := 0
			for _, r := range shown {
				if strings.HasPrefix(r, head) {
					n++
				}
			}
			if n != own {
				t.Fatalf("%d rows start with %q, the records have %d decision lines: a row of the requester's argument starts like a line of the record:\n%s", n, head, own, text)
			}
			if !strings.Contains(text, "↳") {
				t.Fatalf("no row continues a line:\n%s", text)
			}
		})
	}
}
