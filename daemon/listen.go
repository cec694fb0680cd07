package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/internal/rootpath"
)

// SocketGroup is the group whose members may send requests.
const SocketGroup = "rootgate"

// Listen binds the request socket at path. The directory is created (0755)
// when missing and must not be writable by anyone but its owner unless it is
// sticky. A socket a live daemon answers on is never replaced: that is an
// "address already in use" error; a stale one is removed first. The socket
// ends up 0660 root:rootgate when group rootgate exists, 0600 otherwise, and
// is removed when the listener is closed.
func Listen(path string) (*net.UnixListener, error) {
	return listen(path, func() (os.FileMode, int) {
		if g, err := user.LookupGroup(SocketGroup); err == nil {
			gid, _ := strconv.Atoi(g.Gid)
			return 0o660, gid
		}
		return 0o600, 0
	})
}

// ListenApprovers binds the approver socket at path like Listen, with mode
// 0600 root when only root may approve, and 0666 when others are admitted
// (open tells): the daemon then checks every peer's credentials itself and
// refuses the others with a reason they can read.
func ListenApprovers(path string, open bool) (*net.UnixListener, error) {
	return listen(path, func() (os.FileMode, int) {
		if open {
			return 0o666, 0
		}
		return 0o600, 0
	})
}

func listen(path string, perm func() (os.FileMode, int)) (*net.UnixListener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := checkDir(dir, false); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := removeStale(path); err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	// Bind with a restrictive umask so the socket is never reachable by
	// others before its mode is set; the old mask is restored for children.
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	mode, gid := perm()
	if err := os.Chown(path, 0, gid); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen: %w", err)
	}
	return ln, nil
}

// checkDir refuses a directory others could use to swap or plant what
// the daemon keeps in it: one not owned by root, or writable by group or
// others. A socket directory may be sticky and world-writable (as /tmp),
// since the socket is never replaced while it answers; a strict one (the
// runtime directory, whose files root rewrites) may not, nor be a symlink.
func checkDir(dir string, strict bool) error {
	stat := os.Stat
	if strict {
		stat = os.Lstat
	}
	fi, err := stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&0o022 != 0 && (strict || fi.Mode()&fs.ModeSticky == 0) {
		return fmt.Errorf("%s is writable by group or others: use a directory only root can write", dir)
	}
	if st.Uid != uint32(os.Geteuid()) && st.Uid != 0 {
		return fmt.Errorf("%s is owned by uid %d, not by root", dir, st.Uid)
	}
	if strict {
		return checkParents(dir)
	}
	return nil
}

// checkParents refuses a directory that someone other than root could
// swap for another (a symlink to /etc, say) through the path that leads
// to it: each entry on the way must be root's and each directory it is
// looked up in writable by root alone or sticky (/tmp), links followed as
// the kernel follows them ([rootpath.Entry]).
func checkParents(dir string) error {
	abs, err := rootpath.Abs(dir)
	if err != nil {
		return err
	}
	return rootpath.Entry(abs)
}

// removeStale removes a socket file nobody answers on.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("%s: address already in use: another rootgated answers there (stop it first)", path)
	}
	return os.Remove(path)
}
