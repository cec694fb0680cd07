package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// wantNoApprover asserts the answer of a request a person would have been
// asked about, to a daemon with nobody to ask.
func wantNoApprover(t testing.TB, r response) {
	t.Helper()
	if r.Status != wire.StatusDenied || (r.Message != wire.ErrNoApprover.Error() || r.Code != wire.CodeNoApprover) {
		t.Fatalf("got %s, want it put to a person (denied: %s)", strings.TrimSpace(r.raw), wire.ErrNoApprover.Error())
	}
}

// TestPolicyEnvAttacks: an allow rule does not carry a requester's env
// into a root program. Env values root programs read as code or as a path
// are refused whatever the rule says (debconf evaluates DEBIAN_FRONTEND as
// Perl; LANGUAGE with ".." makes gettext load the requester's catalogs),
// and a valid env rides along only where the rule's env= admits it, else a
// person is asked. Next to each, the legitimate use runs without a prompt.
func TestPolicyEnvAttacks(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	marker := filepath.Join(dir, "pwned")
	d := startDaemon(t, opts{Policy: "allow privileged,env=DEBIAN_FRONTEND debconf-communicate\n" +
		"allow privileged apt-get update\n" +
		"allow privileged,session=strict printenv LANG\n" +
		"allow privileged,session=admit,env=LANG printenv LANG\n"})

	t.Run("a Perl DEBIAN_FRONTEND is refused even where env= admits the key", func(t *testing.T) {
		payload := "noninteractive;BEGIN{system(q(touch " + marker + "))}#"
		r := d.send(map[string]any{"pipeline": [][]string{{"debconf-communicate"}}, "env": map[string]string{"DEBIAN_FRONTEND": payload}})
		wantError(t, r, `env "DEBIAN_FRONTEND" must be one of "noninteractive", "readline", "teletype", "text", "dialog", "editor"`)
		if _, err := os.Lstat(marker); err == nil {
			t.Fatal("debconf ran the requester's Perl as root")
		}
	})
	t.Run("a debconf frontend name runs without a prompt", func(t *testing.T) {
		r := wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"debconf-communicate"}}, "env": map[string]string{"DEBIAN_FRONTEND": "noninteractive"}}))
		if len(r.Stages) != 1 || strings.Contains(string(r.Stages[0].Stderr), "unable to initialize frontend") {
			t.Fatalf("debconf-communicate: %s", r.raw)
		}
	})
	t.Run("LANGUAGE climbing out of the catalogs is refused", func(t *testing.T) {
		r := d.send(map[string]any{"pipeline": [][]string{{"apt-get", "update"}}, "env": map[string]string{"LANG": "C.UTF-8", "LANGUAGE": "../../../../tmp/x"}})
		wantError(t, r, `env "LANGUAGE" must be a ":"-separated list of locale names such as "de_DE:en" (no "/")`)
	})
	t.Run("a LANG path is refused", func(t *testing.T) {
		r := d.send(map[string]any{"pipeline": [][]string{{"apt-get", "update"}}, "env": map[string]string{"LANG": "/tmp/x"}})
		wantError(t, r, `env "LANG" must be a locale name such as "C.UTF-8" or "en_US.UTF-8" (language[_territory][.codeset][@modifier]; no "/")`)
	})
	t.Run("a valid LANG the rule does not admit asks", func(t *testing.T) {
		wantNoApprover(t, d.send(map[string]any{"pipeline": [][]string{{"apt-get", "update"}}, "env": map[string]string{"LANG": "C.UTF-8"}}))
		wantNoApprover(t, d.send(map[string]any{"session": "strict", "pipeline": [][]string{{"printenv", "LANG"}}, "env": map[string]string{"LANG": "de_DE.UTF-8"}}))
	})
	t.Run("a rule with env=LANG runs it without a prompt", func(t *testing.T) {
		r := wantOK(t, d.send(map[string]any{"session": "admit", "pipeline": [][]string{{"printenv", "LANG"}}, "env": map[string]string{"LANG": "de_DE.UTF-8"}}))
		if string(r.Stdout) != "de_DE.UTF-8\n" {
			t.Fatalf("the run saw LANG=%q", r.Stdout)
		}
		// Without env, the rule without env= allows too.
		r = wantOK(t, d.send(map[string]any{"session": "strict", "pipeline": [][]string{{"printenv", "LANG"}}}))
		if len(r.Stdout) != 0 || len(r.Stages) != 1 || r.Stages[0].ExitCode != 1 {
			t.Fatalf("the run saw LANG: %s", r.raw)
		}
	})
	t.Run("env= admits only the keys it names", func(t *testing.T) {
		wantNoApprover(t, d.send(map[string]any{"session": "admit", "pipeline": [][]string{{"printenv", "LANG"}}, "env": map[string]string{"LANG": "C", "TZ": "UTC"}}))
	})
}

// TestPolicyGlobDotComponents: a glob in an allow rule does not reach
// outside the directory it names through "." or ".." components, nor
// through a symlink followed by "..": such a request is put to a person
// (here: denied, nobody to ask) and nothing changes owner. A clean path
// under the directory is allowed.
func TestPolicyGlobDotComponents(t *testing.T) {
	t.Parallel()
	dir := shortDir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	pub := filepath.Join(dir, "pub")
	outside := filepath.Join(dir, "outside")
	for _, p := range []string{pub, filepath.Join(outside, "inner")} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(pub, "file"), filepath.Join(dir, "secret")} {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A link the requester planted in the directory it may hand over.
	if err := os.Symlink(filepath.Join(outside, "inner"), filepath.Join(pub, "link")); err != nil {
		t.Fatal(err)
	}
	d := startDaemon(t, opts{Policy: "allow privileged chown nobody " + pub + "/*\n" +
		"allow privileged chown nobody " + pub + "/*/*\n"})
	owner := func(p string) uint32 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	for _, tc := range []struct{ arg, target string }{
		{pub + "/..", dir},
		{pub + "/../secret", filepath.Join(dir, "secret")},
		{pub + "/../../" + filepath.Base(dir) + "/secret", filepath.Join(dir, "secret")},
		{pub + "/link/..", outside},
		{pub + "/./file", filepath.Join(pub, "file")},
		{pub + "//file", filepath.Join(pub, "file")},
		{pub + "/.", pub},
	} {
		t.Run(tc.arg, func(t *testing.T) {
			wantNoApprover(t, d.send(map[string]any{"pipeline": [][]string{{"chown", "nobody", tc.arg}}}))
			if u := owner(tc.target); u != 0 {
				t.Fatalf("%s is owned by uid %d: chown ran", tc.target, u)
			}
		})
	}
	t.Run("a clean path under the directory runs", func(t *testing.T) {
		wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"chown", "nobody", pub + "/file"}}}))
		if u := owner(filepath.Join(pub, "file")); u != 65534 {
			t.Fatalf("%s/file is owned by uid %d, want nobody", pub, u)
		}
	})
}
