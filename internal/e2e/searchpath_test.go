package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/pipeline"
	"github.com/rootgate/rootgate/wire"
)

// TestSearchPathLeavesOutOthersDirs: a directory of the fixed search path
// that the requester may write to (here /usr/local/sbin, first in the
// path, the requester's own directory in the daemon's mount namespace, as
// a /usr/local handed over for `npm -g` is) never gives the requester's
// file the identity of a privileged run it asks for. A bare name is not
// found there, and the run's PATH leaves it out, so that a command the
// approved program runs by name (a maintainer script's `systemctl`, a
// shell's `id`) is root's file, not the requester's; a name found only
// there is not found, and the error says where it is and why that
// directory is left out. The daemon says at start what it leaves out.
// Root's own requests keep the whole path.
func TestSearchPathLeavesOutOthersDirs(t *testing.T) {
	t.Parallel()
	ag := addAccount(t, "rgpathag")
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sbin := filepath.Join(dir, "sbin")
	if err := os.Mkdir(sbin, 0o755); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(sbin, "id")
	if err := os.WriteFile(planted, []byte("#!/bin/sh\necho \"the requester's file ran as uid $(/usr/bin/id -u)\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A command found nowhere else in the path.
	only := filepath.Join(sbin, "rgpath-only")
	if err := os.WriteFile(only, []byte("#!/bin/sh\necho only\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The requester's link there to a file in a directory only root may
	// enter: whether that file exists is not the requester's to learn.
	secret := filepath.Join(dir, "secret")
	if err := os.Mkdir(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "tool"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	peek := filepath.Join(sbin, "rgpath-peek")
	if err := os.Symlink(filepath.Join(secret, "tool"), peek); err != nil {
		t.Fatal(err)
	}
	if err := os.Lchown(peek, int(ag.uid), int(ag.gid)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{sbin, planted, only} {
		if err := os.Chown(p, int(ag.uid), int(ag.gid)); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t, opts{
		Policy: "allow privileged id -un\nallow privileged sh -c ...\nallow privileged rgpath-only\n",
		Prefix: []string{"unshare", "--mount", "--propagation", "private", "sh", "-c", `mount --bind "$0" /usr/local/sbin && exec "$@"`, sbin},
	})
	openToAll(t, d)
	if want := "/usr/local/sbin is owned by uid "; !strings.Contains(d.Stderr.String(), want) {
		t.Errorf("the daemon did not say at start that it leaves /usr/local/sbin out (%q):\n%s", want, d.Stderr)
	}
	as := func(uid, gid uint32, argv ...string) response {
		t.Helper()
		return sendAs(t, d.Sock, uid, gid, []uint32{gid}, request(map[string]any{"pipeline": [][]string{argv}}))
	}
	safe := strings.TrimPrefix(pipeline.SearchPath, "/usr/local/sbin:")

	r := wantOK(t, as(ag.uid, ag.gid, "id", "-un"))
	if string(r.Stdout) != "root\n" {
		t.Errorf("id -un, found by name: stdout %q, want root's id to run", r.Stdout)
	}
	r = wantOK(t, as(ag.uid, ag.gid, "sh", "-c", `id -un; echo "$PATH"`))
	if want := "root\n" + safe + "\n"; string(r.Stdout) != want {
		t.Errorf("sh -c 'id -un; echo $PATH': stdout %q, want %q", r.Stdout, want)
	}
	// Not found where the requester's privileged run looks, and the
	// error says where it is and why that directory is left out.
	r = as(ag.uid, ag.gid, "rgpath-only")
	if want := fmt.Sprintf(`stage 1: executable not found: "rgpath-only": /usr/local/sbin has it, but is left out of the search path of privileged runs: /usr/local/sbin is owned by uid %d, not by root`, ag.uid); r.Status != wire.StatusError || r.Code != wire.CodeNotFound || r.Message != want {
		t.Errorf("rgpath-only: got %s, want code %s and message %q", r.raw, wire.CodeNotFound, want)
	}
	r = as(ag.uid, ag.gid, "rgpath-peek")
	if want := wire.NotFoundError(1, "rgpath-peek").Error(); r.Status != wire.StatusError || r.Code != wire.CodeNotFound || r.Message != want {
		t.Errorf("the requester's link to root's hidden file: got %s, want code %s and message %q", r.raw, wire.CodeNotFound, want)
	}
	r = wantOK(t, as(0, 0, "rgpath-only"))
	if string(r.Stdout) != "only\n" {
		t.Errorf("root's rgpath-only: stdout %q, want only", r.Stdout)
	}
	r = wantOK(t, as(0, 0, "sh", "-c", `echo "$PATH"`))
	if want := pipeline.SearchPath + "\n"; string(r.Stdout) != want {
		t.Errorf("root's run: PATH %q, want %q", r.Stdout, want)
	}
}
