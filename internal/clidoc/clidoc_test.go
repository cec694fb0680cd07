package clidoc

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/testutil"
)

// testPage is a program with plain and nested commands and every kind of
// flag the documents treat differently.
func testPage() *Page {
	run := []Flag{
		{Name: "socket", Default: "/run/x.sock", Usage: "request socket `path`"},
		{Name: "no-privilege", Default: false, Usage: "run as yourself"},
		{Name: "reason", Default: "", Usage: ".why, with a \\ backslash and 'quotes'"},
		{Name: "timeout", Default: 5 * time.Minute, Usage: "time limit"},
	}
	verify := []Flag{{Name: "log", Default: "", Usage: "audit log `file`"}}
	show := []Flag{{Name: "json", Default: false, Usage: "print JSON lines"}}
	return &Page{
		Name: "prog", Section: 1, Summary: "a test program", Version: "1.2.3",
		Synopsis:    []string{"prog COMMAND [flags]"},
		Description: "First paragraph.\n\n  literal -x line\n  another\n\n.A line that starts with a dot.",
		Commands: []Command{
			{Name: "run", Args: "-- CMD ARGS...", Summary: "run a thing", Flags: run},
			{Name: "audit verify", Summary: "verify the log", Flags: verify},
			{Name: "audit show", Summary: "show the log", Flags: show},
			{Name: "completion", Args: "bash|zsh|fish", Summary: "print completions", Words: []string{"bash", "zsh", "fish"}},
			{Name: "secret", Summary: "hidden", Hidden: true, Flags: []Flag{{Name: "secret-flag", Default: 0, Usage: "hidden"}}},
		},
		Sections: []Section{
			{Title: "Files", Terms: true, Text: "/etc/prog\nThe config."},
		},
	}
}

func TestManListsEveryFlag(t *testing.T) {
	p := testPage()
	var b bytes.Buffer
	if err := p.Man(&b); err != nil {
		t.Fatal(err)
	}
	roff := b.String()
	for _, c := range p.Commands {
		for _, f := range c.Flags {
			if in := strings.Contains(roff, `\fB\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)+`\fR`); in == c.Hidden {
				t.Errorf("flag --%s of %q: in the page %v, hidden %v", f.Name, c.Name, in, c.Hidden)
			}
		}
	}
	// No line may start a roff request by accident.
	for _, l := range strings.Split(roff, "\n") {
		if strings.HasPrefix(l, ".A ") || strings.HasPrefix(l, ".why") {
			t.Errorf("text line taken as a request: %q", l)
		}
	}

	// man renders it without a warning, and the text reads as written.
	dir := t.TempDir()
	path := filepath.Join(dir, "prog.1")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("man", "--warnings", "-l", path)
	cmd.Env = append(os.Environ(), "MANWIDTH=200", "MAN_KEEP_FORMATTING=0", "LC_ALL=C.UTF-8")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("man: %v\n%s", err, &stderr)
	}
	text := plain(out.String())
	for _, want := range []string{
		"prog - a test program",
		"prog run [flags] -- CMD ARGS...",
		"prog audit verify [flags]",
		"--socket path",
		"request socket path (default: /run/x.sock)",
		"--timeout duration",
		"time limit (default: 5m0s)",
		`.why, with a \ backslash and 'quotes'`,
		"    literal -x line\n",
		".A line that starts with a dot.",
		"/etc/prog",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rendered page lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "secret") {
		t.Errorf("hidden command shown:\n%s", text)
	}
}

// plain strips man's formatting, overstrike (Debian 12's grotty) or SGR
// escapes (Ubuntu 24.04's groff 1.23), and joins its hyphenation.
func plain(s string) string {
	s = regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(s, "")
	var b strings.Builder
	r := []rune(s)
	for i := 0; i < len(r); i++ {
		if i+1 < len(r) && r[i+1] == '\b' {
			i++
			continue
		}
		b.WriteRune(r[i])
	}
	return strings.ReplaceAll(b.String(), "‐", "-")
}

// complete runs the bash completion function for the words typed so far
// (the last one being completed) in dir, and returns the candidates.
func bashComplete(t *testing.T, script, dir string, words ...string) []string {
	t.Helper()
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = "'" + w + "'"
	}
	prog := "source " + script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
		string(rune('0'+len(words)-1)) + "\n_prog\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
	cmd := exec.Command("bash", "--norc", "--noprofile", "-c", prog)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	got := strings.Fields(string(out))
	slices.Sort(got)
	return got
}

func TestBash(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "prog.bash")
	var b bytes.Buffer
	if err := testPage().Bash(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "afile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		words []string
		want  []string
	}{
		{[]string{"prog", ""}, []string{"audit", "completion", "run"}},
		{[]string{"prog", "r"}, []string{"run"}},
		{[]string{"prog", "run", "--"}, []string{"--no-privilege", "--reason", "--socket", "--timeout"}},
		{[]string{"prog", "run", "--socket", "a"}, []string{"afile"}},
		{[]string{"prog", "run", "--reason", ""}, nil},
		{[]string{"prog", "run", "--no-privilege", "--s"}, []string{"--socket"}},
		{[]string{"prog", "audit", ""}, []string{"show", "verify"}},
		{[]string{"prog", "audit", "verify", "--"}, []string{"--log"}},
		{[]string{"prog", "audit", "show", "--"}, []string{"--json"}},
		{[]string{"prog", "completion", ""}, []string{"bash", "fish", "zsh"}},
	} {
		if got := bashComplete(t, script, dir, tc.words...); !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.words, got, tc.want)
		}
	}
}

func TestFish(t *testing.T) {
	fish := testutil.NeedTool(t, "fish", "fish")
	dir := t.TempDir()
	script := filepath.Join(dir, "prog.fish")
	var b bytes.Buffer
	if err := testPage().Fish(&b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(script, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"prog ", []string{"audit", "completion", "run"}},
		{"prog run --", []string{"--no-privilege", "--reason", "--socket", "--timeout"}},
		{"prog audit ", []string{"show", "verify"}},
		{"prog audit verify --", []string{"--log"}},
		{"prog completion ", []string{"bash", "fish", "zsh"}},
	} {
		cmd := exec.Command(fish, "--no-config", "-c", "source "+script+"; complete -C'"+tc.line+"'")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("fish: %v\n%s", err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if w, _, _ := strings.Cut(l, "\t"); w != "" {
				got = append(got, w)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%q: got %q, want %q", tc.line, got, tc.want)
		}
	}
}

func TestZshParses(t *testing.T) {
	zsh := testutil.NeedTool(t, "zsh", "zsh")
	var b bytes.Buffer
	if err := testPage().Zsh(&b); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "_prog")
	if err := os.WriteFile(script, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(zsh, "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("zsh -n: %v\n%s\n%s", err, out, b.String())
	}
	for _, want := range []string{"--socket=[request socket path]:path:_files", "--json[print JSON lines]", "'audit:verify the log'"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("zsh script lacks %q:\n%s", want, b.String())
		}
	}
}
