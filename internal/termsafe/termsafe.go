// Package termsafe is the one definition of what is safe to show on a
// terminal. A rune is safe when it is graphic (a letter, mark, number,
// punctuation or symbol) or the ASCII space: that leaves out every C0 and C1
// control and DEL (which start escape sequences: ESC, CSI 0x9b, OSC), the
// bidi overrides and isolates (which reorder what follows), the zero-width
// and other format characters, separators other than the ASCII space,
// private-use and unassigned code points: nothing that can move the cursor,
// hide text or make two different strings look the same. A string is safe
// when it is valid UTF-8 made of safe runes.
//
// The wire checks ([String]) refuse a request field that is not safe; what
// is shown anyway (a requester's arguments, a log line) goes through
// [Sanitize] or [Quote], which escape exactly the runes [Rune] refuses.
package termsafe

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Rune reports whether r is safe to show as itself (see the package
// comment). U+FFFD, the replacement character, is safe: it is what a
// terminal shows for it; [String] refuses the invalid UTF-8 it stands for.
// Variation selectors and the other default-ignorable marks (U+034F, the
// Hangul fillers, U+180B…) are graphic to unicode.IsPrint but show as
// nothing, so they are not safe; nor are the graphic runes drawn as a
// blank (blank).
func Rune(r rune) bool {
	return unicode.IsPrint(r) && !unicode.In(r, unicode.Variation_Selector, unicode.Other_Default_Ignorable_Code_Point) && !isBlank(r)
}

// blank are the graphic runes that fonts draw as an empty cell, though
// no Unicode property says so: shown among a shell command's words, one
// passes for a space ("cat f\u2800# ; id" reads as a command and a
// comment, and runs id).
var blank = []rune{
	0x2800,  // BRAILLE PATTERN BLANK
	0x1D159, // MUSICAL SYMBOL NULL NOTEHEAD
	0x16FE4, // KHITAN SMALL SCRIPT FILLER
}

func isBlank(r rune) bool {
	for _, b := range blank {
		if r == b {
			return true
		}
	}
	return false
}

// String reports whether s is valid UTF-8 made of safe runes; with
// multiline, TAB and LF are allowed too.
func String(s string, multiline bool) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !Rune(r) && !(multiline && (r == '\t' || r == '\n')) {
			return false
		}
	}
	return true
}

// Quote returns s quoted for display the way a POSIX shell (bash) would read
// it back as one word, in ASCII alone:
//
//   - bare when s is non-empty and made only of ASCII letters, digits and
//     @%+=:,./-_ (apt, /usr/bin/apt, --yes);
//   - in single quotes when it holds spaces, shell metacharacters or other
//     printable ASCII characters ('a b', '*.log', 'say "hi"');
//   - in ANSI-C quotes $'…' when it holds a single quote, a TAB, a line break,
//     any other control, any rune beyond ASCII, or invalid UTF-8 ($'a\nb',
//     $'it\'s', $'\x1b[31m', $'caf\u00e9', $'\xff'). Inside them a backslash
//     is \\, \n \t \r keep their names, other C0 controls and DEL are \xNN,
//     other runes \uXXXX or \UXXXXXXXX, invalid bytes \xNN.
//
// A quoted word is a command's argument, which runs as it is written: every
// rune beyond ASCII is escaped, since one may look like another (a Cyrillic
// а for a Latin a, ";" U+037E for a semicolon, a combining mark), draw as a
// blank, or reorder its neighbours (right-to-left letters), and the person
// approving must see which bytes run. The result never contains a control
// character or an invisible rune, so it is always one visible line.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	bare := true
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r >= utf8.RuneSelf || r == '\'' || !Rune(r) {
			return ansiC(s)
		}
		if !safeBare(r) {
			bare = false
		}
		i += size
	}
	if bare {
		return s
	}
	return "'" + s + "'"
}

// safeBare reports whether r needs no quoting in any common shell.
func safeBare(r rune) bool {
	switch {
	case 'a' <= r && r <= 'z', 'A' <= r && r <= 'Z', '0' <= r && r <= '9':
		return true
	}
	return strings.ContainsRune("@%+=:,./-_", r)
}

func ansiC(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 3)
	b.WriteString("$'")
	writeEscaped(&b, s, true)
	b.WriteByte('\'')
	return b.String()
}

// Sanitize returns s made safe to show on one line of a terminal: printable
// runes are kept, a backslash becomes \\, TAB, LF and CR become \t, \n and
// \r, other C0 controls and DEL become \xNN, every other non-printable rune
// (C1 controls, zero-width and bidi controls, U+FEFF, separators other than
// the ASCII space, unassigned code points) becomes \uXXXX or \UXXXXXXXX, and
// each byte of invalid UTF-8 becomes \xNN. The mapping is one to one, so two
// different strings never look the same.
func Sanitize(s string) string {
	clean := true
	for _, r := range s { // invalid UTF-8 yields utf8.RuneError, which is printable: check below
		if r == '\\' || !Rune(r) {
			clean = false
			break
		}
	}
	if clean && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	writeEscaped(&b, s, false)
	return b.String()
}

// writeEscaped writes s to b with the escapes described at [Quote] (quote: also
// \' for a single quote) and [Sanitize].
func writeEscaped(b *strings.Builder, s string, quote bool) {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			fmt.Fprintf(b, `\x%02x`, s[i])
			i++
			continue
		}
		i += size
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\'' && quote:
			b.WriteString(`\'`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(b, `\x%02x`, r)
		case (!Rune(r) || quote && r >= utf8.RuneSelf) && r <= 0xffff:
			fmt.Fprintf(b, `\u%04x`, r)
		case !Rune(r) || quote && r >= utf8.RuneSelf:
			fmt.Fprintf(b, `\U%08x`, r)
		default:
			b.WriteRune(r)
		}
	}
}

// Cells is at least the number of cells s takes on any terminal: one for
// an ASCII character, two for any other rune, the most a rune takes.
// Terminals and Go's grapheme measure (uniseg, x/ansi) disagree about
// many runes: a spacing mark (U+0903) or a Hangul leading jamo joins the
// cluster before it for the latter, and takes cells of its own in tmux
// and glibc's wcwidth. A line of a requester's measured short wraps on
// the terminal and can scroll what is above it out of the window, or
// start a row with text of the requester's choosing; a line measured
// long only wraps early.
func Cells(s string) int {
	n := 0
	for _, r := range s {
		n += runeCells(r)
	}
	return n
}

func runeCells(r rune) int {
	if r < utf8.RuneSelf {
		return 1
	}
	return 2
}

// Cut splits s after its longest prefix of at most w cells ([Cells]).
func Cut(s string, w int) (head, tail string) {
	n := 0
	for i, r := range s {
		if n += runeCells(r); n > w {
			return s[:i], s[i:]
		}
	}
	return s, ""
}
