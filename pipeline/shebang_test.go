package pipeline

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

// TestShebangAsTheKernelReadsIt: the interpreter a pinned script's #!
// line names is the file the kernel runs for it, and no other. Each case
// is a real script whose interpreter, a script that prints the name and
// arguments the kernel gave it, stands at the path the kernel reads; the
// script is run, and what ran is compared with [Pinned.Interpreter] (and
// the argument with shebang's). Words are split on space and tab only: a
// CR (a script saved with CRLF), FF, VT or NBSP after the name is part of
// it, so a check of "/dir/i" where the kernel runs "/dir/i\f" (a file the
// requester may create next to root's "i" in a sticky directory) would
// check the wrong file.
func TestShebangAsTheKernelReadsIt(t *testing.T) {
	dir, err := os.MkdirTemp("", "rootgate-shebang-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The name the kernel runs is at most the first 255 bytes of the
	// line, and one with no end in them is taken for truncated.
	longArg := strings.Repeat("a", 300)
	longName := strings.Repeat("n", 300)
	for _, c := range []struct {
		name string
		// line follows "#!"; "D" stands for the directory of the case.
		line, wantName, wantArg string
	}{
		{"plain", "D/i\necho x\n", "D/i", ""},
		{"blanks around", " \tD/i \t a  b\t \n", "D/i", "a  b"},
		{"one argument holds the rest", "D/i -e -f\tg\n", "D/i", "-e -f\tg"},
		{"CR", "D/i\r\n", "D/i\r", ""},
		{"FF", "D/i\f -x\n", "D/i\f", "-x"},
		{"VT", "D/i\v\n", "D/i\v", ""},
		{"NBSP", "D/i\u00a0x\n", "D/i\u00a0x", ""},
		{"NUL ends the name", "D/i\x00 junk\n", "D/i", ""},
		{"NUL ends the argument", "D/i a\x00b\n", "D/i", "a"},
		{"no newline in a short file", "D/i x", "D/i", "x"},
		{"no newline in 256 bytes", "D/i " + longArg, "D/i", "a…"}, // to byte 255
		{"no name", "\n", "", ""},
		{"blanks only", " \t \n", "", ""},
		{"a name with no end in 256 bytes", "D/" + longName, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, err := os.MkdirTemp(dir, "")
			if err != nil {
				t.Fatal(err)
			}
			expand := func(s string) string { return strings.ReplaceAll(s, "D/", d+"/") }
			line, wantName := expand(c.line), expand(c.wantName)
			if c.wantArg == "a…" {
				c.wantArg = longArg[:binprmBufSize-1-len("#!"+d+"/i ")]
			}
			if wantName != "" {
				// Written under another name and copied (copyFile).
				src := filepath.Join(dir, "interp.src")
				os.Remove(src)
				if err := os.WriteFile(src, []byte("#!/bin/sh\nprintf '%s\\0' \"$0\" \"$@\"\n"), 0o755); err != nil {
					t.Fatal(err)
				}
				copyFile(t, src, wantName, 0o755)
			}
			script := filepath.Join(d, "script")
			if err := os.WriteFile(script+".src", []byte("#!"+line), 0o755); err != nil {
				t.Fatal(err)
			}
			copyFile(t, script+".src", script, 0o755)

			p := pin(t, script)
			var head [binprmBufSize]byte
			copy(head[:], "#!"+line)
			name, arg := shebang(head)
			if p.Interpreter() != name || name != wantName || arg != c.wantArg {
				t.Errorf("read as interpreter %q argument %q (pinned: %q), want %q %q", name, arg, p.Interpreter(), wantName, c.wantArg)
			}

			out, err := exec.Command(script).Output()
			if wantName == "" {
				if !errors.Is(err, syscall.ENOEXEC) {
					t.Fatalf("the kernel ran it (%v, %q): the #! line names an interpreter, the pin read none", err, out)
				}
				return
			}
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
			want := []string{p.Interpreter(), script}
			if arg != "" {
				want = []string{p.Interpreter(), arg, script}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("the kernel ran %q, the pin read %q", got, want)
			}
		})
	}
}
