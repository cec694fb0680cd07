package testutil

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// FailingDisk mounts an ext2 file system on a loop device whose 64 MiB
// image lives on an 8 MiB tmpfs, and returns the mount point and a
// function that fills the tmpfs and one that frees it again. With the
// tmpfs full, writes to the ext2 still succeed (they go to the page cache,
// and ext2 believes it has room) but writing them back fails: fsync(2)
// reports the error, as it does on a failing disk.
func FailingDisk(t *testing.T) (mnt string, fill, free func()) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root to mount a loop device")
	}
	dir := t.TempDir()
	back, mnt := Tmpfs(t, filepath.Join(dir, "back"), "8m"), filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	img := filepath.Join(back, "img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext2", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext2: %v\n%s", err, out)
	}
	// mount(8) sets up the loop device, and frees it at the unmount.
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		if _, serr := os.Stat("/dev/loop-control"); serr != nil {
			// A machine without loop devices (a container) cannot
			// make fsync fail for real: not a pass, a skip that says so.
			t.Skipf("no loop device on this machine (%v): mount: %v\n%s", serr, err, out)
		}
		t.Fatalf("mount: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, 0); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	filler := filepath.Join(back, "filler")
	fill = func() {
		f, err := os.Create(filler)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		chunk := make([]byte, 64<<10)
		for {
			if _, err := f.Write(chunk); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				return
			}
		}
	}
	free = func() {
		if err := os.Remove(filler); err != nil {
			t.Fatal(err)
		}
	}
	return mnt, fill, free
}

// Tmpfs makes the directory dir and mounts a tmpfs of size (a size= of
// tmpfs, "64k") on it, mode 0700, unmounted when t ends; it returns dir.
func Tmpfs(t *testing.T, dir, size string) string {
	t.Helper()
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A loop device on a file here (FailingDisk) lets go of it only
		// some time after its own unmount: busy until then.
		var err error
		Poll(10*time.Second, func() bool {
			err = syscall.Unmount(dir, 0)
			return err != syscall.EBUSY
		})
		if err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
