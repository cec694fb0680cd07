package pipeline

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// pinDir is a directory nobody can enter too, with a copy of the test
// binary (an ELF helper) and a shell script.
func pinDir(t *testing.T) (dir, elf, script string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "rootgate-pin-") // t.TempDir's parent is 0700
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	elf = filepath.Join(dir, "tool")
	copyFile(t, testExe, elf, 0o755)
	script = filepath.Join(dir, "script")
	// Written under another name and copied, as copyFile says why.
	if err := os.WriteFile(script+".src", []byte("#!/bin/sh\necho script \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, script+".src", script, 0o755)
	return dir, elf, script
}

func pin(t *testing.T, path string) *Pinned {
	t.Helper()
	p, err := Pin(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestPinnedRuns: a pinned ELF binary and a pinned script both run, as
// root and as nobody.
func TestPinnedRuns(t *testing.T) {
	_, elf, script := pinDir(t)
	pe, ps := pin(t, elf), pin(t, script)
	if pe.Interpreted() || !ps.Interpreted() {
		t.Fatalf("Interpreted() = %v for the binary and %v for the script", pe.Interpreted(), ps.Interpreted())
	}
	nobody, err := LookupAccount(65534)
	if err != nil {
		t.Fatal(err)
	}
	for _, acct := range []*Account{nil, &nobody} {
		for _, tc := range []struct {
			argv []string
			p    *Pinned
			want string
		}{
			{helperArgv("echo", "pinned"), pe, "pinned\n"},
			{[]string{"script", "a"}, ps, "script a\n"},
		} {
			c := &Cmd{
				Argv:    [][]string{tc.argv},
				Paths:   []string{tc.p.Path},
				Pinned:  []*Pinned{tc.p},
				Env:     []string{"PATH=" + SearchPath},
				Account: acct,
			}
			res := run(t, c)
			checkStage(t, res, 0, 0, "")
			if got := string(res.Stdout.Bytes()); got != tc.want {
				t.Errorf("account %v: stdout %q, want %q", acct, got, tc.want)
			}
		}
	}
}

// TestPinnedSwapRefused: replacing the file at a resolved path, or
// changing the file itself, between resolution and run refuses the run.
func TestPinnedSwapRefused(t *testing.T) {
	for _, tc := range []struct {
		name   string
		target string // "elf" or "script"
		change func(t *testing.T, path string)
	}{
		{"rename over elf", "elf", func(t *testing.T, p string) { replace(t, p, []byte("#!/bin/sh\necho evil\n")) }},
		{"rename over script", "script", func(t *testing.T, p string) { replace(t, p, []byte("#!/bin/sh\necho evil\n")) }},
		{"write into script", "script", func(t *testing.T, p string) {
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteString("echo evil\n")
			f.Close()
		}},
		{"chmod script", "script", func(t *testing.T, p string) { os.Chmod(p, 0o4755) }},
		{"delete elf", "elf", func(t *testing.T, p string) { os.Remove(p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, elf, script := pinDir(t)
			path := script
			if tc.target == "elf" {
				path = elf
			}
			p := pin(t, path)
			tc.change(t, path)
			c := &Cmd{Argv: [][]string{{"x"}}, Paths: []string{path}, Pinned: []*Pinned{p}}
			_, err := c.Run(context.Background())
			if !errors.Is(err, ErrChanged) {
				t.Fatalf("Run after the change: %v, want %v", err, ErrChanged)
			}
			want := `run: stage 1: "` + path + `" changed since it was resolved`
			if err.Error() != want {
				t.Errorf("error %q, want %q", err, want)
			}
		})
	}
}

// TestPinnedRunsTheHeldFile: past the check, replacing the path of a
// pinned ELF binary or script cannot change what runs: an ELF binary is
// executed through the held descriptor, and a script runs from a sealed
// copy of the held file, which is refused if the held file has changed
// (being unlinked by the rename changes its ctime). (This starts the run
// without the check, which would refuse it.)
func TestPinnedRunsTheHeldFile(t *testing.T) {
	_, elf, script := pinDir(t)
	for _, tc := range []struct {
		path string
		argv []string
		want string
	}{
		{elf, helperArgv("echo", "the pinned one"), "the pinned one\n"},
		{script, []string{"script", "the pinned one"}, "script the pinned one\n"},
	} {
		p := pin(t, tc.path)
		replace(t, tc.path, []byte("#!/bin/sh\necho evil\n"))
		c := &Cmd{Argv: [][]string{tc.argv}, Paths: []string{tc.path}, Pinned: []*Pinned{p}}
		r, err := c.prepare()
		if err != nil {
			t.Fatal(err)
		}
		if err := r.start(); err != nil {
			if tc.path == script && errors.Is(err, ErrChanged) {
				continue // refused: nothing ran
			}
			t.Fatal(err)
		}
		res := r.wait(context.Background(), 0, DefaultKillGrace)
		if got := string(res.Stdout.Bytes()); got != tc.want {
			t.Errorf("%s: stdout %q: the file swapped in ran", tc.path, got)
		}
	}
}

// replace puts a new executable file with content at path by rename, as
// an attacker with write access to the directory would.
func replace(t *testing.T, path string, content []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, content, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestPinnedDescriptorNotOverwritten(t *testing.T) {
	// Not parallel: it arranges which descriptor numbers are free. Before
	// it moves stdin, stdout and stderr into place, the child's side of
	// exec dup3s its error pipe onto the number just above the highest of
	// them when the pipe is numbered lower. Arrange exactly that: free
	// numbers below the stage's files (the error pipe lands there) and
	// the pinned file right above them. The pinned file must still be
	// what runs, an ELF binary or a script.
	_, _, script := pinDir(t)
	for _, path := range []string{"/usr/bin/true", script} {
		open := func() *os.File {
			f, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
		low := []*os.File{open(), open()}
		stdin, stdout, stderr := open(), open(), open()
		p, err := Pin(path)
		if err != nil {
			t.Fatal(err)
		}
		if p.f.Fd() != stderr.Fd()+1 {
			t.Fatalf("the pinned descriptor is %d, not right above the stage's files (%d)", p.f.Fd(), stderr.Fd())
		}
		for _, f := range low {
			f.Close()
		}
		s := &stage{cmd: &exec.Cmd{Path: path, Args: []string{"x"}, Stdin: stdin, Stdout: stdout, Stderr: stderr}, pin: p, shown: path}
		if err := s.start(); err != nil {
			t.Fatalf("%s: start: %v", path, err)
		}
		if err := s.cmd.Wait(); err != nil {
			t.Fatalf("%s: the pinned file did not run: %v", path, err)
		}
		for _, f := range []*os.File{stdin, stdout, stderr, p.f} {
			f.Close()
		}
	}
}

// TestScriptWrittenDuringRun: a script its owner appends to while it runs
// (the shell reads a script as it goes) runs as it was when checked: the
// stage runs a sealed copy, not the file.
func TestScriptWrittenDuringRun(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "go")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, "script")
	if err := os.WriteFile(script, []byte("#!/bin/bash\necho original\nread x < "+fifo+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := pin(t, script)
	c := &Cmd{Argv: [][]string{{"script"}}, Paths: []string{script}, Pinned: []*Pinned{p}}
	done := make(chan *Result, 1)
	go func() {
		res, err := c.Run(context.Background())
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	// The script is blocked on the fifo: it has run and read its lines.
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(script, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("echo INJECTED\n")
	f.Close()
	w.WriteString("go\n")
	w.Close()
	res := <-done
	if res == nil {
		return
	}
	if got := string(res.Stdout.Bytes()); got != "original\n" {
		t.Fatalf("stdout %q: what was appended during the run ran", got)
	}
}

// TestShebangsAndSHA256: Shebangs names a script's #! interpreters, in
// the kernel's order, and never the ELF loader that Interpreters ends
// with; an ELF image has none. The chain starts from the captured
// content, which is what runs: a script rewritten after its capture
// still goes by the #! line captured. SHA256 is the file's.
func TestShebangsAndSHA256(t *testing.T) {
	dir, elf, script := pinDir(t)
	outer := filepath.Join(dir, "outer")
	if err := os.WriteFile(outer, []byte("#!"+script+" -x\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	names := func(pin *Pinned, walk func(*Pinned, func(string) error) error) []string {
		var got []string
		if err := walk(pin, func(ip string) error { got = append(got, ip); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	for _, c := range []struct {
		path     string
		shebangs []string
	}{
		{elf, nil},
		{script, []string{"/bin/sh"}},
		{outer, []string{script, "/bin/sh"}},
	} {
		pin, err := Pin(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := names(pin, (*Pinned).Shebangs); !slices.Equal(got, c.shebangs) {
			t.Errorf("%s: Shebangs = %q, want %q", filepath.Base(c.path), got, c.shebangs)
		}
		all := names(pin, (*Pinned).Interpreters)
		if len(all) != len(c.shebangs)+1 || !strings.Contains(all[len(all)-1], "ld") {
			t.Errorf("%s: Interpreters = %q, want the shebangs and the loader", filepath.Base(c.path), all)
		}
		body, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		want := sha256.Sum256(body)
		if sum, err := pin.SHA256(); err != nil || sum != hex.EncodeToString(want[:]) {
			t.Errorf("%s: SHA256 = %s, %v", filepath.Base(c.path), sum, err)
		}
		pin.Close()
	}
	// Captured, then rewritten: the captured #! line counts.
	if err := os.Chmod(outer, 0o757); err != nil { // others may write it: captured
		t.Fatal(err)
	}
	pin, err := Pin(outer)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	if _, err := pin.Capture(false, MaxCapture, nil); err != nil || pin.Content() == nil {
		t.Fatalf("capture: %v, content %v", err, pin.Content())
	}
	if err := os.WriteFile(outer, []byte("#!/usr/bin/cat\n"), 0o757); err != nil {
		t.Fatal(err)
	}
	if got := names(pin, (*Pinned).Shebangs); !slices.Equal(got, []string{script, "/bin/sh"}) {
		t.Errorf("rewritten after its capture: Shebangs = %q, want the captured line's", got)
	}
}

// TestCaptureOfGrownFile: a file others may write, grown between its pin
// and its capture, is not captured: what it holds past its pinned size was
// written since, and the capture says it changed, not that it is too big.
func TestCaptureOfGrownFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "grows.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\necho pinned\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o757); err != nil { // others may write it: captured
		t.Fatal(err)
	}
	pin, err := Pin(path)
	if err != nil {
		t.Fatal(err)
	}
	defer pin.Close()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("echo added\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var reserved int64
	_, err = pin.Capture(false, MaxCapture, func(n int64) error { reserved = n; return nil })
	if !errors.Is(err, ErrChanged) || pin.Content() != nil {
		t.Fatalf("capture of a grown file: %v, content %v; want ErrChanged and none", err, pin.Content())
	}
	if reserved != int64(len("#!/bin/sh\necho pinned\n")) {
		t.Errorf("reserved %d bytes, want the pinned size", reserved)
	}
}

// TestCaptureUnread: a file others than root may change that the pinning
// identity may execute but not read (0711, another user's) is not
// captured, and says so (Uncaptured); CaptureUnread, with an identity
// that may read it, captures it, and its content tells that it is a
// script, which the pin had taken for an image. A root file of the same
// mode, in root's directories, is not Uncaptured: it is bound as it is.
func TestCaptureUnread(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir, err := os.MkdirTemp("", "rootgate-unread-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const script = "#!/bin/sh\necho hi\n"
	theirs, roots := filepath.Join(dir, "theirs"), filepath.Join(dir, "roots")
	for _, p := range []string{theirs, roots} {
		if err := os.WriteFile(p, []byte(script), 0o711); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(theirs, 4243, 4243); err != nil {
		t.Fatal(err)
	}
	nobody := &Account{UID: 65534, GID: 65534, Groups: []uint32{}}
	pins := map[string]*Pinned{}
	if err := AsUser(nobody, func() error {
		for _, p := range []string{theirs, roots} {
			pin, err := Pin(p)
			if err != nil {
				return err
			}
			pins[p] = pin
			if _, err := pin.Capture(false, MaxCapture, nil); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, pin := range pins {
		defer pin.Close()
	}
	if pin := pins[roots]; pin.Uncaptured() || pin.Content() != nil {
		t.Errorf("root's file: uncaptured %v, content %v; want neither", pin.Uncaptured(), pin.Content())
	}
	pin := pins[theirs]
	if !pin.Uncaptured() || pin.Content() != nil || pin.Interpreted() {
		t.Fatalf("as nobody: uncaptured %v, content %v, interpreted %v; want uncaptured, taken for an image", pin.Uncaptured(), pin.Content(), pin.Interpreted())
	}
	used, err := pin.CaptureUnread(MaxCapture, nil)
	if err != nil || used != int64(len(script)) || pin.Uncaptured() || pin.Content() == nil || !pin.Interpreted() {
		t.Fatalf("as root: %d bytes, %v, uncaptured %v, interpreted %v; want the script captured", used, err, pin.Uncaptured(), pin.Interpreted())
	}
	if b, whole := pin.Content().Head(100); string(b) != script || !whole {
		t.Errorf("captured %q", b)
	}
}
