package box

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// recipe names the steps of rootfs below; change it with them, so that a
// machine's cached root filesystems are made again.
const recipe = "rootgate-box 1"

// distro is a release the box boots with systemd as PID 1, and how
// debootstrap makes its root filesystem.
type distro struct {
	name  string // as the README says it
	suite string
	// packages are installed by debootstrap on top of its minbase variant.
	packages []string
	// prefix starts the names of its cached root filesystem's directory
	// and lock under the cache.
	prefix string
	// mirror is where debootstrap and the box's apt get packages: the
	// first of this machine's apt sources whose URI has mirrorHas, or
	// mirrorElse.
	mirrorHas, mirrorElse string
	// script is debootstrap's script for suite, where debootstrap has
	// none by suite's name.
	script string
	// keyring returns the keyring debootstrap checks the archive's
	// signature with, written into dir if need be.
	keyring func(t *testing.T, dir, mirror string) string
	// sources writes the box's apt sources, as an installed system has
	// them.
	sources func(root, mirror string) error
}

// debian12 is the box of the systemd suite: Debian 12 with systemd to
// boot, tmux for the approver, and systemd-journal-remote for the audit
// shipping recipe (docs/audit.md).
var debian12 = distro{
	name:     "Debian 12",
	suite:    "bookworm",
	packages: []string{"systemd", "systemd-sysv", "dbus", "tmux", "procps", "systemd-journal-remote"},
	// No prefix: its directory keeps the name it had before there was a
	// second distribution, so machines keep their cache.
	prefix:     "",
	mirrorHas:  "debian",
	mirrorElse: "http://deb.debian.org/debian",
	keyring:    debianKeyring,
	sources: func(root, mirror string) error {
		return os.WriteFile(filepath.Join(root, "etc/apt/sources.list"), []byte("deb "+mirror+" bookworm main\n"), 0o644)
	},
}

// ubuntu2404 is Ubuntu 24.04 (noble), for the README's first command.
// Debian 12's debootstrap (1.0.128) has no script named noble: its gutsy
// script makes every Ubuntu release since, as later debootstraps do for
// noble. Its apt has what an installed Ubuntu's has: the release, its
// updates, security and backports, all four components. tzdata, which
// every installed Ubuntu has and Ubuntu's minbase lacks: without it the
// README's test command's apt-get stops to ask for a time zone.
var ubuntu2404 = distro{
	name:       "Ubuntu 24.04",
	suite:      "noble",
	packages:   []string{"systemd", "systemd-sysv", "dbus", "tmux", "procps", "tzdata"},
	prefix:     "noble-",
	mirrorHas:  "ubuntu",
	mirrorElse: "http://archive.ubuntu.com/ubuntu",
	script:     "/usr/share/debootstrap/scripts/gutsy",
	keyring:    ubuntuKeyring,
	sources: func(root, mirror string) error {
		src := "Types: deb\nURIs: " + mirror + "\nSuites: noble noble-updates noble-security noble-backports\n" +
			"Components: main restricted universe multiverse\nSigned-By: /usr/share/keyrings/ubuntu-archive-keyring.gpg\n"
		if err := os.WriteFile(filepath.Join(root, "etc/apt/sources.list.d/ubuntu.sources"), []byte(src), 0o644); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(root, "etc/apt/sources.list"), []byte("# In /etc/apt/sources.list.d/ubuntu.sources.\n"), 0o644)
	},
}

// cacheDir holds the root filesystems, one per distribution and key, and
// the runs' overlays. ROOTGATE_BOX_CACHE moves it.
func cacheDir() string {
	if d := os.Getenv("ROOTGATE_BOX_CACHE"); d != "" {
		return d
	}
	return "/var/tmp/rootgate-box"
}

// rootfsKey is the hash of everything that goes into d's root filesystem.
func (d distro) rootfsKey() string {
	h := sha256.Sum256([]byte(recipe + "\n" + d.suite + "\n" + strings.Join(d.packages, ",")))
	return hex.EncodeToString(h[:6])
}

// needTools fails t unless the host has what the box needs. The README's
// test command installs them; there is no skip.
func needTools(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the systemd suite needs root (see the README's test command)")
	}
	for tool, pkg := range map[string]string{"debootstrap": "debootstrap", "systemd-nspawn": "systemd-container", "nsenter": "util-linux", "mount": "mount", "make": "make", "dpkg-deb": "dpkg"} {
		testutil.NeedTool(t, tool, pkg)
	}
}

// mirror is the mirror of d this machine's apt uses (the first that is
// not a security mirror), or d's default.
func (d distro) mirror() string {
	var found []string
	files, _ := filepath.Glob("/etc/apt/sources.list.d/*")
	for _, f := range append([]string{"/etc/apt/sources.list"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			switch {
			case strings.HasSuffix(f, ".list") && len(fields) >= 3 && fields[0] == "deb":
				u := fields[1]
				if strings.HasPrefix(u, "[") { // deb [options] URI
					for i, s := range fields {
						if strings.HasSuffix(s, "]") && i+1 < len(fields) {
							u = fields[i+1]
							break
						}
					}
				}
				found = append(found, u)
			case strings.HasSuffix(f, ".sources") && len(fields) >= 2 && fields[0] == "URIs:":
				found = append(found, fields[1:]...)
			}
		}
	}
	for _, u := range found {
		if strings.HasPrefix(u, "http") && !strings.Contains(u, "security") && strings.Contains(u, d.mirrorHas) {
			return u
		}
	}
	return d.mirrorElse
}

// rootfs returns d's cached root filesystem, making it first when this
// machine has none for the current key. Making it takes about a minute
// (debootstrap from the mirror; Debian 12's is 213 MB on disk, Ubuntu
// 24.04's 161 MB); d's other keys' copies are removed then.
func rootfs(t *testing.T, d distro) string {
	t.Helper()
	base := cacheDir()
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(base, d.prefix+"lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	// Another test process may be making it: wait for it.
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = syscall.Flock(int(lock.Fd()), syscall.LOCK_UN) }()

	sweepRuns(t, base)
	dir := filepath.Join(base, d.prefix+d.rootfsKey())
	done := filepath.Join(dir, ".rootgate-box")
	if _, err := os.Stat(done); err == nil {
		t.Logf("box: cached root filesystem %s", dir)
		return dir
	}
	start := time.Now()
	tmp := dir + ".new"
	_ = os.RemoveAll(tmp)
	m := d.mirror()
	// An explicit keyring: debootstrap without one goes on unchecked,
	// with a warning, where its script's is missing.
	args := []string{"--variant=minbase", "--include=" + strings.Join(d.packages, ","),
		"--keyring=" + d.keyring(t, t.TempDir(), m), d.suite, tmp, m}
	if d.script != "" {
		args = append(args, d.script)
	}
	if out, err := exec.Command("debootstrap", args...).CombinedOutput(); err != nil {
		t.Fatalf("debootstrap %s from %s: %v\n%s", d.suite, m, err, tail(out, 40))
	}
	// Apt's sources, as on an installed system; no getty on the console
	// nspawn leaves passive; no downloaded packages kept.
	if err := d.sources(tmp, m); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/null", filepath.Join(tmp, "etc/systemd/system/console-getty.service")); err != nil {
		t.Fatal(err)
	}
	debs, _ := filepath.Glob(filepath.Join(tmp, "var/cache/apt/archives/*.deb"))
	for _, f := range debs {
		_ = os.Remove(f)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".rootgate-box"), []byte(recipe+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// d's older keys' root filesystems are of no more use.
	old, _ := filepath.Glob(filepath.Join(base, d.prefix+"[0-9a-f]*"))
	ours := regexp.MustCompile("^" + regexp.QuoteMeta(d.prefix) + "[0-9a-f]{12}$")
	for _, o := range old {
		if ours.MatchString(filepath.Base(o)) && o != dir {
			_ = os.RemoveAll(o)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("box: made the %s root filesystem %s in %s", d.name, dir, time.Since(start).Round(time.Second))
	return dir
}

// sweepRuns removes the overlays that killed test processes left behind
// (their cleanup never ran), unless something still has them mounted or
// they are new (another test process may be about to mount one).
func sweepRuns(t *testing.T, base string) {
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	runs, _ := filepath.Glob(filepath.Join(base, "run-*"))
	for _, r := range runs {
		fi, err := os.Stat(r)
		if err != nil || time.Since(fi.ModTime()) < 10*time.Minute {
			continue
		}
		if !strings.Contains(string(mountinfo), " "+filepath.Join(r, "root")+" ") {
			t.Logf("box: removing %s, left by an earlier run", r)
			_ = os.RemoveAll(r)
		}
	}
}

// overlay mounts a writable overlay of lower on a fresh directory under
// the cache and returns the merged tree; t's cleanup unmounts and removes
// it. The cached lower tree is never written.
func overlay(t *testing.T, lower string) string {
	t.Helper()
	run, err := os.MkdirTemp(cacheDir(), "run-")
	if err != nil {
		t.Fatal(err)
	}
	upper, work, merged := filepath.Join(run, "upper"), filepath.Join(run, "work"), filepath.Join(run, "root")
	for _, d := range []string{upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, merged).CombinedOutput(); err != nil {
		t.Fatalf("mount overlay: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(merged, 0); err != nil {
			// Busy: whatever still holds it lets go of it later.
			t.Logf("box: unmount %s: %v; detaching it", merged, err)
			_ = syscall.Unmount(merged, syscall.MNT_DETACH)
		}
		_ = os.RemoveAll(run)
	})
	return merged
}

// Box is a booted container: systemd-nspawn --boot over an overlay of the
// cached root filesystem, sharing the host's network.
type Box struct {
	t      *testing.T
	Root   string // the container's / as seen from the host
	name   string
	nspawn *exec.Cmd
	done   chan struct{}
	leader int // the container's PID 1, as a host pid
	log    *os.File
}

// boot boots an overlay of the cached root filesystem and waits until its
// systemd says the system is running; t's cleanup powers it off.
func boot(t *testing.T, lower string) *Box {
	t.Helper()
	root := overlay(t, lower)
	// Named for its overlay, so that boxes booted at once differ.
	name := "rgbox" + strings.TrimPrefix(filepath.Base(filepath.Dir(root)), "run-")
	b := &Box{t: t, Root: root, name: name, done: make(chan struct{})}
	var err error
	if b.log, err = os.Create(filepath.Join(filepath.Dir(b.Root), "boot.log")); err != nil {
		t.Fatal(err)
	}
	b.nspawn = exec.Command("systemd-nspawn", "-D", b.Root, "-M", b.name, "--boot",
		"--register=no", "--keep-unit", "--console=passive")
	// A pure cgroup2 tree inside, whatever the host mounts.
	b.nspawn.Env = append(os.Environ(), "SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1")
	b.nspawn.Stdout, b.nspawn.Stderr = b.log, b.log
	b.nspawn.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start := time.Now()
	if err := b.nspawn.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = b.nspawn.Wait(); close(b.done) }()
	t.Cleanup(b.poweroff)

	b.waitFor("the container's systemd to start", 30*time.Second, func() bool {
		b.leader = childNamed(b.nspawn.Process.Pid, "systemd")
		return b.leader != 0
	})
	var state string
	b.waitFor("systemd in the container to finish booting", 60*time.Second, func() bool {
		out, _ := b.exec("", "systemctl", "is-system-running")
		state = strings.TrimSpace(out)
		return state == "running" || state == "degraded"
	})
	if state == "degraded" {
		out, _ := b.exec("", "systemctl", "--failed", "--no-pager")
		t.Logf("box: booted degraded:\n%s", out)
	}
	t.Logf("box: booted in %s", time.Since(start).Round(10*time.Millisecond))
	return b
}

// poweroff stops the container: SIGTERM makes nspawn ask systemd to power
// off; SIGKILL if that takes too long.
func (b *Box) poweroff() {
	select {
	case <-b.done:
	default:
		_ = b.nspawn.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(30 * time.Second):
			b.t.Logf("box: no poweroff within 30 s; killing nspawn")
			_ = syscall.Kill(-b.nspawn.Process.Pid, syscall.SIGKILL)
			<-b.done
		}
	}
	b.log.Close()
	if b.t.Failed() {
		if out, err := os.ReadFile(b.log.Name()); err == nil {
			b.t.Logf("box: the container's console:\n%s", tail(out, 60))
		}
	}
}

// childNamed is the pid of a child of parent whose command is comm, or 0.
func childNamed(parent int, comm string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(stat)
		i := strings.LastIndexByte(s, ')')
		j := strings.IndexByte(s, '(')
		if i < 0 || j < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 && f[1] == strconv.Itoa(parent) && s[j+1:i] == comm {
			return pid
		}
	}
	return 0
}

// exec runs argv inside the box as root, with a clean environment and
// stdin as its standard input, and returns its stdout and stderr together.
func (b *Box) exec(stdin string, argv ...string) (string, error) {
	cmd := b.command(argv...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// output runs argv inside the box as root and returns its stdout alone.
func (b *Box) output(argv ...string) (string, error) {
	out, err := b.command(argv...).Output()
	return string(out), err
}

// command is argv inside the box as root (nsenter into all the
// container's namespaces), not started.
func (b *Box) command(argv ...string) *exec.Cmd {
	select {
	case <-b.done:
		b.t.Fatalf("box: the container is gone (running %q)", argv)
	default:
	}
	args := append([]string{"-t", strconv.Itoa(b.leader), "-a", "env", "-i",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=/root", "LANG=C.UTF-8", "TERM=xterm-256color"}, argv...)
	return exec.Command("nsenter", args...)
}

// sh runs a shell command line inside the box and fails t unless it
// exits 0; it returns the output.
func (b *Box) sh(t *testing.T, script string) string {
	t.Helper()
	out, err := b.exec("", "sh", "-c", script)
	if err != nil {
		t.Fatalf("in the box: %s: %v\n%s", script, err, out)
	}
	return out
}

// waitFor polls cond every 100 ms (each poll may start processes in the
// box) until it holds, failing the box's test after timeout.
func (b *Box) waitFor(what string, timeout time.Duration, cond func() bool) {
	b.t.Helper()
	waitFor(b.t, what, timeout, cond)
}

func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	// Each check may run a command in the box: every 100 ms, not 10.
	if !testutil.PollEvery(100*time.Millisecond, timeout, cond) {
		t.Fatalf("timed out after %s waiting for %s", timeout, what)
	}
}

// copyIn copies the host file src to dst inside the box's root (not /tmp,
// which is the container's own tmpfs).
func (b *Box) copyIn(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(b.Root, dst), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tail is the last n lines of out.
func tail(out []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
