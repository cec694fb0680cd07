package main

import (
	"bytes"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

// TestManListsEveryFlag: `rootgate man` and `rootgate COMMAND -h`
// document every flag of every command, and each completion script offers
// it.
func TestManListsEveryFlag(t *testing.T) {
	ctx := context.Background()
	out := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(ctx, args, nil, &stdout, &stderr); code != exitOK {
			t.Fatalf("rootgate %s: exit %d\n%s", strings.Join(args, " "), code, &stderr)
		}
		return stdout.String()
	}
	man := out("man")
	bash, zsh, fish := out("completion", "bash"), out("completion", "zsh"), out("completion", "fish")
	usage := out("help")
	n := 0
	for _, c := range commands() {
		if c.hidden {
			continue
		}
		if !strings.Contains(man, ".SS rootgate "+strings.ReplaceAll(c.name, "-", `\-`)) {
			t.Errorf("the manual page has no section for %q", c.name)
		}
		if !strings.Contains(usage, "\n  "+c.name) {
			t.Errorf("the usage does not list %q", c.name)
		}
		var help bytes.Buffer
		if code := run(ctx, append(strings.Fields(c.name), "-h"), nil, io.Discard, &help); code != exitOK || !strings.HasPrefix(help.String(), "usage: "+c.synopsis()+"\n") {
			t.Errorf("rootgate %s -h: exit %d\n%s", c.name, code, &help)
		}
		for _, f := range c.flags {
			n++
			if !strings.Contains(help.String(), "\n  -"+f.Name+" ") && !strings.Contains(help.String(), "\n  -"+f.Name+"\n") {
				t.Errorf("rootgate %s -h lacks --%s", c.name, f.Name)
			}
			if !strings.Contains(man, `\fB\-\-`+strings.ReplaceAll(f.Name, "-", `\-`)+`\fR`) {
				t.Errorf("the manual page lacks --%s of %q", f.Name, c.name)
			}
			if !strings.Contains(bash, "--"+f.Name) || !strings.Contains(zsh, "--"+f.Name) || !strings.Contains(fish, "-l "+f.Name) {
				t.Errorf("a completion script lacks --%s of %q", f.Name, c.name)
			}
		}
	}
	if n < 10 {
		t.Errorf("only %d flags found: the flag tables are not being read", n)
	}
}

// TestEveryCommandInTable: each cmdX function of this package is run from
// the command table, so none escapes the usage, the manual page and the
// completions.
func TestEveryCommandInTable(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	cmds := map[string]bool{}
	used := map[string]bool{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil {
				continue
			}
			if n := fd.Name.Name; len(n) > 3 && strings.HasPrefix(n, "cmd") && n[3] >= 'A' && n[3] <= 'Z' {
				cmds[n] = true
			}
			if fd.Name.Name == "commands" {
				ast.Inspect(fd.Body, func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok {
						used[id.Name] = true
					}
					return true
				})
			}
		}
	}
	if len(cmds) == 0 {
		t.Fatal("no cmd functions found")
	}
	for c := range cmds {
		if !used[c] {
			t.Errorf("%s is not run from commands(): add it to the table", c)
		}
	}
}
