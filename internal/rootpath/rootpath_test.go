package rootpath

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// tree makes, under a root-owned 0755 directory: roots (root's, 0755),
// others (uid 65534's), group (root's, 0775), sticky (root's, 1777) with
// theirs (65534's link to roots) and mine (root's link to roots) in it,
// and roots/file (root's, 0644).
func tree(t *testing.T) (base string) {
	t.Helper()
	base = t.TempDir() // under /tmp: root's
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		name string
		mode os.FileMode
		uid  int
	}{
		{"roots", 0o755, 0}, {"others", 0o755, 65534}, {"group", 0o775, 0}, {"sticky", os.ModeSticky | 0o777, 0},
	} {
		p := filepath.Join(base, d.name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, d.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, d.uid, -1); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"theirs", "mine"} {
		if err := os.Symlink(filepath.Join(base, "roots"), filepath.Join(base, "sticky", l)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(filepath.Join(base, "sticky", "theirs"), 65534, -1); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "roots", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return base
}

// wantErr checks err against want ("" for none) and that it is about
// path.
func wantErr(t *testing.T, call, path string, err error, want string) {
	t.Helper()
	switch {
	case want == "" && err != nil:
		t.Errorf("%s(%s) = %v, want none", call, path, err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), path)):
		t.Errorf("%s(%s) = %v, want %q about the path", call, path, err, want)
	}
}

// TestFile: a file is root's alone when the whole path to it is, links
// followed, and it is not writable by group or others; Same also wants
// the walk to end at the file it was given.
func TestFile(t *testing.T) {
	base := tree(t)
	file := filepath.Join(base, "roots", "file")
	for _, tc := range []struct{ path, want string }{
		{file, ""},
		{filepath.Join(base, "sticky", "mine", "file"), ""},
		{filepath.Join(base, "sticky", "theirs", "file"), "theirs is owned by uid 65534, not by root"},
		{base + "/others/../roots/file", "others is owned by uid 65534, not by root"}, // walked, not cleaned away
		{filepath.Join(base, "roots", "missing"), "no such file or directory"},
		{"relative/file", "is a relative path"},
	} {
		wantErr(t, "File", tc.path, File(tc.path), tc.want)
	}
	if err := os.Chmod(file, 0o664); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "File", file, File(file), "is writable by group or others")
	if err := os.Chmod(file, 0o644); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "Same", file, Same(file, st.Dev, st.Ino), "")
	wantErr(t, "Same", file, Same(file, st.Dev, st.Ino+1), "no longer leads to the file found there")
}

// TestEntry: a name, there or not, in a directory only root may change
// the entries of (sticky included), reached through root's entries
// alone; the path as written, ".." after a link walked as the kernel
// walks it.
func TestEntry(t *testing.T) {
	base := tree(t)
	roots, sticky := filepath.Join(base, "roots"), filepath.Join(base, "sticky")
	// roots/up: root's link to others/sub, a root directory in a
	// directory of 65534's; up/.. is others, not roots.
	sub := filepath.Join(base, "others", "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(sub, filepath.Join(roots, "up")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(roots, "missing"), ""},
		{filepath.Join(roots, "file"), ""}, // the entry's own mode is the caller's to check
		{filepath.Join(sticky, "missing"), ""},
		{filepath.Join(sticky, "mine", "missing"), ""},
		{filepath.Join(base, "others", "missing"), "others is owned by uid 65534, not by root"},
		{filepath.Join(base, "group", "missing"), "group is writable by group or others"},
		{filepath.Join(sticky, "theirs", "missing"), "theirs is owned by uid 65534, not by root"},
		{filepath.Join(roots, "file", "missing"), "file: not a directory"},
		{filepath.Join(base, "missing", "missing"), "no such file or directory"},
		{roots + "/up/../missing", "others is owned by uid 65534, not by root"},
		{roots + "/..", "ends in .."},
		{"/", ""},
	} {
		wantErr(t, "Entry", tc.path, Entry(tc.path), tc.want)
	}
}

// TestAbs: a relative path is made absolute without dropping its "..".
func TestAbs(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := Abs("x/../y"); err != nil || got != wd+"/x/../y" {
		t.Errorf("Abs(x/../y) = %q, %v", got, err)
	}
	if got, err := Abs("/a/../b"); err != nil || got != "/a/../b" {
		t.Errorf("Abs(/a/../b) = %q, %v", got, err)
	}
}

// BenchmarkFile is the walk a privileged request of a user other than
// root needs when an allow rule matches it (the daemon's
// othersMayChange), here /bin/true, which on a merged-/usr system is a
// link to usr/bin:
//
//	go test -run '^$' -bench File ./internal/rootpath/
func BenchmarkFile(b *testing.B) {
	for b.Loop() {
		if err := File("/bin/true"); err != nil {
			b.Fatal(err)
		}
	}
}
