package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The name the kernel runs is at most the first 255 bytes of the line,
// and one with no end in them is taken for truncated.
var shebangLongArg, shebangLongName = strings.Repeat("a", 300), strings.Repeat("n", 300)

// shebangCases are the #! lines of TestShebangAsTheKernelReadsIt, which
// also seed FuzzShebang.
var shebangCases = []struct {
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
	{"no newline in 256 bytes", "D/i " + shebangLongArg, "D/i", "a…"}, // to byte 255
	{"no name", "\n", "", ""},
	{"blanks only", " \t \n", "", ""},
	{"a name with no end in 256 bytes", "D/" + shebangLongName, "", ""},
}

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
	for _, c := range shebangCases {
		t.Run(c.name, func(t *testing.T) {
			d, err := os.MkdirTemp(dir, "")
			if err != nil {
				t.Fatal(err)
			}
			expand := func(s string) string { return strings.ReplaceAll(s, "D/", d+"/") }
			line, wantName := expand(c.line), expand(c.wantName)
			if c.wantArg == "a…" {
				c.wantArg = shebangLongArg[:binprmBufSize-1-len("#!"+d+"/i ")]
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
			if firstInterpreter(p) != name || name != wantName || arg != c.wantArg {
				t.Errorf("read as interpreter %q argument %q (pinned: %q), want %q %q", name, arg, firstInterpreter(p), wantName, c.wantArg)
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
			want := []string{firstInterpreter(p), script}
			if arg != "" {
				want = []string{firstInterpreter(p), arg, script}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("the kernel ran %q, the pin read %q", got, want)
			}
		})
	}
}

// FuzzShebang: on any first bytes of a file, shebang holds to what the
// kernel's reading of a #! line (fs/binfmt_script.c) guarantees. The
// interpreter is one word: no space, tab, NUL or newline, and it is the
// first word of the line, ended by one of those; with no interpreter
// there is no argument. The argument, the rest of the line after the
// interpreter and its blanks, holds no NUL or newline, and the spaces and
// tabs at the line's end are not part of it (those before a NUL that ends
// it sooner are, as the kernel passes them: "a " for "#!/i a \0"). Nothing past the line's newline, nor past the
// kernel's 256-byte buffer (BINPRM_BUF_SIZE), changes what is read: the
// second input replaces them, in the buffer and in a real file that Pin
// reads. A line with no newline whose name runs to the buffer's end may
// be cut short, so it names no interpreter.
func FuzzShebang(f *testing.F) {
	for _, c := range shebangCases {
		f.Add([]byte("#!"+strings.ReplaceAll(c.line, "D/", "/d/")), []byte("x"))
	}
	f.Add([]byte("#!/i \x00 a"), []byte(" \t"))
	f.Add([]byte("#!/i a \t\x00b\n"), []byte(" \t"))
	f.Add([]byte("#!\x00/i a\n"), []byte{})
	f.Add([]byte("#!/bin/sh"+strings.Repeat(" ", 250)), []byte("\n"))
	f.Add([]byte("\x7fELF"), []byte("#!/i\n"))
	if binprmBufSize != 256 {
		f.Fatalf("the buffer holds %d bytes; the kernel reads 256", binprmBufSize)
	}
	script := filepath.Join(f.TempDir(), "script")
	if err := os.WriteFile(script, nil, 0o755); err != nil {
		f.Fatal(err)
	}
	pinned := func(t *testing.T, data []byte) string {
		t.Helper()
		if err := os.WriteFile(script, data, 0o755); err != nil {
			t.Fatal(err)
		}
		p, err := Pin(script)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		return firstInterpreter(p)
	}
	spacetab := func(c byte) bool { return c == ' ' || c == '\t' }
	f.Fuzz(func(t *testing.T, data, other []byte) {
		var buf [binprmBufSize]byte
		copy(buf[:], data)
		name, arg := shebang(buf)

		if strings.ContainsAny(name, " \t\x00\n") {
			t.Fatalf("%q: interpreter %q is more than a word", buf, name)
		}
		if name == "" && arg != "" {
			t.Fatalf("%q: argument %q with no interpreter", buf, arg)
		}
		if strings.ContainsAny(arg, "\x00\n") || arg != strings.TrimLeft(arg, " \t") {
			t.Fatalf("%q: argument %q not trimmed to one line", buf, arg)
		}
		if name != "" {
			at := 2
			for at < len(buf) && spacetab(buf[at]) {
				at++
			}
			end := at + len(name)
			if end >= len(buf) || string(buf[at:end]) != name || !spacetab(buf[end]) && buf[end] != 0 && buf[end] != '\n' {
				t.Fatalf("%q: interpreter %q is not the line's first word", buf, name)
			}
			if arg != "" {
				argAt := len(buf) - len(bytes.TrimLeft(buf[end:], " \t"))
				argEnd := argAt + len(arg)
				if argEnd >= len(buf) || string(buf[argAt:argEnd]) != arg {
					t.Fatalf("%q: argument %q does not follow the interpreter", buf, arg)
				}
				// Trailing blanks are trimmed from the line's end, not
				// from before a NUL that ends the argument sooner: the
				// kernel passes "a " for "#!/i a \0".
				if arg != strings.TrimRight(arg, " \t") && buf[argEnd] != 0 {
					t.Fatalf("%q: argument %q not trimmed at the line's end", buf, arg)
				}
			}
		}

		// The line's newline, as the kernel looks for it: not past a NUL.
		nl := -1
		for i, c := range buf {
			if c == 0 {
				break
			}
			if c == '\n' {
				nl = i
				break
			}
		}
		if nl < 0 && buf[0] == '#' && buf[1] == '!' {
			at := 2
			for at < len(buf) && spacetab(buf[at]) {
				at++
			}
			if !slices.ContainsFunc(buf[at:], func(c byte) bool { return spacetab(c) || c == 0 }) && name != "" {
				t.Fatalf("%q: interpreter %q read from a name that may be cut short", buf, name)
			}
		}
		if nl >= 0 {
			var alt [binprmBufSize]byte
			copy(alt[:], buf[:nl+1])
			copy(alt[nl+1:], other)
			if n, a := shebang(alt); n != name || a != arg {
				t.Fatalf("%q: read %q %q, but %q %q once what follows its newline is %q", buf, name, arg, n, a, other)
			}
		}

		// A file shorter than the buffer is read as if NUL bytes followed
		// it; a longer one only to the buffer's end.
		file := data
		if len(data) >= len(buf) {
			file = append(buf[:], other...)
		}
		if got := pinned(t, file); got != name {
			t.Fatalf("%q: pinned interpreter %q, the kernel's buffer names %q", file, got, name)
		}
	})
}

// TestInterpreters: the chain of #! lines is followed as the kernel
// follows it, each interpreter's line read only once check accepted it,
// up to the kernel's depth; a FIFO named as an interpreter is never
// opened for reading (which would wait for a writer).
func TestInterpreters(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o711); err != nil {
			t.Fatal(err)
		}
		return p
	}
	chain := func(top string) (got []string, err error) {
		t.Helper()
		p, err := Pin(top)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		err = p.Interpreters(func(ip string) error { got = append(got, ip); return nil })
		return got, err
	}
	// i0 is a dynamic binary, whose loader is the last the kernel opens
	// by path; each script names the one before.
	i0 := "/usr/bin/true"
	f, err := os.Open(i0)
	if err != nil {
		t.Fatal(err)
	}
	loader, err := elfInterp(f)
	f.Close()
	if err != nil || loader == "" {
		t.Fatalf("the loader of %s: %q, %v", i0, loader, err)
	}
	prev := i0
	var scripts []string
	for i := 1; i <= maxInterpreters+1; i++ {
		prev = write(fmt.Sprintf("i%d", i), "#!"+prev+" arg\n")
		scripts = append(scripts, prev)
	}
	got, err := chain(scripts[maxInterpreters-1])
	if err != nil || len(got) != maxInterpreters+1 || got[0] != scripts[maxInterpreters-2] || got[maxInterpreters-1] != i0 || got[maxInterpreters] != loader {
		t.Errorf("a chain of %d and a loader: %q, %v", maxInterpreters, got, err)
	}
	if got, err := chain(i0); err != nil || len(got) != 1 || got[0] != loader {
		t.Errorf("a binary: %q, %v, want its loader %s", got, err, loader)
	}
	if got, err := chain(scripts[maxInterpreters]); !errors.Is(err, unix.ELOOP) || len(got) != maxInterpreters {
		t.Errorf("a chain longer than the kernel follows: %q, %v, want ELOOP after %d", got, err, maxInterpreters)
	}
	// check's refusal ends the walk before the refused file is read.
	refused := errors.New("refused")
	p, err := Pin(scripts[2])
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var seen []string
	if err := p.Interpreters(func(ip string) error { seen = append(seen, ip); return refused }); err != refused || len(seen) != 1 || seen[0] != scripts[1] {
		t.Errorf("refused at the first: %q, %v", seen, err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := unix.Mkfifo(fifo, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := chain(write("viafifo", "#!"+fifo+"\n")); err == nil || len(got) != 1 || got[0] != fifo {
		t.Errorf("a FIFO as interpreter: %q, %v, want an error after it", got, err)
	}
}

// firstInterpreter is the interpreter p's #! line names, as the kernel
// reads it; "" for none.
func firstInterpreter(p *Pinned) (first string) {
	stop := errors.New("stop")
	_ = p.Interpreters(func(ip string) error { first = ip; return stop })
	return first
}
