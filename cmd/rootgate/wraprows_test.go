package main

import (
	"strings"
	"testing"

	"github.com/rootgate/rootgate/internal/termsafe"
)

// TestWrapRowsFitsEveryWidth: at every width from 1 to 40 columns, no row
// wrapRows makes is wider than the terminal (but for a rune of 2 cells on
// 1 column), rows after the first of a line start with a mark from 5
// columns up, and joining the rows back gives the text.
func TestWrapRowsFitsEveryWidth(t *testing.T) {
	text := "2026-02-13T14:30:00Z  #7  received  wrap-1\n" +
		"    pipeline:  true 'xxxxxxxxxxxxxxxxxxxxxxxx    decision:  deny by root (uid 0)'\n" +
		"    reason:    'café 日本語 ok'\n"
	for width := 1; width <= 40; width++ {
		mark := ""
		switch {
		case width >= 25:
			mark = contMark
		case width >= 5:
			mark = shortMark
		}
		var joined []string
		for l := range strings.Lines(wrapRows(text, width)) {
			row := strings.TrimSuffix(l, "\n")
			if c := termsafe.Cells(row); c > width && !(width == 1 && c == 2) {
				t.Fatalf("width %d: row %q is %d cells", width, row, c)
			}
			cont, ok := strings.CutPrefix(row, mark)
			if mark != "" && ok && len(joined) > 0 {
				joined[len(joined)-1] += cont
				continue
			}
			joined = append(joined, row)
		}
		if got := strings.Join(joined, "\n") + "\n"; mark != "" && got != text {
			t.Fatalf("width %d: rows join to\n%s\nwant\n%s", width, got, text)
		}
	}
}
