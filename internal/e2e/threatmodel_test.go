package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestThreatModelNamesRealTests keeps docs/threat-model.md and the
// evidence in docs/security.md from drifting: every test or fuzz target
// they name must exist in the repository, and the hostile-input count must
// be the suite's.
func TestThreatModelNamesRealTests(t *testing.T) {
	t.Parallel()
	defined := map[string]bool{}
	def := regexp.MustCompile(`(?m)^func ((?:Test|Fuzz)[A-Za-z0-9_]+)\(`)
	err := filepath.WalkDir("../..", func(path string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range def.FindAllSubmatch(b, -1) {
			defined[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`((?:Test|Fuzz)[A-Za-z0-9_]+)`")
	for _, doc := range []string{"../../docs/threat-model.md", "../../docs/security.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		ms := named.FindAllSubmatch(b, -1)
		if doc == "../../docs/threat-model.md" && len(ms) < 40 {
			t.Errorf("%s names only %d tests", doc, len(ms))
		}
		for _, m := range ms {
			if !defined[string(m[1])] {
				t.Errorf("%s names %s, which no test file defines", doc, m[1])
			}
		}
		if doc == "../../docs/security.md" {
			if want := fmt.Sprintf("%d malformed and boundary requests", len(hostileCases())); !strings.Contains(string(b), want) {
				t.Errorf("%s does not say %q", doc, want)
			}
		}
	}
}
