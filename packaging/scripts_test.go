package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestScriptsUnderSystemd runs the maintainer scripts as if systemd were
// the running init, which it is not on the machines the tests run on: in a
// private mount namespace /run/systemd/system exists and /var/lib is empty,
// and systemctl, systemd-sysusers and systemd-tmpfiles are stand-ins that
// log how they were called. Nothing reaches the real machine.
func TestScriptsUnderSystemd(t *testing.T) {
	t.Parallel()
	const (
		sockets = "enable --now rootgate.socket rootgate-approve.socket"
		disable = "disable --now rootgate.socket rootgate-approve.socket rootgate.service"
		active  = "--quiet is-active rootgate.service"
	)
	for _, tc := range []struct {
		name    string
		script  string
		args    []string
		removed bool // /var/lib/rootgate/removed exists before
		running bool // rootgate.service is active
		calls   []string
		stderr  string // a line stderr must hold, if any
		mark    bool   // /var/lib/rootgate/removed exists after
	}{
		{name: "deb first install", script: "postinstall.sh", args: []string{"configure", ""}, calls: []string{"daemon-reload", sockets}},
		{name: "deb upgrade, daemon running", script: "postinstall.sh", args: []string{"configure", "0.1"}, running: true,
			calls: []string{"daemon-reload", active}, stderr: `run "systemctl restart rootgate" when no request is waiting or running`},
		{name: "deb upgrade, daemon idle", script: "postinstall.sh", args: []string{"configure", "0.1"}, calls: []string{"daemon-reload", active}},
		{name: "deb install after a removal", script: "postinstall.sh", args: []string{"configure", "0.1"}, removed: true, calls: []string{"daemon-reload", sockets}},
		{name: "rpm install", script: "postinstall.sh", args: []string{"1"}, calls: []string{"daemon-reload", sockets}},
		{name: "rpm upgrade", script: "postinstall.sh", args: []string{"2"}, calls: []string{"daemon-reload", active}},
		{name: "deb remove", script: "preremove.sh", args: []string{"remove"}, calls: []string{disable}, mark: true},
		{name: "deb upgrade's removal", script: "preremove.sh", args: []string{"upgrade", "0.2"}},
		{name: "rpm erase", script: "preremove.sh", args: []string{"0"}, calls: []string{disable}},
		{name: "rpm upgrade's removal", script: "preremove.sh", args: []string{"1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			stubs := filepath.Join(dir, "bin")
			if err := os.Mkdir(stubs, 0o755); err != nil {
				t.Fatal(err)
			}
			log := filepath.Join(dir, "calls")
			isActive := "1"
			if tc.running {
				isActive = "0"
			}
			stub := "#!/bin/sh\nname=${0##*/}\n[ \"$name\" = systemctl ] && echo \"$*\" >> " + log + "\n" +
				"[ \"$name\" = systemctl ] && [ \"$1\" = --quiet ] && exit " + isActive + "\nexit 0\n"
			for _, name := range []string{"systemctl", "systemd-sysusers", "systemd-tmpfiles"} {
				if err := os.WriteFile(filepath.Join(stubs, name), []byte(stub), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			setup := "mount -t tmpfs tmpfs /run/systemd && mkdir /run/systemd/system && mount -t tmpfs tmpfs /var/lib"
			if tc.removed {
				setup += " && mkdir /var/lib/rootgate && touch /var/lib/rootgate/removed"
			}
			script, err := filepath.Abs(filepath.Join("scripts", tc.script))
			if err != nil {
				t.Fatal(err)
			}
			// After the script, say whether the mark is there.
			body := setup + ` && PATH="$0:$PATH" sh "$1" "$2" "$3"; code=$?; [ -e /var/lib/rootgate/removed ] && echo mark >&3; exit $code`
			// $2 and $3 of the script: rpm passes one argument, dpkg two.
			given := append(slices.Clone(tc.args), "", "")[:2]
			args := append([]string{"-m", "--propagation", "private", "sh", "-c", body, stubs, script}, given...)
			cmd := exec.Command("unshare", args...)
			var stderr, markOut strings.Builder
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.ExtraFiles = []*os.File{w}
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			buf := make([]byte, 64)
			n, _ := r.Read(buf)
			markOut.Write(buf[:n])
			r.Close()
			if err := cmd.Wait(); err != nil {
				t.Fatalf("%s %q: %v\n%s", tc.script, tc.args, err, stderr.String())
			}
			got := []string{}
			if b, err := os.ReadFile(log); err == nil {
				got = strings.Split(strings.TrimSpace(string(b)), "\n")
			}
			if !slices.Equal(got, append([]string{}, tc.calls...)) {
				t.Errorf("systemctl calls %q, want %q", got, tc.calls)
			}
			if tc.stderr != "" && !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tc.stderr)
			} else if tc.stderr == "" && stderr.Len() > 0 {
				t.Errorf("unexpected stderr %q", stderr.String())
			}
			if mark := strings.Contains(markOut.String(), "mark"); mark != tc.mark {
				t.Errorf("removal mark there after: %v, want %v", mark, tc.mark)
			}
		})
	}
}
