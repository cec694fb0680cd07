package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPolicyPlaceholders: a real rootgated with allow rules written with
// typed placeholders runs what they admit without asking, and puts to a
// person (here: denied, nobody to ask) each variant the requester slips an
// option or another spelling of a number into, which the glob rules they
// replace ([a-z0-9]*, [0-9]*) would have let through.
func TestPolicyPlaceholders(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	lines := filepath.Join(dir, "lines")
	if err := os.WriteFile(lines, []byte("1\n2\n3\n4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{Policy: "allow privileged journalctl -u {unit} -n {int<=500}\n" +
		"allow privileged head -n {int<=2} " + lines + "\n" +
		"allow privileged head {-q|--quiet} -n 1 " + lines + "\n"})

	t.Run("admitted requests run without a prompt", func(t *testing.T) {
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"head", "-n", "2", lines}}}))
		if string(r.Stdout) != "1\n2\n" {
			t.Fatalf("head -n 2 printed %q", r.Stdout)
		}
		r = wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"head", "--quiet", "-n", "1", lines}}}))
		if string(r.Stdout) != "1\n" {
			t.Fatalf("head --quiet -n 1 printed %q", r.Stdout)
		}
		r = wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"journalctl", "-u", "nginx.service", "-n", "500"}}}))
		if len(r.Stages) != 1 {
			t.Fatalf("journalctl did not run: %s", r.raw)
		}
	})
	for _, argv := range [][]string{
		{"journalctl", "-u", "nginx", "-n", "500", "--file=/etc/shadow"},
		{"journalctl", "-u", "-fu", "-n", "5"},
		{"journalctl", "-u", "--file=/etc/shadow", "-n", "5"},
		{"journalctl", "-u", "nginx", "-n", "5000"},
		{"journalctl", "-u", "nginx", "-n", "0x10"},
		{"head", "-n", "-1", lines},           // all but the last line
		{"head", "-n", "3", lines},            // over the bound
		{"head", "-n", "02", lines},           // another spelling
		{"head", "-n", "+2", lines},           // another spelling
		{"head", "-c", "1", "-n", "1", lines}, // an option in place of a listed one
		{"head", "-v", "-n", "1", lines},
	} {
		t.Run(strings.Join(argv, " "), func(t *testing.T) {
			r := d.send(map[string]any{"pipeline": [][]string{argv}})
			wantNoApprover(t, r)
			if len(r.Stdout) != 0 || len(r.Stages) != 0 {
				t.Fatalf("it ran: %s", r.raw)
			}
		})
	}
}
