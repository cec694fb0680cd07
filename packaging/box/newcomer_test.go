package box

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeGoTest ends the README's test command: every package, the
// slowest named first so that they start first (go test runs packages in
// the order given), three at a time.
const readmeGoTest = " go test -race -count=1 -timeout 20m -p 3 ./packaging/box ./internal/e2e ./cmd/rootgate ./..."

// readmeCommand is the command of the README's block after marker
// ("start-command" or "test-command").
func readmeCommand(t *testing.T, marker string) string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("<!-- " + marker + " -->\n```sh\n([^\n]+)\n```").FindSubmatch(b)
	if m == nil {
		t.Fatalf("README.md has no %s block", marker)
	}
	return string(m[1])
}

// TestReadmeFirstCommand boots a fresh Debian 12 and a fresh Ubuntu 24.04
// side by side and, in each, as a normal user in group sudo (a login
// shell's PATH, no Go, no sbin), runs the README's first command from a
// checkout: Go is obtained as the README says, the daemon is built and
// started in the user's terminal (tmux), and a first request, from a
// second terminal, is approved there with y and runs as root. Then it
// checks what the test command needs through sudo, as the README's test
// command gives it: its packages resolve in that release (node and npm
// among them when npm is missing), and on the PATH it gives sudo, the Go
// the user built with and root's tools resolve.
//
// It needs the Debian and Ubuntu mirrors and the Go module proxy (about
// 150 MB for each box: its golang-go, then the Go of go.mod).
func TestReadmeFirstCommand(t *testing.T) {
	needTools(t)
	start, testCmd := readmeCommand(t, "start-command"), readmeCommand(t, "test-command")
	// Side by side: each box has its own root, /run and daemon, and its
	// time is mostly downloads and waits.
	for _, d := range []distro{debian12, ubuntu2404} {
		t.Run(d.suite, func(t *testing.T) {
			t.Parallel()
			readmeFirstCommand(t, d, start, testCmd)
		})
	}
}

func readmeFirstCommand(t *testing.T, d distro, start, testCmd string) {
	began := time.Now()
	t.Cleanup(func() { t.Logf("%s: the first command's test took %s", d.name, time.Since(began).Round(time.Second)) })
	b := boot(t, rootfs(t, d))

	// What an installed system has and minbase lacks: sudo and the CA
	// certificates, with the host's own CAs (a network that re-signs TLS).
	b.sh(t, "export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq sudo ca-certificates >/dev/null")
	cas, _ := filepath.Glob("/usr/local/share/ca-certificates/*.crt")
	for _, c := range cas {
		b.copyIn(t, c, filepath.Join("usr/local/share/ca-certificates", filepath.Base(c)))
	}
	b.sh(t, "update-ca-certificates >/dev/null")
	b.sh(t, "useradd --create-home --shell /bin/bash --groups sudo newbie && "+
		"echo 'newbie ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/newbie && chmod 0440 /etc/sudoers.d/newbie")

	// The checkout: the files git knows here, untracked ones included.
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// safe.directory: root, running the tests in a user's checkout, is
	// refused a tree that is not its own.
	files, err := exec.Command("git", "-c", "safe.directory="+repo, "-C", repo, "ls-files", "-z", "-co", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	dst := filepath.Join(b.Root, "home/newbie/rootgate")
	for _, f := range strings.Split(strings.TrimRight(string(files), "\x00"), "\x00") {
		src := filepath.Join(repo, f)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() { // deleted, or a symlink
			continue
		}
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, f), data, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
	}
	b.sh(t, "chown -R newbie:newbie /home/newbie/rootgate")

	// The first command, in the user's first terminal.
	script := "cd ~/rootgate && " + start + "\necho \"first command exited: $?\"\nsleep infinity\n"
	if err := os.WriteFile(filepath.Join(b.Root, "home/newbie/first.sh"), []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	b.sh(t, "su -l newbie -c 'tmux new-session -d -s first -x 200 -y 50 \"bash ~/first.sh\"'")
	pane := func(s string) string {
		out, _ := b.exec("", "runuser", "-u", "newbie", "--", "tmux", "capture-pane", "-p", "-J", "-S", "-", "-t", s)
		return out
	}
	firstAt := time.Now()
	b.waitFor("the first command to start the daemon", 12*time.Minute, func() bool {
		p := pane("first")
		if strings.Contains(p, "first command exited") {
			t.Fatalf("the README's first command failed:\n%s", p)
		}
		return strings.Contains(p, "prompts appear here")
	})
	t.Logf("box: on %s the first command had the daemon running after %s", d.name, time.Since(firstAt).Round(time.Second))
	for _, l := range strings.Split(pane("first"), "\n") {
		if strings.HasPrefix(l, "getgo.sh: ") {
			t.Logf("box: %s", l)
		}
	}

	// The README's first request, from a second terminal, approved in the
	// first.
	b.sh(t, `su -l newbie -c 'tmux new-session -d -s second -x 200 -y 50 "cd ~/rootgate && sudo ./bin/rootgate run --reason \"see who runs this\" -- id; echo \"request exited: \$?\"; sleep infinity"'`)
	b.waitFor("the prompt in the first terminal", time.Minute, func() bool {
		p := pane("first")
		return strings.Contains(p, "see who runs this") && strings.Contains(p, "y approve · n or Esc deny")
	})
	b.sh(t, "runuser -u newbie -- tmux send-keys -t first -l y")
	b.waitFor("the first request to run", time.Minute, func() bool {
		return strings.Contains(pane("second"), "request exited")
	})
	if p := pane("second"); !strings.Contains(p, "uid=0(root)") || !strings.Contains(p, "request exited: 0") {
		t.Fatalf("the first request:\n%s\nthe daemon's terminal:\n%s", p, pane("first"))
	}

	// The test command, up to go test: its packages resolve (simulated),
	// and the PATH it gives sudo has the Go built with and root's tools.
	parts := strings.Split(testCmd, " && ")
	if len(parts) != 5 || !strings.Contains(parts[1], "apt-get install -y -qq ") || !strings.Contains(parts[3], "--prefix internal/e2e/testdata/chromium") ||
		!strings.HasSuffix(parts[4], readmeGoTest) {
		t.Fatalf("the README's test command is not apt-get update && apt-get install && npm ci && the chromium fallback && go test: %q", testCmd)
	}
	sim := strings.Replace(parts[1], "apt-get install -y -qq ", "apt-get install -s ", 1)
	sudoEnv := strings.TrimSuffix(parts[4], readmeGoTest)
	want := strings.TrimPrefix(regexp.MustCompile(`(?m)^go (\S+)$`).FindString(readFile(t, "../../go.mod")), "go ")
	tools := []string{"go", "useradd", "groupadd", "usermod", "userdel", "groupdel", "mkfs.ext2", "ldconfig",
		"start-stop-daemon", "dpkg", "dpkg-deb", "mount", "nsenter", "unshare", "setsid", "tmux", "systemd-analyze", "systemd-socket-activate"}
	check := fmt.Sprintf(`cd ~/rootgate && %s && %s && %s sh -c 'for t in %s; do command -v $t || echo "MISSING $t"; done; echo "root runs $(go env GOVERSION)"'`,
		parts[0], sim, sudoEnv, strings.Join(tools, " "))
	if err := os.WriteFile(filepath.Join(b.Root, "home/newbie/check.sh"), []byte(check+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := b.exec("", "su", "-l", "newbie", "-c", "bash ~/check.sh")
	if err != nil {
		t.Fatalf("the test command's set-up, as newbie: %v\n%s", err, out)
	}
	if strings.Contains(out, "MISSING") || !strings.Contains(out, "root runs go"+want) {
		t.Errorf("through sudo, as the test command runs the tests (want go%s):\n%s", want, out)
	}
	// A fresh Debian 12 or Ubuntu 24.04 has no npm: the test command
	// installs nodejs and npm.
	pkgs := []string{"Inst nodejs ", "Inst npm ", "Inst debootstrap ", "Inst zenity "}
	// Chromium (the passkey tests): Debian's chromium package. Ubuntu
	// 24.04 has only chromium-browser, whose install waits up to 30
	// minutes for the snap store and fails where it is out of reach: the
	// command installs instead the library that the npm fallback needs
	// and a fresh Ubuntu lacks.
	if d.suite == "bookworm" {
		pkgs = append(pkgs, "Inst chromium ")
	} else {
		pkgs = append(pkgs, "Inst libnss3 ")
		for _, p := range []string{"Inst chromium", "Inst snapd "} {
			if strings.Contains(out, p) {
				t.Errorf("apt-get would install %s on %s:\n%s", strings.TrimSpace(strings.TrimPrefix(p, "Inst ")), d.name, out)
			}
		}
	}
	for _, p := range pkgs {
		if !strings.Contains(out, p) {
			t.Errorf("apt-get would not install %s:\n%s", strings.TrimSpace(strings.TrimPrefix(p, "Inst ")), out)
		}
	}
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
