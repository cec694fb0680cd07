package packaging

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
	"github.com/rootgate/rootgate/policy"
)

// testVersion is stamped into the packages the tests build.
const (
	testVersion    = "0.9.1-test.1"
	testDebVersion = "0.9.1~test.1" // nfpm's Debian spelling of it
)

// installed is every file the packages install (the rpm puts the zsh
// completions in site-functions instead of vendor-completions), with its
// mode; all are root:root.
var installed = map[string]string{
	"/usr/sbin/rootgated":                                 "-rwxr-xr-x",
	"/usr/bin/rootgate":                                   "-rwxr-xr-x",
	"/usr/lib/rootgate/agent-bin/sudo":                    "lrwxrwxrwx", // -> /usr/bin/rootgate
	"/usr/lib/systemd/system/rootgate.service":            "-rw-r--r--",
	"/usr/lib/systemd/system/rootgate.socket":             "-rw-r--r--",
	"/usr/lib/systemd/system/rootgate-approve.socket":     "-rw-r--r--",
	"/usr/lib/sysusers.d/rootgate.conf":                   "-rw-r--r--",
	"/usr/lib/tmpfiles.d/rootgate.conf":                   "-rw-r--r--",
	"/etc/rootgate/policy":                                "-rw-r--r--",
	"/usr/share/man/man8/rootgated.8.gz":                  "-rw-r--r--",
	"/usr/share/man/man1/rootgate.1.gz":                   "-rw-r--r--",
	"/usr/share/bash-completion/completions/rootgate":     "-rw-r--r--",
	"/usr/share/bash-completion/completions/rootgated":    "-rw-r--r--",
	"/usr/share/zsh/vendor-completions/_rootgate":         "-rw-r--r--",
	"/usr/share/zsh/vendor-completions/_rootgated":        "-rw-r--r--",
	"/usr/share/fish/vendor_completions.d/rootgate.fish":  "-rw-r--r--",
	"/usr/share/fish/vendor_completions.d/rootgated.fish": "-rw-r--r--",
	"/usr/share/doc/rootgate/README.md":                   "-rw-r--r--",
}

// docs are the files of docs/, installed in /usr/share/doc/rootgate.
func docs(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil || len(files) == 0 {
		t.Fatalf("docs/*.md: %v %v", files, err)
	}
	m := map[string]string{}
	for _, f := range files {
		m["/usr/share/doc/rootgate/"+filepath.Base(f)] = "-rw-r--r--"
	}
	return m
}

// TestPackages builds the .deb and .rpm with `make packages`, checks their
// contents, then installs, removes and purges the .deb on this machine.
func TestPackages(t *testing.T) {
	for tool, pkg := range map[string]string{"make": "make", "dpkg": "dpkg", "dpkg-deb": "dpkg", "rpm": "rpm"} {
		testutil.NeedTool(t, tool, pkg)
	}
	want := map[string]string{}
	for k, v := range installed {
		want[k] = v
	}
	for k, v := range docs(t) {
		want[k] = v
	}

	dist := t.TempDir()
	run(t, nil, "make", "-C", root, "packages", "DIST="+dist, "BUILD="+filepath.Join(dist, "build"), "VERSION="+testVersion)
	debs, _ := filepath.Glob(filepath.Join(dist, "rootgate_*.deb"))
	rpms, _ := filepath.Glob(filepath.Join(dist, "rootgate-*.rpm"))
	if len(debs) != 1 || len(rpms) != 1 {
		t.Fatalf("want one .deb and one .rpm in %s, got %v %v", dist, debs, rpms)
	}
	deb, rpm := debs[0], rpms[0]

	t.Run("deb contents", func(t *testing.T) {
		got := map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(run(t, nil, "dpkg-deb", "-c", deb)), "\n") {
			// -rw-r--r-- root/root 693 2026-11-23 14:46 ./etc/rootgate/policy
			f := strings.Fields(line)
			if len(f) < 6 {
				t.Fatalf("dpkg-deb -c line %q", line)
			}
			if f[1] != "root/root" {
				t.Errorf("%s is owned by %s, want root/root", f[5], f[1])
			}
			if !strings.HasPrefix(f[0], "d") {
				got[strings.TrimPrefix(f[5], ".")] = f[0]
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("deb files:\n%s\nwant:\n%s", fmtMap(got), fmtMap(want))
		}
		if v := strings.TrimSpace(run(t, nil, "dpkg-deb", "-f", deb, "Version")); v != testDebVersion {
			t.Errorf("Version %q, want %q", v, testDebVersion)
		}
		ctrl := t.TempDir()
		run(t, nil, "dpkg-deb", "-e", deb, ctrl)
		conffiles, err := os.ReadFile(filepath.Join(ctrl, "conffiles"))
		if err != nil || string(conffiles) != "/etc/rootgate/policy\n" {
			t.Errorf("conffiles %q (%v), want only /etc/rootgate/policy", conffiles, err)
		}
		for _, s := range []string{"postinst", "prerm", "postrm"} {
			if fi, err := os.Stat(filepath.Join(ctrl, s)); err != nil || fi.Mode().Perm()&0o111 == 0 {
				t.Errorf("maintainer script %s: %v", s, err)
			}
		}
		info := run(t, nil, "dpkg-deb", "-I", deb)
		if !strings.Contains(info, "Package: rootgate") || !strings.Contains(info, "Depends: libc6") {
			t.Errorf("dpkg-deb -I:\n%s", info)
		}
	})

	t.Run("rpm contents", func(t *testing.T) {
		wantRPM := map[string]string{}
		for k, v := range want {
			if strings.HasPrefix(v, "l") {
				// nfpm writes an rpm's symlinks without permission bits,
				// which Linux ignores on a symlink.
				v = "l---------"
			}
			wantRPM[strings.Replace(k, "/zsh/vendor-completions/", "/zsh/site-functions/", 1)] = v
		}
		got := map[string]string{}
		q := `[%{FILEMODES:perms} %{FILEUSERNAME} %{FILEGROUPNAME} %{FILEFLAGS:fflags} %{FILENAMES}\n]`
		for _, line := range strings.Split(strings.TrimSpace(run(t, nil, "rpm", "-qp", "--qf", q, rpm)), "\n") {
			f := strings.Fields(line)
			if len(f) == 4 { // no flags
				f = []string{f[0], f[1], f[2], "", f[3]}
			}
			if len(f) != 5 {
				t.Fatalf("rpm line %q", line)
			}
			if f[1] != "root" || f[2] != "root" {
				t.Errorf("%s is owned by %s:%s, want root:root", f[4], f[1], f[2])
			}
			// c: %config, n: noreplace.
			if wantFlags := map[bool]string{true: "cn", false: ""}[f[4] == "/etc/rootgate/policy"]; f[3] != wantFlags {
				t.Errorf("%s has file flags %q, want %q", f[4], f[3], wantFlags)
			}
			got[f[4]] = f[0]
		}
		if !maps.Equal(got, wantRPM) {
			t.Errorf("rpm files:\n%s\nwant:\n%s", fmtMap(got), fmtMap(wantRPM))
		}
		list := strings.Fields(run(t, nil, "rpm", "-qlp", rpm))
		if len(list) != len(wantRPM) {
			t.Errorf("rpm -qlp lists %d files, want %d", len(list), len(wantRPM))
		}
		scripts := run(t, nil, "rpm", "-qp", "--scripts", rpm)
		for _, s := range []string{"postinstall scriptlet", "preuninstall scriptlet", "postuninstall scriptlet"} {
			if !strings.Contains(scripts, s) {
				t.Errorf("rpm has no %s:\n%s", s, scripts)
			}
		}
	})

	t.Run("install remove purge", func(t *testing.T) {
		installRemovePurge(t, deb, want)
	})
}

// installRemovePurge installs the .deb with dpkg, checks it works, removes
// it and purges it, checking what each step keeps. The machine is left as
// it was, even on failure.
func installRemovePurge(t *testing.T, deb string, files map[string]string) {
	if st := status(); strings.Contains(st, "installed") {
		t.Fatalf("package rootgate is already on this machine (%s); this test installs and purges it, so remove it first", st)
	}
	testutil.LockGroup(t)
	// A removal or purge deletes these: what is there already (a daemon
	// run by hand writes its audit log in /var/log/rootgate, its sockets
	// and replay window in /run/rootgate) is moved aside and put back at
	// the end.
	for _, d := range []string{"/etc/rootgate", "/var/log/rootgate", "/var/lib/rootgate", "/run/rootgate"} {
		if _, err := os.Lstat(d); err != nil {
			continue
		}
		aside := fmt.Sprintf("%s.pkgtest-%d", d, os.Getpid())
		if err := os.Rename(d, aside); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := os.Rename(aside, d); err != nil {
				t.Logf("%s left at %s: %v", d, aside, err)
			}
		})
	}
	_, err := exec.Command("getent", "group", "rootgate").Output()
	hadGroup := err == nil
	// Registered last, so it runs first: the purge must come before the
	// directories are put back.
	t.Cleanup(func() {
		dpkg(t, "-P", "rootgate")
		if _, err := exec.Command("getent", "group", "rootgate").Output(); err == nil && !hadGroup {
			if out, err := exec.Command("groupdel", "rootgate").CombinedOutput(); err != nil {
				t.Errorf("groupdel rootgate: %v: %s", err, out)
			}
		}
	})

	out := dpkg(t, "-i", deb)
	// Where systemd is not PID 1 (CI's container), the sockets are left
	// for the operator; on a machine booted with it (a newcomer's Debian
	// 12 or Ubuntu 24.04), the package enables and starts them.
	booted := false
	if fi, err := os.Stat("/run/systemd/system"); err == nil && fi.IsDir() {
		booted = true
	}
	if notRunning := strings.Contains(out, "systemd is not running"); notRunning == booted {
		t.Errorf("dpkg -i output, systemd running %v, says \"systemd is not running\" %v:\n%s", booted, notRunning, out)
	}
	for f, mode := range files {
		fi, err := os.Lstat(f)
		if err != nil {
			t.Errorf("installed: %v", err)
			continue
		}
		got := fi.Mode().String()
		if fi.Mode()&os.ModeSymlink != 0 {
			got = "l" + got[1:] // Go writes L, ls and dpkg-deb l
		}
		if got != mode {
			t.Errorf("%s: mode %s, want %s", f, got, mode)
		}
	}
	if v := run(t, nil, "/usr/sbin/rootgated", "--version"); v != "rootgated "+testVersion+"\n" {
		t.Errorf("rootgated --version: %q", v)
	}
	if v := run(t, nil, "/usr/bin/rootgate", "--version"); v != "rootgate "+testVersion+"\n" {
		t.Errorf("rootgate --version: %q", v)
	}
	// The agent's sudo is rootgate sudo.
	if target, err := os.Readlink("/usr/lib/rootgate/agent-bin/sudo"); err != nil || target != "/usr/bin/rootgate" {
		t.Errorf("/usr/lib/rootgate/agent-bin/sudo links to %q (%v), want /usr/bin/rootgate", target, err)
	}
	if v := run(t, nil, "/usr/lib/rootgate/agent-bin/sudo", "--version"); !strings.HasPrefix(v, "rootgate "+testVersion+" (rootgate sudo: ") {
		t.Errorf("/usr/lib/rootgate/agent-bin/sudo --version: %q", v)
	}
	if _, err := exec.Command("getent", "group", "rootgate").Output(); err != nil {
		t.Errorf("no group rootgate after install: %v", err)
	}
	checkDir(t, "/var/log/rootgate", 0o700)
	checkDir(t, "/etc/rootgate", 0o755)
	if p, err := policy.Load("/etc/rootgate/policy"); err != nil || len(p.Rules) != 0 {
		t.Errorf("installed policy: %v, %+v", err, p)
	}
	const wants = "/etc/systemd/system/sockets.target.wants/rootgate.socket"
	if _, err := os.Lstat(wants); (err == nil) != booted {
		t.Errorf("%s: %v, with systemd running %v", wants, err, booted)
	}
	if p := strings.TrimSpace(run(t, nil, "man", "-w", "rootgated")); p != "/usr/share/man/man8/rootgated.8.gz" {
		t.Errorf("man -w rootgated: %q", p)
	}
	pingInstalled(t)

	// The operator's changes and the audit log must survive a removal.
	edited := "# edited by the operator\nask any\n"
	if err := os.WriteFile("/etc/rootgate/policy", []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile("/var/log/rootgate/audit.jsonl", []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Installing over it (as an upgrade does) keeps the edited conffile.
	dpkg(t, "-i", deb)
	if b, err := os.ReadFile("/etc/rootgate/policy"); err != nil || string(b) != edited {
		t.Errorf("the edited policy did not survive a reinstall: %q %v", b, err)
	}
	dpkg(t, "-r", "rootgate")
	for f := range files {
		if f != "/etc/rootgate/policy" {
			if _, err := os.Lstat(f); err == nil {
				t.Errorf("%s is still there after dpkg -r", f)
			}
		}
	}
	if b, err := os.ReadFile("/etc/rootgate/policy"); err != nil || string(b) != edited {
		t.Errorf("the edited policy did not survive dpkg -r: %q %v", b, err)
	}
	if _, err := os.Stat("/var/log/rootgate/audit.jsonl"); err != nil {
		t.Errorf("the audit log did not survive dpkg -r: %v", err)
	}
	if st := status(); st != "deinstall ok config-files" {
		t.Errorf("status after dpkg -r: %q", st)
	}
	// Installed again after a removal, it is a first install again (the
	// sockets would be enabled under systemd) and keeps the edited policy.
	dpkg(t, "-i", deb)
	if b, err := os.ReadFile("/etc/rootgate/policy"); err != nil || string(b) != edited {
		t.Errorf("the edited policy did not survive dpkg -r and -i: %q %v", b, err)
	}
	if _, err := os.Lstat("/var/lib/rootgate"); err == nil {
		t.Errorf("/var/lib/rootgate left behind by a reinstall")
	}
	dpkg(t, "-r", "rootgate")

	dpkg(t, "-P", "rootgate")
	for _, d := range []string{"/etc/rootgate", "/var/log/rootgate", "/var/lib/rootgate"} {
		if _, err := os.Lstat(d); err == nil {
			t.Errorf("%s is still there after dpkg -P", d)
		}
	}
	if st := status(); st != "" {
		t.Errorf("status after dpkg -P: %q", st)
	}
	if _, err := os.Lstat(wants); err == nil {
		t.Errorf("%s is still there after dpkg -P", wants)
	}
	// The group stays: files elsewhere may still belong to it.
	if _, err := exec.Command("getent", "group", "rootgate").Output(); err != nil {
		t.Errorf("group rootgate was removed by the purge: %v", err)
	}
}

// pingInstalled starts the installed rootgated on a scratch socket, with
// the installed policy, and pings it with the installed rootgate.
func pingInstalled(t *testing.T) {
	t.Helper()
	d := rgtest.NewDaemon(t, testutil.ShortDir(t))
	d.Cmd = exec.Command("/usr/sbin/rootgated", "--socket", d.Sock, "--approver-socket", "", "--runtime-dir", filepath.Join(d.Dir, "run"))
	d.Start()
	defer d.Stop() // before the package is purged
	d.WaitReady()
	if out := run(t, nil, "/usr/bin/rootgate", "ping", "--socket", d.Sock); out != "pong (rootgated "+testVersion+")\n" {
		t.Errorf("rootgate ping: %q", out)
	}
}

// dpkg runs dpkg with args, waiting for its lock when another dpkg or apt
// holds it, and fails the test unless it succeeds. It returns the output.
func dpkg(t *testing.T, args ...string) string {
	t.Helper()
	var out []byte
	var err error
	testutil.PollEvery(time.Second, 10*time.Minute, func() bool {
		out, err = exec.Command("dpkg", args...).CombinedOutput()
		return err == nil || !strings.Contains(string(out), "lock")
	})
	if err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// status is the package's dpkg status, "" when dpkg knows nothing of it.
func status() string {
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Status}", "rootgate").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

func checkDir(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Error(err)
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm() != mode || st.Uid != 0 || st.Gid != 0 {
		t.Errorf("%s: %v uid %d gid %d, want a directory %v root:root", path, fi.Mode(), st.Uid, st.Gid, mode)
	}
}

func fmtMap(m map[string]string) string {
	var lines []string
	for k, v := range m {
		lines = append(lines, fmt.Sprintf("  %s %s", v, k))
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
