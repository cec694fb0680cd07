package pipeline

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestAsUser: inside AsUser, paths are followed with the account's file
// system identity (its uid, then its groups): a 0700 root directory is
// closed to nobody, a 0750 directory opens to a holder of its group. Only
// that call's thread has the identity, and only while fn runs: the caller,
// and goroutines running meanwhile, keep root's access.
func TestAsUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	base, err := os.MkdirTemp("", "rootgate-asuser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(base, "private")
	group := filepath.Join(base, "group")
	for dir, mode := range map[string]os.FileMode{private: 0o700, group: 0o750} {
		if err := os.Mkdir(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
	}
	const gid = 4242 // a group only the second account holds
	if err := os.Chown(group, 0, gid); err != nil {
		t.Fatal(err)
	}
	nobody := &Account{UID: 65534, GID: 65534, Groups: []uint32{}}
	member := &Account{UID: 65534, GID: 65534, Groups: []uint32{gid}}

	// Meanwhile, other goroutines open the private directory as root.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var rootFailed error
	var mu sync.Mutex
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if f, err := OpenDir(private); err != nil {
					mu.Lock()
					rootFailed = err
					mu.Unlock()
				} else {
					f.Close()
				}
			}
		})
	}
	for range 50 {
		err := AsUser(nobody, func() error {
			_, err := OpenDir(private)
			return err
		})
		if !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("OpenDir(0700 root dir) as nobody: %v, want permission denied", err)
		}
		if err := AsUser(nobody, func() error { _, err := OpenDir(group); return err }); !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("OpenDir(0750 dir of group %d) as nobody without it: %v, want permission denied", gid, err)
		}
		var held *os.File
		if err := AsUser(member, func() (err error) { held, err = OpenDir(group); return err }); err != nil {
			t.Fatalf("OpenDir(0750 dir of group %d) as its member: %v", gid, err)
		}
		held.Close()
	}
	close(stop)
	wg.Wait()
	if rootFailed != nil {
		t.Errorf("root could not open the private directory while AsUser ran: %v", rootFailed)
	}
	if f, err := OpenDir(private); err != nil {
		t.Errorf("the caller lost root's access: %v", err)
	} else {
		f.Close()
	}
}
