package daemon_test

import (
	"context"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testAccount creates the local account name for the test (retrying while
// a concurrent useradd holds /etc/passwd) and removes it at cleanup. It
// returns the account's uid and gid.
func testAccount(t *testing.T, name string) (uint32, uint32) {
	t.Helper()
	_ = exec.Command("userdel", "-r", name).Run() // a leftover of a killed run
	var out []byte
	var err error
	for range 50 {
		if out, err = exec.Command("useradd", "-M", "-s", "/usr/sbin/nologin", name).CombinedOutput(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("useradd %s: %v\n%s", name, err, out)
	}
	t.Cleanup(func() {
		for range 50 {
			if exec.Command("userdel", "-r", name).Run() == nil {
				return
			}
			if _, err := user.Lookup(name); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("userdel %s failed", name)
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return uint32(uid), uint32(gid)
}

// startFails runs rootgated with dir's runtime directory and requires it to
// refuse to start with want in its error.
func startFails(t *testing.T, dir, runtimeDir, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, rootgated, "--socket", filepath.Join(dir, "s"), "--approver-socket", "",
		"--runtime-dir", runtimeDir, "--policy", filepath.Join(dir, "policy"), "--audit", auditPath(dir))
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("rootgated started on runtime dir %s (want it refused: %s)\n%s", runtimeDir, want, out)
	}
	if err == nil || !strings.Contains(string(out), "rootgated: error: runtime directory: "+want) {
		t.Fatalf("rootgated on runtime dir %s: %v, want error %q\n%s", runtimeDir, err, want, out)
	}
}

// TestRuntimeDirChecked: a runtime directory another user owns, or that
// group or others may write (sticky or not), is refused at start, since
// root rewrites files in it; a root-owned 0755 one is used.
func TestRuntimeDirChecked(t *testing.T) {
	uid, gid := testAccount(t, "rgtfa")
	dir := shortDir(t)
	for _, c := range []struct {
		name string
		mode os.FileMode
		uid  int
		want string
	}{
		{"owned-by-requester", 0o755, int(uid), "is owned by uid " + strconv.Itoa(int(uid)) + ", not by root"},
		{"group-writable", 0o775, 0, "is writable by group or others"},
		{"world-writable-sticky", 0o777 | os.ModeSticky, 0, "is writable by group or others"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rd := filepath.Join(dir, c.name)
			if err := os.Mkdir(rd, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(rd, c.uid, int(gid)); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(rd, c.mode); err != nil {
				t.Fatal(err)
			}
			startFails(t, dir, rd, rd+" "+c.want)
		})
	}
	// The legitimate case: root's own directory, 0755.
	ok := filepath.Join(dir, "ok")
	if err := os.Mkdir(ok, 0o755); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{args: []string{"--runtime-dir", ok}})
	d.alive()
}

// TestReplayTmpSymlinkNotFollowed: a replay.tmp symlink left in the runtime
// directory (planted before it was root's, or by a crash of something else)
// does not make root write through it; the daemon replaces it with its own
// file and serves.
func TestReplayTmpSymlinkNotFollowed(t *testing.T) {
	dir := shortDir(t)
	rd := filepath.Join(dir, "run")
	if err := os.Mkdir(rd, 0o755); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(rd, "replay.tmp")); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{dir: dir})
	d.alive()
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Fatalf("the symlink's target was written through: %q, %v", b, err)
	}
	fi, err := os.Lstat(filepath.Join(rd, "replay"))
	if err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("replay file: %v, %v", fi, err)
	}
}
