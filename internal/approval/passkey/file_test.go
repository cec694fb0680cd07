package passkey

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil"
	"golang.org/x/sys/unix"
)

const testOrigin = "http://localhost:8443"

// enrolSoft enrols a software authenticator's passkey into a new file at
// path, as rootgated does (BeginEnrol, Finish, Add, Save).
func enrolSoft(t *testing.T, path string) (*File, *testutil.SoftKey) {
	t.Helper()
	f := &File{Version: FileVersion}
	en, err := f.BeginEnrol("soft", testOrigin)
	if err != nil {
		t.Fatal(err)
	}
	k := testutil.NewSoftKey()
	e, err := en.Finish(f, []byte(k.Attest(en.Challenge, testOrigin, "localhost")))
	if err != nil {
		t.Fatal(err)
	}
	if want := Fingerprint(k.CreationData("localhost")); e.Fingerprint != want || e.ID != base64.RawURLEncoding.EncodeToString(k.ID) {
		t.Fatalf("enrolled %s, fingerprint %q; want %q", e.ID, e.Fingerprint, want)
	}
	f.Add(en, e)
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	return f, k
}

// assert is k's assertion over challenge.
func assert(k *testutil.SoftKey, challenge []byte) *Assertion {
	id, ad, cd, sig := k.Assert(challenge, testOrigin, "localhost")
	return &Assertion{CredentialID: id, AuthenticatorData: ad, ClientData: cd, Signature: sig}
}

// TestLoadRefusesDirectories: a passkeys file that someone other than
// root could replace, through a directory on its path, is not read, nor
// written; nor is a missing one taken for an empty file there (the tests
// run as root; uid 65534 stands for another user).
func TestLoadRefusesDirectories(t *testing.T) {
	top := t.TempDir()
	for _, c := range []struct {
		name string
		mode os.FileMode
		uid  int
		want string
	}{
		{"a directory others may write", 0o777, 0, "is writable by group or others"},
		{"a directory of another user's", 0o755, 65534, "is owned by uid 65534, not by root"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(top, strings.ReplaceAll(c.name, " ", "-"))
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "passkeys.json")
			if err := (&File{Version: FileVersion}).Save(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, c.mode); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, c.uid, c.uid); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(path); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load = %v, want %q", err, c.want)
			}
			k := &Keeper{Path: path}
			if _, err := k.Load(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Keeper.Load = %v, want %q", err, c.want)
			}
			if err := (&File{Version: FileVersion}).Save(path); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Save = %v, want %q", err, c.want)
			}
			if _, err := Load(filepath.Join(dir, "missing.json")); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load of a missing file = %v, want %q", err, c.want)
			}
		})
	}
}

// TestSaveOwnTempName: a save writes a file of a new name of its own,
// so what is at another name (a fixed NAME.tmp, left by a crash or by
// another writer under way) neither stops it nor is taken for it, and it
// leaves nothing beside the file.
func TestSaveOwnTempName(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "passkeys.json")
	if err := os.MkdirAll(filepath.Join(path+".tmp", "busy"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := (&File{Version: FileVersion, RPID: "localhost"}).Save(path); err != nil {
		t.Fatalf("a save with something at %s.tmp: %v", path, err)
	}
	if f, err := Load(path); err != nil || f.RPID != "localhost" {
		t.Fatalf("after the save: %+v %v", f, err)
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*"))
	hidden, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(names) != 2 || len(hidden) != 0 {
		t.Fatalf("a save left %v %v", names, hidden)
	}
}

// TestKeeperKeeps: the Keeper reads the file once and keeps it, saves
// each counter before the assertion counts, and reads the file again
// when someone else replaced or rewrote it.
func TestKeeperKeeps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "passkeys.json")
	_, key := enrolSoft(t, path)
	k := &Keeper{Path: path}
	for i := range 3 {
		e, err := k.Verify(assert(key, Challenge("h", "n", 0, false)), Challenge("h", "n", 0, false))
		if err != nil {
			t.Fatalf("assertion %d: %v", i, err)
		}
		f, err := Load(path)
		if err != nil || f.Passkeys[0].Credential.Authenticator.SignCount != e.Credential.Authenticator.SignCount || e.Credential.Authenticator.SignCount != key.Counter {
			t.Fatalf("assertion %d: the counter on disk is %+v (%v), want %d", i, f, err, key.Counter)
		}
	}
	if _, err := k.Load(); err != nil || k.reads != 1 {
		t.Fatalf("the file was read %d times for 3 assertions and a load (%v); want once", k.reads, err)
	}
	// An assertion whose counter did not advance is refused.
	key.Counter--
	if _, err := k.Verify(assert(key, Challenge("h", "n", 0, false)), Challenge("h", "n", 0, false)); err == nil {
		t.Fatal("an assertion with a counter not past the saved one was taken")
	}
	// Another writer replaces the file (a rename: another inode).
	f, _ := Load(path)
	f.Passkeys[0].Name = "renamed"
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	if g, err := k.Load(); err != nil || g.Passkeys[0].Name != "renamed" {
		t.Fatalf("after a replace: %+v %v", g, err)
	}
	// Root writes it in place.
	b, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), `"renamed"`, `"renamed again"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if g, err := k.Load(); err != nil || g.Passkeys[0].Name != "renamed again" {
		t.Fatalf("after a write in place: %+v %v", g, err)
	}
	// A change to the copy Load gave is not the file's.
	g, _ := k.Load()
	g.Remove(g.Passkeys[0].ID)
	if h, _ := k.Load(); len(h.Passkeys) != 1 {
		t.Fatal("a change to a loaded copy changed the kept file")
	}
	// A directory on the path that others may write is refused at the
	// next use, though the file itself did not change.
	if err := os.Chmod(filepath.Dir(path), 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Verify(assert(key, Challenge("h", "n", 0, false)), Challenge("h", "n", 0, false)); err == nil || !strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("with its directory open to all: %v", err)
	}
}

// TestKeeperFailedSaveRefuses: when the new counter cannot be saved, the
// assertion is refused, and the next one is checked against the file as
// it is. The file is on a file system made read-only under it.
func TestKeeperFailedSaveRefuses(t *testing.T) {
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m,mode=0755"); err != nil {
		t.Fatalf("mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	path := filepath.Join(mnt, "passkeys.json")
	_, key := enrolSoft(t, path)
	k := &Keeper{Path: path}
	ch := Challenge("h", "n", 0, false)
	if _, err := k.Verify(assert(key, ch), ch); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("", mnt, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("remount read-only: %v", err)
	}
	if _, err := k.Verify(assert(key, ch), ch); err == nil || !strings.Contains(err.Error(), "read-only file system") {
		t.Fatalf("an assertion whose counter could not be saved: %v", err)
	}
	if f, _ := Load(path); f.Passkeys[0].Credential.Authenticator.SignCount != 1 {
		t.Fatalf("counter on disk %d, want 1", f.Passkeys[0].Credential.Authenticator.SignCount)
	}
}
