package wire

import (
	"os"
	"path/filepath"
	"strings"
)

// readGolden returns a file of testdata without its final newline.
func readGolden(name string) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join("testdata", name))
	return []byte(strings.TrimSuffix(string(b), "\n")), err
}
