package termsafe

import "testing"

func TestQuote(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "''"},
		{"word", "apt", "apt"},
		{"path", "/usr/bin/apt", "/usr/bin/apt"},
		{"flag", "--yes=1,2:3@host%+_", "--yes=1,2:3@host%+_"},
		{"space", "a b", "'a b'"},
		{"glob", "*.log", "'*.log'"},
		{"dollar", "$HOME", "'$HOME'"},
		{"semicolon", "a;rm -rf /", "'a;rm -rf /'"},
		{"tilde", "~root", "'~root'"},
		{"double quotes", `say "hi"`, `'say "hi"'`},
		{"backslash", `a\b`, `'a\b'`},
		{"non-ascii", "café", `$'caf\u00e9'`},
		{"combining mark", "cafe\u0301", `$'cafe\u0301'`},
		{"cyrillic a", "/home/\u0430lice", `$'/home/\u0430lice'`},
		{"greek question mark", "a\u037e b", `$'a\u037e b'`},
		{"braille blank", "f\u2800# ; id", `$'f\u2800# ; id'`},
		{"hebrew", "\u05d0 10 20 \u05d1", `$'\u05d0 10 20 \u05d1'`},
		{"single quote", "it's", `$'it\'s'`},
		{"newline", "a\nb", `$'a\nb'`},
		{"tab", "a\tb", `$'a\tb'`},
		{"cr", "a\rb", `$'a\rb'`},
		{"backslash with newline", "a\\\n", `$'a\\\n'`},
		{"sgr", "\x1b[31mred\x1b[0m", `$'\x1b[31mred\x1b[0m'`},
		{"osc title", "\x1b]0;title\x07", `$'\x1b]0;title\x07'`},
		{"del", "a\x7f", `$'a\x7f'`},
		{"c1 csi", "\u009b2J", `$'\u009b2J'`},
		{"zero width space", "ro\u200bot", `$'ro\u200bot'`},
		{"bom", "\ufeffx", `$'\ufeffx'`},
		{"word joiner", "a\u2060b", `$'a\u2060b'`},
		{"rtl override", "txt.\u202eexe", `$'txt.\u202eexe'`},
		{"rtl isolate", "\u2067x\u2069", `$'\u2067x\u2069'`},
		{"nbsp", "a\u00a0b", `$'a\u00a0b'`},
		{"line separator", "a\u2028b", `$'a\u2028b'`},
		{"tag character", "a\U000e0041", `$'a\U000e0041'`},
		{"invalid utf-8", "a\xffb", `$'a\xffb'`},
		{"truncated utf-8", "caf\xc3", `$'caf\xc3'`},
		{"replacement char", "a\ufffdb", `$'a\ufffdb'`},
		{"emoji", "🚀", `$'\U0001f680'`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Quote(tt.in); got != tt.want {
				t.Errorf("Quote(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestSanitize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"plain", "workstation.local", "workstation.local"},
		{"spaces and quotes", `it's "fine"`, `it's "fine"`},
		{"non-ascii", "café ☕", "café ☕"},
		{"backslash", `C:\x`, `C:\\x`},
		{"newline", "a\nb", `a\nb`},
		{"tab", "a\tb", `a\tb`},
		{"cr", "a\rb", `a\rb`},
		{"nul", "a\x00b", `a\x00b`},
		{"esc", "\x1b[2J", `\x1b[2J`},
		{"bel", "\x07", `\x07`},
		{"del", "\x7f", `\x7f`},
		{"c1", "\u0085\u009b", `\u0085\u009b`},
		{"zero width", "\u200b\u200c\u200d\u200e\u200f\u2060\ufeff", `\u200b\u200c\u200d\u200e\u200f\u2060\ufeff`},
		{"bidi", "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069", `\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069`},
		{"invalid utf-8", "\xc3\x28\xff", `\xc3(\xff`},
		{"escaped looking text stays distinct", `\x1b`, `\\x1b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Sanitize(tt.in); got != tt.want {
				t.Errorf("Sanitize(%q) = %s, want %s", tt.in, got, tt.want)
			}
		})
	}
}

// TestHostile holds every hostile string to the one rule, through each
// of its three faces: String refuses it, and Sanitize and Quote turn it
// into a line of safe runes only, different from the input.
func TestHostile(t *testing.T) {
	hostile := []struct{ name, s string }{
		{"ESC", "a\x1bb"},
		{"CSI clear screen", "\x1b[2J"},
		{"CSI SGR hides text", "\x1b[8mhidden\x1b[0m"},
		{"OSC title", "\x1b]0;title\x07"},
		{"OSC 52 clipboard", "\x1b]52;c;cm0gLXJmIH4=\x07"},
		{"C1 CSI 0x9b", "\u009b2J"},
		{"C1 OSC 0x9d", "\u009d0;x\u009c"},
		{"raw byte 0x9b", "\x9b2J"},
		{"NUL", "a\x00b"},
		{"CR overwrites", "safe\rrm -rf /"},
		{"backspace", "rm\b\b"},
		{"DEL", "a\x7f"},
		{"RLO U+202E", "txt.\u202eexe"},
		{"LRI U+2066", "\u2066a\u2069"},
		{"PDI U+2069", "a\u2069"},
		{"zero-width space", "ro\u200bot"},
		{"zero-width joiner", "a\u200db"},
		{"word joiner", "a\u2060b"},
		{"BOM", "\ufeffa"},
		{"soft hyphen", "a\u00adb"},
		{"Arabic letter mark", "a\u061cb"},
		{"tag character", "a\U000e0041b"},
		{"line separator", "a\u2028b"},
		{"no-break space", "a\u00a0b"},
		{"private use", "a\ue000b"},
		{"invalid UTF-8", "a\xffb"},
		{"truncated UTF-8", "a\xe2\x80"},
		{"encoded surrogate", "a\xed\xa0\x80b"},
		{"variation selector 16", "/etc/passwd\ufe0f"},
		{"variation selector supplement", "a\U000e0101b"},
		{"combining grapheme joiner", "a\u034fb"},
		{"Hangul filler", "a\u3164b"},
		{"braille pattern blank", "cat f\u2800# ; id"},
		{"musical null notehead", "a\U0001d159b"},
		{"Khitan filler", "a\U00016fe4b"},
		{"Mongolian variation selector", "a\u180bb"},
	}
	for _, h := range hostile {
		t.Run(h.name, func(t *testing.T) {
			if String(h.s, false) || String(h.s, true) {
				t.Errorf("String(%q) = true", h.s)
			}
			for name, out := range map[string]string{"Sanitize": Sanitize(h.s), "Quote": Quote(h.s)} {
				if out == h.s || !String(out, false) {
					t.Errorf("%s(%q) = %q, not escaped to safe runes", name, h.s, out)
				}
			}
		})
	}
	for _, s := range []string{"apt", "café", "日本語", "a b", "→ ✓", "\ufffd", "emoji 😀", "e\u0301"} {
		if !String(s, false) || Sanitize(s) != s {
			t.Errorf("String/Sanitize refuse %q, which is safe", s)
		}
	}
	if !String("a\tb\nc", true) || String("a\tb", false) || String("a\nb", false) {
		t.Error("TAB and LF are safe exactly when multiline")
	}
}

// Cells never counts fewer cells than a terminal draws: tmux (glibc's
// wcwidth) gives a spacing mark a cell and a Hangul leading jamo two,
// where Go's grapheme measure folds runs of them into one character.
func TestCells(t *testing.T) {
	for _, c := range []struct {
		s          string
		cells      int
		cut4, tail string
	}{
		{"apt", 3, "apt", ""},
		{"a\u0903\u0903\u0903", 7, "a\u0903", "\u0903\u0903"},
		{"\u1100\u1100\u1100", 6, "\u1100\u1100", "\u1100"},
		{"ab·cd", 6, "ab·", "cd"},
		{"", 0, "", ""},
	} {
		if got := Cells(c.s); got != c.cells {
			t.Errorf("Cells(%q) = %d, want %d", c.s, got, c.cells)
		}
		if head, tail := Cut(c.s, 4); head != c.cut4 || tail != c.tail {
			t.Errorf("Cut(%q, 4) = %q, %q, want %q, %q", c.s, head, tail, c.cut4, c.tail)
		}
	}
}
