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
	"strings"
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
// ends up as [SocketAccess] says (0660 root:rootgate when group rootgate
// exists and has a gid in the daemon's user namespace, 0600 otherwise), and
// is removed when the listener is closed.
func Listen(path string) (*net.UnixListener, error) {
	return listen(path, func() (os.FileMode, int) {
		mode, gid, _ := SocketAccess()
		return mode, gid
	})
}

// SocketAccess is the request socket's mode and group: 0660 and group
// rootgate's gid when that group exists and its gid is mapped in this user
// namespace, else 0600 and root's group. Where the group exists but its
// gid has no mapping here (a daemon in a user namespace, on a machine that
// has the group), the socket cannot be given to it: the socket is root's
// alone, and why says so, for the daemon to log.
func SocketAccess() (mode os.FileMode, gid int, why string) {
	g, err := user.LookupGroup(SocketGroup)
	if err != nil {
		return 0o600, 0, ""
	}
	id, err := strconv.Atoi(g.Gid)
	if err != nil {
		return 0o600, 0, fmt.Sprintf("group %s has gid %q, not a number: the socket is root's alone", SocketGroup, g.Gid)
	}
	if !idMapped("/proc/self/gid_map", uint32(id)) {
		return 0o600, 0, fmt.Sprintf("group %s (gid %d) has no gid in this user namespace: the socket is root's alone", SocketGroup, id)
	}
	return 0o660, id, ""
}

// idMapped reports whether id falls in one of the ranges of the id map
// file (uid_map or gid_map: "inside outside count" lines) as an id inside
// this namespace. A map that cannot be read is taken for the initial
// namespace's, which maps every id.
func idMapped(mapFile string, id uint32) bool {
	b, err := os.ReadFile(mapFile)
	if err != nil {
		return true
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		in, err1 := strconv.ParseUint(f[0], 10, 32)
		n, err2 := strconv.ParseUint(f[2], 10, 32)
		if err1 == nil && err2 == nil && uint64(id) >= in && uint64(id) < in+n {
			return true
		}
	}
	return false
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
