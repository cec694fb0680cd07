package client

import (
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil"
)

// TestPermissionHint: the hint for a socket that refused this user
// follows what rootgated does with group rootgate: no group yet (create
// it, then restart the daemon, then usermod), a socket made before the
// group existed (restart the daemon), and a socket of the group (usermod).
func TestPermissionHint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (it creates group rootgate): run the tests as root")
	}
	testutil.LockGroup(t)
	if _, err := user.LookupGroup("rootgate"); err != nil {
		sock := filepath.Join(t.TempDir(), "s")
		if h := PermissionHint(sock); !strings.Contains(h, "group rootgate does not exist; create it (sudo groupadd --system rootgate), restart rootgated") {
			t.Errorf("without the group: %q", h)
		}
		if out, err := exec.Command("groupadd", "--system", "rootgate").CombinedOutput(); err != nil {
			t.Fatalf("groupadd: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("groupdel", "rootgate").Run() })
	}
	g, err := user.LookupGroup("rootgate")
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.Atoi(g.Gid)
	sock := filepath.Join(testutil.ShortDir(t), "s")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if h := PermissionHint(sock); !strings.Contains(h, "not group rootgate's, as rootgated started before the group existed; restart rootgated") {
		t.Errorf("a socket of root's group: %q", h)
	}
	if err := os.Chown(sock, 0, gid); err != nil {
		t.Fatal(err)
	}
	if h := PermissionHint(sock); h != "only root and members of group rootgate may connect: sudo usermod -aG rootgate $USER, then log in again" {
		t.Errorf("a socket of group rootgate: %q", h)
	}
}
