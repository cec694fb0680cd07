package progid

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/pipeline"
)

// The figures of docs/performance.md ("Knowing a program by its file"):
// the daemon's index of approval's list over the search path's
// directories of this machine, as a prompt asks it about a stage.

func searchIndex(b *testing.B) *Index {
	x := New(filepath.SplitList(pipeline.SearchPath), approval.Listed)
	b.Logf("%d listed files in %s", x.Len(), pipeline.SearchPath)
	return x
}

// BenchmarkIndexBuild: the first use, which scans the directories.
func BenchmarkIndexBuild(b *testing.B) {
	for b.Loop() {
		New(filepath.SplitList(pipeline.SearchPath), approval.Listed).Len()
	}
}

// BenchmarkIsOther: the common case, a program that is none of them
// (ls): a stat of each directory and a look-up, no hash.
func BenchmarkIsOther(b *testing.B) {
	x := searchIndex(b)
	f, err := PathFile("/usr/bin/ls")
	if err != nil {
		b.Fatal(err)
	}
	f.SHA256 = func() (string, error) { b.Fatal("ls hashed"); return "", nil }
	for b.Loop() {
		if x.Is(f) != "" {
			b.Fatal("ls is listed")
		}
	}
}

// BenchmarkIsCopy: a root copy of dash under another name: it is hashed
// (dash's own hash is kept from the first use).
func BenchmarkIsCopy(b *testing.B) {
	x := searchIndex(b)
	cp := filepath.Join(b.TempDir(), "mytool")
	src, err := os.Open("/usr/bin/dash")
	if err != nil {
		b.Skip("no /usr/bin/dash")
	}
	defer src.Close()
	dst, err := os.Create(cp)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		b.Fatal(err)
	}
	dst.Close()
	st, _ := os.Stat(cp)
	b.Logf("dash: %d bytes", st.Size())
	for b.Loop() {
		f, err := PathFile(cp)
		if err != nil {
			b.Fatal(err)
		}
		if x.Is(f) == "" {
			b.Fatal("the copy of dash is not known")
		}
	}
}
