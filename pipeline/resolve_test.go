package pipeline

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// mkfile creates path (and its directories) with the given mode.
func mkfile(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // beyond the umask
		t.Fatal(err)
	}
}

func TestResolveBareName(t *testing.T) {
	// A name found only in $PATH must not resolve.
	dir := t.TempDir()
	mkfile(t, filepath.Join(dir, "rootgate-only-in-path"), 0o755)
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))

	e, err := Resolve("sh", "/nonexistent")
	if err != nil {
		t.Fatal(err)
	}
	var want string
	for _, d := range filepath.SplitList(SearchPath) {
		if fd, _, err := openExecutable(d + "/sh"); err == nil {
			unix.Close(fd)
			want = d + "/sh"
			break
		}
	}
	if e.Path != want {
		t.Errorf("Resolve(sh).Path = %q, want %q (first in SearchPath)", e.Path, want)
	}

	_, err = Resolve("rootgate-only-in-path", dir)
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("Resolve of a name only in $PATH: err = %v, want ErrNotFound", err)
	}
	if got, want := err.Error(), `executable not found: "rootgate-only-in-path"`; got != want {
		t.Errorf("error = %q, want %q", got, want)
	}
}

func TestResolveRelative(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "bin", "tool")
	mkfile(t, tool, 0o755)
	for _, name := range []string{"bin/tool", "./bin/tool", "bin//./tool"} {
		e, err := Resolve(name, dir)
		if err != nil {
			t.Fatalf("Resolve(%q): %v", name, err)
		}
		if e != (Executable{Path: tool}) {
			t.Errorf("Resolve(%q) = %+v, want Path %q", name, e, tool)
		}
	}
	if e, err := Resolve(tool, "/"); err != nil || e.Path != tool {
		t.Errorf("Resolve(%q) = %+v, %v", tool, e, err)
	}

	// ".." after a symlinked directory: the kernel goes up from the link's
	// target, not lexically. dir/link -> dir/a/b; "../tool" from dir/link is
	// dir/a/tool, while the lexical dir/tool does not exist.
	mkfile(t, filepath.Join(dir, "a", "tool"), 0o755)
	if err := os.Mkdir(filepath.Join(dir, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "a", "b"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	e, err := Resolve("../tool", filepath.Join(dir, "link"))
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "link") + "/../tool"; e.Path != want {
		t.Errorf("Resolve(../tool) = %q, want %q", e.Path, want)
	}

	if _, err := Resolve("bin/tool", "relative/cwd"); err == nil || errors.Is(err, ErrNotFound) {
		t.Errorf("Resolve with a relative cwd: err = %v, want a non-ErrNotFound error", err)
	}
}

func TestResolveNotExecutable(t *testing.T) {
	dir := t.TempDir()
	mkfile(t, filepath.Join(dir, "plain"), 0o644)
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("nowhere", filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want string }{
		{"", `executable not found: ""`},
		{"rootgate-no-such-command", `executable not found: "rootgate-no-such-command"`},
		{"./missing", `executable not found: "./missing": no such file or directory`},
		{"./plain", `executable not found: "./plain": not executable`},
		{"./sub", `executable not found: "./sub": is a directory`},
		{"sub/", `executable not found: "sub/": is a directory`},
		{"./dangling", `executable not found: "./dangling": no such file or directory`},
		{"./plain/x", `executable not found: "./plain/x": not a directory`},
		{"/dev/null", `executable not found: "/dev/null": not a regular file`},
		{"/", `executable not found: "/": is a directory`},
	} {
		_, err := Resolve(tc.name, dir)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%q): err = %v, want ErrNotFound", tc.name, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("Resolve(%q): err = %q, want %q", tc.name, err, tc.want)
		}
	}
}

func TestResolveSymlink(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "real")
	mkfile(t, exe, 0o755)
	if err := os.Symlink("real", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "link"), filepath.Join(dir, "link2")); err != nil {
		t.Fatal(err)
	}
	target, err := filepath.EvalSymlinks(exe) // the temp dir may sit behind a symlink
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"link", "link2"} {
		e, err := Resolve("./"+name, dir)
		if err != nil {
			t.Fatal(err)
		}
		if want := (Executable{Path: filepath.Join(dir, name), Target: target}); e != want {
			t.Errorf("Resolve(./%s) = %+v, want %+v", name, e, want)
		}
	}
	// Not a symlink: no Target.
	if e, err := Resolve(exe, "/"); err != nil || e.Target != "" {
		t.Errorf("Resolve(%q) = %+v, %v; want no Target", exe, e, err)
	}
}

func TestSearchPath(t *testing.T) {
	want := []string{"/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"}
	if got := filepath.SplitList(SearchPath); !slices.Equal(got, want) {
		t.Errorf("SearchPath = %q", got)
	}
}

// TestResolveRefusesMagicLinks: a path through a /proc magic link, written
// as such or reached through a symlink, names a file as the process that
// follows it sees it (its cwd, its root, its descriptors), so Resolve, Pin
// and OpenDir refuse it; a bare name never reaches one.
func TestResolveRefusesMagicLinks(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/proc/self/root/usr/bin/true", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"/proc/self/cwd/usr/bin/true", "/proc/self/root/usr/bin/true", "/proc/self/exe", "./link"} {
		_, err := Resolve(name, dir)
		if !errors.Is(err, ErrMagicLink) || errors.Is(err, ErrNotFound) {
			t.Errorf("Resolve(%q): %v, want ErrMagicLink", name, err)
			continue
		}
		if want := `resolve "` + name + `": ` + ErrMagicLink.Error(); err.Error() != want {
			t.Errorf("Resolve(%q): %q, want %q", name, err, want)
		}
	}
	if p, err := Pin(filepath.Join(dir, "link")); !errors.Is(err, ErrMagicLink) {
		if err == nil {
			p.Close()
		}
		t.Errorf("Pin through a magic link: %v, want ErrMagicLink", err)
	}
	for _, d := range []string{"/proc/self/cwd", "/proc/self/root/tmp"} {
		if f, err := OpenDir(d); !errors.Is(err, ErrMagicLink) {
			if err == nil {
				f.Close()
			}
			t.Errorf("OpenDir(%q): %v, want ErrMagicLink", d, err)
		}
	}
	if e, err := Resolve("true", dir); err != nil || e.Path != "/usr/bin/true" {
		t.Errorf("Resolve(true) = %+v, %v", e, err)
	}
}

// TestRootsAlone: a search path directory is kept only when no one but
// root can put a file in it or swap it: its owner, its mode (sticky or
// not), and every entry on the way to it and the directory it is in
// (sticky ones may be written by others, but only root's entries are
// kept there), links followed as the kernel does, links of links too.
func TestRootsAlone(t *testing.T) {
	base := t.TempDir() // under /tmp: root's, sticky
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, mode os.FileMode, uid int) string {
		t.Helper()
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, -1); err != nil {
			t.Fatal(err)
		}
		return p
	}
	roots := mk("roots", 0o755, 0)
	others := mk("others", 0o755, 65534)
	group := mk("group", 0o775, 0)
	sticky := mk("sticky", os.ModeSticky|0o777, 0)
	under := mk("others/bin", 0o755, 0)
	inSticky := mk("sticky/bin", 0o755, 0)
	link := filepath.Join(roots, "link")
	if err := os.Symlink(under, link); err != nil {
		t.Fatal(err)
	}
	// Links in the sticky directory: one of another's, which its owner
	// may re-point, and one of root's, which no one else may rename.
	othersLink, rootsLink := filepath.Join(sticky, "theirs"), filepath.Join(sticky, "roots")
	for _, l := range []string{othersLink, rootsLink} {
		if err := os.Symlink(roots, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Lchown(othersLink, 65534, -1); err != nil {
		t.Fatal(err)
	}
	// Root's link to the other's link, and a walk back out with "..".
	chain, dotdot := filepath.Join(roots, "chain"), filepath.Join(roots, "up")
	if err := os.Symlink(othersLink, chain); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../others/bin", dotdot); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir  string
		want string // "" for kept
	}{
		{roots, ""},
		{inSticky, ""},
		{others, "is owned by uid 65534, not by root"},
		{group, "is writable by group or others"},
		{sticky, "is writable by group or others"},
		{under, "others is owned by uid 65534, not by root"},
		{link, "others is owned by uid 65534, not by root"},
		{othersLink, "theirs is owned by uid 65534, not by root"},
		{rootsLink, ""},
		{chain, "theirs is owned by uid 65534, not by root"},
		{dotdot, "others is owned by uid 65534, not by root"},
		{filepath.Join(rootsLink, "."), ""},
		{filepath.Join(base, "missing"), "no such file or directory"},
	} {
		err := rootsAlone(tc.dir)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("rootsAlone(%s) = %v, want it kept", tc.dir, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("rootsAlone(%s) = %v, want %q", tc.dir, err, tc.want)
		}
	}
}
