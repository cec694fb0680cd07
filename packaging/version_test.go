package packaging

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestVersion runs packaging/version.sh in a scratch repository: without
// tags, dirty, tagged, and with a VERSION file.
func TestVersion(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "packaging"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, nil, "cp", filepath.Join(root, "packaging/version.sh"), filepath.Join(dir, "packaging/"))
	env := []string{"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org"}
	git := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(run(t, env, "git", append([]string{"-C", dir}, args...)...))
	}
	version := func() string {
		t.Helper()
		return strings.TrimSpace(run(t, env, filepath.Join(dir, "packaging/version.sh")))
	}
	git("init", "-q")
	git("add", ".")
	git("commit", "-q", "-m", "one")
	hash := git("rev-parse", "--short", "HEAD")
	if got, want := version(), "0.0.0-dev.1+g"+hash; got != want {
		t.Errorf("untagged: %q, want %q", got, want)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	git("add", "f")
	if got, want := version(), "0.0.0-dev.1+g"+hash+".dirty"; got != want {
		t.Errorf("dirty: %q, want %q", got, want)
	}
	git("commit", "-q", "-m", "two")
	git("tag", "v1.2.3")
	if got := version(); got != "1.2.3" {
		t.Errorf("tagged: %q, want 1.2.3", got)
	}
	if err := os.WriteFile(filepath.Join(dir, "VERSION"), []byte("4.5.6\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := version(); got != "4.5.6" {
		t.Errorf("VERSION file: %q, want 4.5.6", got)
	}
}
