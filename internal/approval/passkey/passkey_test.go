package passkey

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadRefuses: the file is root's alone, and never read through a
// symlink (the tests run as root; uid 65534 stands for another user).
func TestLoadRefuses(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("the passkey file tests run as root")
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.json")
	if err := (&File{Version: FileVersion}).Save(good); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(good); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("saved file: %v %v", fi.Mode(), err)
	}
	write := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(`{"version":1,"rp_id":"","origins":[],"passkeys":[]}`), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, want string
	}{
		{"group readable", write("g.json", 0o640, 0), "mode 0640: group or others may access it (it must be 0600)"},
		{"another user's", write("u.json", 0o600, 65534), "owned by uid 65534, not by root"},
		{"a symlink", link, "too many levels of symbolic links"},
		{"not a file", dir, "not a regular file"},
		{"unknown field", write("x.json", 0o600, 0), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.want == "" {
				if err := os.WriteFile(c.path, []byte(`{"version":1,"rp_id":"","origins":[],"passkeys":[],"extra":1}`), 0o600); err != nil {
					t.Fatal(err)
				}
				c.want = `unknown field "extra"`
			}
			if _, err := Load(c.path); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Load(%s) = %v, want %q", c.path, err, c.want)
			}
		})
	}
	f, err := Load(filepath.Join(dir, "missing.json"))
	if err != nil || len(f.Passkeys) != 0 || f.Version != FileVersion {
		t.Fatalf("missing file: %+v %v", f, err)
	}
	// Save replaces a symlink at the name; its target is untouched.
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(dir, "planted.json")
	if err := os.Symlink(target, planted); err != nil {
		t.Fatal(err)
	}
	if err := (&File{Version: FileVersion}).Save(planted); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(target); !bytes.Equal(b, []byte("keep")) {
		t.Fatalf("Save wrote through a symlink: %q", b)
	}
	if fi, err := os.Lstat(planted); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("Save left %v %v", fi, err)
	}
}

// TestChallengeBindsEverything: each part of what an approval signs
// changes the challenge, and no two parts run together.
func TestChallengeBindsEverything(t *testing.T) {
	base := Challenge("h", "n", 0, false)
	for name, c := range map[string][]byte{
		"hash":          Challenge("h2", "n", 0, false),
		"nonce":         Challenge("h", "n2", 0, false),
		"grant":         Challenge("h", "n", 900, false),
		"runs anything": Challenge("h", "n", 0, true),
		"shifted":       Challenge("hn", "", 0, false),
	} {
		if bytes.Equal(c, base) {
			t.Errorf("another %s gives the same challenge", name)
		}
	}
	enrol := EnrolChallenge("c", "phone", "id", []byte("key"))
	for name, c := range map[string][]byte{
		"creation challenge": EnrolChallenge("c2", "phone", "id", []byte("key")),
		"name":               EnrolChallenge("c", "phone2", "id", []byte("key")),
		"credential id":      EnrolChallenge("c", "phone", "id2", []byte("key")),
		"public key":         EnrolChallenge("c", "phone", "id", []byte("key2")),
		"shifted":            EnrolChallenge("c", "phoneid", "", []byte("key")),
	} {
		if bytes.Equal(c, enrol) {
			t.Errorf("another %s gives the same enrolment challenge", name)
		}
	}
}

func TestRPIDOf(t *testing.T) {
	for origin, want := range map[string]string{
		"https://approve.example.org:8443": "approve.example.org",
		"http://localhost:8443":            "localhost",
		"http://approve.example.org":       "",
		"https://approve.example.org/x":    "",
		"ftp://localhost":                  "",
		"https://approve.example.org#x":    "",
		"https://approve.example.org?":     "",
	} {
		got, err := RPIDOf(origin)
		if got != want || (want == "") != (err != nil) {
			t.Errorf("RPIDOf(%q) = %q, %v; want %q", origin, got, err, want)
		}
	}
}
