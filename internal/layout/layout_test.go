package layout

import (
	"encoding/json"
	"errors"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/rootgate/rootgate/"

// pkg is one package as go list reports it.
type pkg struct {
	ImportPath string
	Name       string
	Imports    []string
	Deps       []string
}

// listPackages lists every package of the module and every package they
// link, with their imports (not their tests').
func listPackages(t *testing.T) (mine []*pkg, all map[string]*pkg) {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Name,Imports,Deps,Module,Standard", "./...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	all = map[string]*pkg{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		all[p.ImportPath] = &p
		if strings.HasPrefix(p.ImportPath, module) {
			mine = append(mine, &p)
		}
	}
	if len(mine) < 10 {
		t.Fatalf("go list found only %d packages of the module", len(mine))
	}
	return mine, all
}

// rel is an import path without the module's prefix.
func rel(path string) string { return strings.TrimPrefix(path, module) }

// under reports whether path is pattern's package or below it. A pattern
// that starts with github.com/ is a library outside the module, matched as a
// prefix (github.com/godbus/ is every package of godbus); any other is the
// module's package of that name and those below it.
func under(path, pattern string) bool {
	if strings.HasPrefix(pattern, "github.com/") {
		return strings.HasPrefix(path, pattern)
	}
	p, ok := strings.CutPrefix(path, module)
	return ok && (p == pattern || strings.HasPrefix(p, pattern+"/"))
}

// chain is how from comes to link to: the import path from from to to.
func chain(all map[string]*pkg, from, to string) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var hops []string
			for q := to; q != ""; q = prev[q] {
				hops = append(hops, rel(q))
			}
			slices.Reverse(hops)
			return strings.Join(hops, " → ")
		}
		if all[p] == nil {
			continue
		}
		for _, i := range all[p].Imports {
			if _, seen := prev[i]; !seen {
				prev[i] = p
				queue = append(queue, i)
			}
		}
	}
	return rel(from) + " … " + rel(to)
}

// ui are the terminal and desktop libraries, and the module's own packages
// that use them.
var ui = []string{
	"github.com/charmbracelet/", "github.com/muesli/termenv", "github.com/muesli/cancelreader", "github.com/godbus/",
	"internal/approval/terminal", "internal/approval/desktop",
}

// TestDeps checks the arrows of docs/architecture.md: each rule names
// packages (a path and those below it) and what they must not link, directly
// or through any other package.
func TestDeps(t *testing.T) {
	mine, all := listPackages(t)
	rules := []struct {
		pkgs   []string
		forbid []string
		why    string
	}{
		{[]string{"wire", "pipeline", "internal/cgroup", "internal/termsafe", "internal/rootpath", "internal/progid"}, append([]string{"internal/daemon", "internal/approval", "cmd", "internal/client", "internal/audit"}, ui...),
			"the contract and the runner stand alone: no daemon, decider, client or UI"},
		{[]string{"internal/daemon"}, append([]string{"cmd"}, ui...),
			"the daemon links no terminal or D-Bus library: its caller hands it the deciders"},
		{[]string{"internal/approval", "policy", "internal/approval/remote", "internal/approval/passkey", "internal/approval/web"}, append([]string{"internal/daemon", "pipeline", "cmd"}, ui...),
			"the decision core, the policy, the approver protocol and the passkey page draw nothing and know no daemon or pipeline"},
		{[]string{"internal/approval/passkey"}, []string{"internal/approval", "wire", "internal/audit", "internal/client", "internal/clidoc", "internal/cliout", "internal/peerid",
			"internal/progid", "internal/slogjournal", "internal/termsafe", "internal/version", "internal/daemon", "pipeline", "cmd"},
			"the relying party checks signatures and knows nothing of prompts or the protocol"},
		{[]string{"internal/approval/terminal", "internal/approval/desktop"}, []string{"internal/daemon", "pipeline", "cmd", "internal/approval/remote"},
			"a prompt shows a request; it knows nothing of where it came from"},
	}
	for _, r := range rules {
		for _, q := range r.pkgs {
			if !slices.ContainsFunc(mine, func(p *pkg) bool { return rel(p.ImportPath) == q }) {
				t.Errorf("a rule names %s, which is no package of the module: the rule checks nothing", q)
			}
		}
		for _, p := range mine {
			if !slices.ContainsFunc(r.pkgs, func(q string) bool { return rel(p.ImportPath) == q }) {
				continue
			}
			for _, d := range p.Deps {
				for _, f := range r.forbid {
					if under(d, f) {
						t.Errorf("%s links %s (%s): %s", rel(p.ImportPath), rel(d), chain(all, p.ImportPath, d), r.why)
					}
				}
			}
		}
	}
	// No library reaches into the programs.
	for _, p := range mine {
		if p.Name == "main" || under(p.ImportPath, "cmd") {
			continue
		}
		for _, d := range p.Deps {
			if under(d, "cmd") {
				t.Errorf("library %s links %s (%s): libraries never import cmd/...", rel(p.ImportPath), rel(d), chain(all, p.ImportPath, d))
			}
		}
	}
	// wire and pipeline do no networking of their own: none of the
	// module's packages they link imports net. (github.com/google/uuid,
	// which wire uses to check ids, links net for its node ids.)
	for _, p := range mine {
		if rel(p.ImportPath) != "wire" && rel(p.ImportPath) != "pipeline" {
			continue
		}
		for _, d := range append([]string{p.ImportPath}, p.Deps...) {
			if q := all[d]; q != nil && strings.HasPrefix(d, module) && slices.Contains(q.Imports, "net") {
				t.Errorf("%s links %s, which imports net: wire and pipeline do no networking", rel(p.ImportPath), rel(d))
			}
		}
	}
}

// TestPackageComments checks that every package of the module has exactly
// one package comment: a doc.go, or the comment on one of its files.
func TestPackageComments(t *testing.T) {
	docs := map[string][]string{} // directory → files with a package comment
	pkgs := 0
	err := filepath.WalkDir("../..", func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			name := e.Name()
			if path != "../.." && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if _, ok := docs[dir]; !ok {
			docs[dir] = nil
			pkgs++
		}
		if f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "" {
			docs[dir] = append(docs[dir], filepath.Base(path))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if pkgs < 10 {
		t.Fatalf("found only %d packages", pkgs)
	}
	for dir, files := range docs {
		switch len(files) {
		case 0:
			t.Errorf("%s: no package comment (add a doc.go)", dir)
		case 1:
		default:
			t.Errorf("%s: package comments on %d files (%s): keep one", dir, len(files), strings.Join(files, ", "))
		}
	}
}

// handWait is a loop that reads the clock: a wait written by hand.
var handWait = regexp.MustCompile(`^\s*for\b.*(\btime\.(Now|Since)\(|\bdeadline\b)`)

// TestWaitsThroughTestutil checks that tests wait for a condition only
// through testutil's one helper (WaitFor, over Poll and PollEvery; Holds
// for what must not happen within a span): no test or test support code
// loops on the clock by hand. A loop whose length is itself the point (keys
// typed through a prompt's dwell, a deliberately slow client) says so with
// "// not a wait:" on its line or the line before.
func TestWaitsThroughTestutil(t *testing.T) {
	found := 0
	err := filepath.WalkDir("../..", func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if name := e.Name(); path != "../.." && (name == "testdata" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		support := strings.Contains(filepath.ToSlash(path), "/internal/testutil/")
		if !strings.HasSuffix(path, "_test.go") && !(support && strings.HasSuffix(path, ".go")) || strings.HasSuffix(path, "internal/testutil/testutil.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found++
		lines := strings.Split(string(b), "\n")
		for i, l := range lines {
			if !handWait.MatchString(l) || strings.Contains(l, " range ") || strings.Contains(l, "// not a wait:") || i > 0 && strings.Contains(lines[i-1], "// not a wait:") {
				continue
			}
			t.Errorf("%s:%d: a loop on the clock; wait through testutil.WaitFor (or Poll, PollEvery, Holds), or mark a deliberate span \"// not a wait: why\":\n\t%s", path, i+1, strings.TrimSpace(l))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 50 {
		t.Fatalf("found only %d test files", found)
	}
}

// drawing reads the arrows of docs/architecture.md's "What may import
// what": each package drawn on the left, with the module's packages it
// imports. cmd/... may import anything and is left out.
func drawing(t *testing.T) map[string][]string {
	t.Helper()
	b, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(b), "## What may import what")
	if !ok {
		t.Fatal(`docs/architecture.md has no "What may import what"`)
	}
	_, block, _ := strings.Cut(after, "```\n")
	block, _, _ = strings.Cut(block, "```")
	arrows := map[string][]string{}
	for line := range strings.Lines(block) {
		left, right, ok := strings.Cut(line, "──►")
		if !ok {
			t.Fatalf("docs/architecture.md: a line of the drawing without an arrow: %q", line)
		}
		if strings.TrimSpace(left) == "cmd/..." {
			continue
		}
		right, _, _ = strings.Cut(right, "(")
		var to []string
		if r := strings.TrimSpace(right); r != "nothing of the module" {
			for _, p := range strings.Split(r, ",") {
				to = append(to, strings.TrimSpace(p))
			}
		}
		for _, p := range strings.Split(left, ",") {
			p = strings.TrimSpace(p)
			if _, dup := arrows[p]; dup {
				t.Errorf("docs/architecture.md draws %s twice", p)
			}
			arrows[p] = to
		}
	}
	return arrows
}

// TestDrawing holds the module to docs/architecture.md's drawing, as an
// allowlist and both ways: every package outside cmd/ is drawn, imports
// (its own code, not its tests) of the module's packages exactly what is
// drawn from it, and nothing drawn is not imported.
func TestDrawing(t *testing.T) {
	mine, _ := listPackages(t)
	arrows := drawing(t)
	seen := map[string]bool{}
	for _, p := range mine {
		name := rel(p.ImportPath)
		if under(p.ImportPath, "cmd") {
			continue
		}
		seen[name] = true
		drawn, ok := arrows[name]
		if !ok {
			t.Errorf("%s is not drawn in docs/architecture.md's \"What may import what\"", name)
			continue
		}
		var imports []string
		for _, i := range p.Imports {
			if strings.HasPrefix(i, module) {
				imports = append(imports, rel(i))
			}
		}
		for _, i := range imports {
			if !slices.Contains(drawn, i) {
				t.Errorf("%s imports %s, which the drawing does not allow (docs/architecture.md)", name, i)
			}
		}
		for _, d := range drawn {
			if !slices.Contains(imports, d) {
				t.Errorf("the drawing has %s ──► %s, which %s does not import: draw what is", name, d, name)
			}
		}
	}
	for p := range arrows {
		if !seen[p] {
			t.Errorf("docs/architecture.md draws %s, which is not a package of the module", p)
		}
	}
}
