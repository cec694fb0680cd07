package packaging

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/testutil"
)

var units = []string{"rootgate.service", "rootgate.socket", "rootgate-approve.socket"}

// TestUnitsVerify runs systemd-analyze verify on every unit, as installed:
// in a root directory holding the units in /etc/systemd/system, this
// machine's own units (for the targets they name), the built rootgated
// at the ExecStart path and this machine's kill at the ExecReload path; with the generated manual pages on MANPATH, so
// Documentation= is checked too. Any warning fails the test.
func TestUnitsVerify(t *testing.T) {
	sa := testutil.NeedTool(t, "systemd-analyze", "systemd")
	dir := t.TempDir()
	sys := filepath.Join(dir, "etc/systemd/system")
	if err := os.MkdirAll(filepath.Join(dir, "usr/sbin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "usr/lib/systemd"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "cp", "-a", "/usr/lib/systemd/system", filepath.Join(dir, "usr/lib/systemd/"))
	if err := os.MkdirAll(sys, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "cp", binary(t, "rootgated"), filepath.Join(dir, "usr/sbin/rootgated"))
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "cp", "/bin/kill", filepath.Join(dir, "bin/kill"))
	args := []string{"verify", "--root=" + dir}
	for _, u := range units {
		run(t, nil, "cp", filepath.Join(root, "systemd", u), sys)
		args = append(args, "/etc/systemd/system/"+u)
	}
	cmd := exec.Command(sa, args...)
	cmd.Env = append(os.Environ(), "MANPATH="+manDir(t), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("systemd-analyze %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestUnitsMatchDaemon checks the units against what rootgated expects:
// the socket paths and fd names, an ExecStart whose flags it accepts, and
// an ExecReload sending the signal it reloads its policy on.
func TestUnitsMatchDaemon(t *testing.T) {
	sock := unitKeys(t, "rootgate.socket")
	asock := unitKeys(t, "rootgate-approve.socket")
	svc := unitKeys(t, "rootgate.service")
	for _, c := range []struct {
		unit map[string]string
		key  string
		want string
	}{
		{sock, "ListenStream", client.DefaultSocket},
		{sock, "FileDescriptorName", "requests"},
		{sock, "SocketMode", "0660"},
		{sock, "SocketUser", "root"},
		{sock, "SocketGroup", "rootgate"},
		{sock, "Accept", "no"},
		{sock, "Service", "rootgate.service"},
		{asock, "ListenStream", client.DefaultApproverSocket},
		{asock, "FileDescriptorName", "approvers"},
		{asock, "SocketMode", "0600"},
		{asock, "SocketUser", "root"},
		{asock, "Accept", "no"},
		{asock, "Service", "rootgate.service"},
		{svc, "Type", "notify"},
		{svc, "NotifyAccess", "main"},
		{svc, "Restart", "on-failure"},
		// systemctl reload: the daemon reloads its policy on SIGHUP
		// (daemon's TestPolicyReloadByUnit runs this very command).
		{svc, "ExecReload", "/bin/kill -HUP $MAINPID"},
	} {
		if got := c.unit[c.key]; got != c.want {
			t.Errorf("%s=%q, want %q", c.key, got, c.want)
		}
	}
	// The daemon must accept ExecStart's flags: with --version added it
	// parses them all and exits 0 without serving.
	exec := strings.Fields(svc["ExecStart"])
	if len(exec) == 0 || exec[0] != "/usr/sbin/rootgated" {
		t.Fatalf("ExecStart=%q, want /usr/sbin/rootgated ...", svc["ExecStart"])
	}
	run(t, nil, binary(t, "rootgated"), append(exec[1:], "--version")...)
}

// unitKeys reads a unit file's Key=Value lines (the last one wins).
func unitKeys(t *testing.T, unit string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "systemd", unit))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	keys := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			keys[k] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestSecurityScore checks that docs/operations.md records the exposure
// level systemd-analyze security gives rootgate.service.
func TestSecurityScore(t *testing.T) {
	out := run(t, []string{"SYSTEMD_LOG_COLOR=0", "SYSTEMD_COLORS=0"}, "systemd-analyze", "security", "--offline=true", "--no-pager", filepath.Join(root, "systemd/rootgate.service"))
	m := regexp.MustCompile(`Overall exposure level for rootgate\.service: ([0-9.]+) ([A-Z]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no overall exposure level in:\n%s", out)
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "exposure level " + m[1] + " " + m[2]; !strings.Contains(string(doc), want) {
		t.Errorf("docs/operations.md does not record %q", want)
	}
}

// TestSysusersTmpfiles applies the snippets to a scratch root: the group
// is created, the directories get their modes.
func TestSysusersTmpfiles(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	// With --root, a relative path would be taken inside the root.
	snippets, err := filepath.Abs(filepath.Join(root, "systemd"))
	if err != nil {
		t.Fatal(err)
	}
	run(t, nil, "systemd-sysusers", "--root="+dir, filepath.Join(snippets, "rootgate.sysusers"))
	group, err := os.ReadFile(filepath.Join(dir, "etc/group"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^rootgate:x:[0-9]+:$`).Match(group) {
		t.Errorf("no group rootgate in /etc/group:\n%s", group)
	}
	run(t, nil, "systemd-tmpfiles", "--root="+dir, "--create", filepath.Join(snippets, "rootgate.tmpfiles"))
	for p, mode := range map[string]os.FileMode{"var/log/rootgate": 0o700, "etc/rootgate": 0o755} {
		fi, err := os.Stat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || fi.Mode().Perm() != mode || st.Uid != 0 || st.Gid != 0 {
			t.Errorf("/%s: %v uid %d gid %d, want a directory %v root:root", p, fi.Mode(), st.Uid, st.Gid, mode)
		}
	}
}
