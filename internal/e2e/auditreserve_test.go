package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAuditGuardCountsRootsSpace (issue 27): the free-space guard counts
// the space rootgated may write, the blocks the file system keeps for root
// included (f_bfree). An ordinary uid that shares the audit log's file
// system fills all it may (f_bavail 0); root's requests are still served
// and recorded. Counting f_bavail, the guard would refuse everyone's.
func TestAuditGuardCountsRootsSpace(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("no loop device on this machine: %v", err)
	}
	filler := addAccount(t, "rgresfill")
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	img, mnt := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 32<<20); err != nil {
		t.Fatal(err)
	}
	// Half of it kept for root: 16 MiB.
	if out, err := exec.Command("mkfs.ext2", "-q", "-F", "-m", "50", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext2: %v\n%s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	if err := os.Chmod(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	logDir, home := filepath.Join(mnt, "log"), filepath.Join(mnt, "home")
	for _, d := range []string{logDir, home} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(home, int(filler.uid), int(filler.gid)); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{Args: []string{"--audit", auditPath(logDir), "--audit-min-free", "2M"}})
	wantOK(t, d.send(map[string]any{"id": "before-fill", "pipeline": [][]string{{"true"}}}))

	// The ordinary uid writes until the file system refuses it.
	fill := exec.Command("setpriv", "--reuid="+strconv.Itoa(int(filler.uid)), "--regid="+strconv.Itoa(int(filler.gid)), "--clear-groups",
		"dd", "if=/dev/zero", "of="+filepath.Join(home, "fill"), "bs=64k")
	out, err := fill.CombinedOutput()
	if err == nil {
		t.Fatalf("dd as uid %d did not run out of space:\n%s", filler.uid, out)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	if avail, free := int64(st.Bavail)*st.Bsize, int64(st.Bfree)*st.Bsize; avail > 1<<20 || free < 8<<20 {
		t.Fatalf("after the fill: %d bytes available to others, %d free for root; want the first near 0 and the second ~16 MiB; dd said:\n%s", avail, free, out)
	}

	r := wantOK(t, d.send(map[string]any{"id": "after-fill", "pipeline": [][]string{{"true"}}}))
	if !r.HasRun() {
		t.Fatalf("after the fill: %s, want it run", r.raw)
	}
	waitTrail(t, logDir, "after-fill", "received decided started finished")
}
