package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestSudoGroupRunsAsInvoker: "sudo -g GROUP CMD" without -u runs CMD as
// the user who typed it, with GROUP as its primary group (sudo(8)); an
// agent (here nobody) typing it through the real rootgate sudo gets a
// request to run as itself with that group, never one to run as root
// with it, which a rule for the group (rungroup=) alone would let run as
// root. With -u, the account named is used, as before.
func TestSudoGroupRunsAsInvoker(t *testing.T) {
	t.Parallel()
	dir := testutil.ShortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Both readings are allowed, so the output says which was sent.
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: dir, Policy: `allow privileged,rungroup=adm id -un
allow privileged,rungroup=adm id -gn
allow privileged,runas=nobody,rungroup=adm id -un
allow privileged,runas=nobody,rungroup=adm id -gn
`})
	if err := os.Chmod(d.Sock, 0o666); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sudo")
	if err := os.Symlink(rgtest.Rootgate(t), bin); err != nil {
		t.Fatal(err)
	}
	as := func(uid uint32, bin string, args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/bin:/bin", "ROOTGATE_SOCKET=" + d.Sock}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s %q as uid %d: %v\n%s", bin, args, uid, err, &e)
		}
		return o.String()
	}
	for _, tc := range []struct {
		uid  uint32
		args []string
		want string
	}{
		{65534, []string{"-g", "adm", "id", "-un"}, "nobody\n"},
		{65534, []string{"--group=adm", "id", "-gn"}, "adm\n"},
		{65534, []string{"-gadm", "-u", "root", "id", "-un"}, "root\n"},
		{0, []string{"-g", "adm", "id", "-un"}, "root\n"}, // root typed it: root it is
	} {
		if got := as(tc.uid, bin, tc.args...); got != tc.want {
			t.Errorf("sudo %q as uid %d printed %q, want %q", tc.args, tc.uid, got, tc.want)
		}
	}
	// rootgate run --group reads the same way.
	for _, tc := range []struct {
		uid  uint32
		args []string
		want string
	}{
		{65534, []string{"--group", "adm", "--", "id", "-un"}, "nobody\n"},
		{65534, []string{"--group", "adm", "--", "id", "-gn"}, "adm\n"},
		{65534, []string{"--group", "adm", "--user", "nobody", "--", "id", "-un"}, "nobody\n"},
		{0, []string{"--group", "adm", "--", "id", "-un"}, "root\n"},
	} {
		if got := as(tc.uid, rgtest.Rootgate(t), append([]string{"run"}, tc.args...)...); got != tc.want {
			t.Errorf("rootgate run %q as uid %d printed %q, want %q", tc.args, tc.uid, got, tc.want)
		}
	}
}
