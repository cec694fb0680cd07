package wire

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/termsafe"
)

func TestSanitizeNote(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"plain", "use apt instead", "use apt instead"},
		{"blank", " \t\n ", ""},
		{"escapes become blanks", "a\x1b[31mb\x07c\u202ed\u200be", "a [31mb c d e"},
		{"runs of blanks", "  a \n\n\t b  ", "a b"},
		{"invalid UTF-8", "a\xffb", "a b"},
		{"C1 control", "a\u009bb", "a b"},
		{"cut", strings.Repeat("é", 300), strings.Repeat("é", MaxNoteLen)},
		{"no blank left at the cut", strings.Repeat("x", MaxNoteLen-1) + " yz", strings.Repeat("x", MaxNoteLen-1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SanitizeNote(tc.in)
			if got != tc.want || utf8.RuneCountInString(got) > MaxNoteLen || !termsafe.String(got, false) {
				t.Errorf("SanitizeNote(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
