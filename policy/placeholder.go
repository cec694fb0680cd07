package policy

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Typed argument placeholders (docs/policy.md, "Placeholders"): a pattern
// word written as {unit}, {int}, {int<=N} or {a|b|...} matches one argument
// of that kind instead of a glob. None of them matches an argument starting
// with "-" unless it is a listed alternative, so a placeholder never admits
// an option the operator did not write out.

// placeholderKind says what a placeholder admits. The zero value is no
// placeholder: the pattern word is a glob.
type placeholderKind int

const (
	phNone  placeholderKind = iota
	phUnit                  // {unit}
	phInt                   // {int}, {int<=N}
	phOneOf                 // {a|b|...}
)

// unitNameMax is the longest unit name systemd accepts (UNIT_NAME_MAX
// less the terminating NUL).
const unitNameMax = 255

// placeholderWant lists the placeholders for error messages.
const placeholderWant = `want {unit}, {int}, {int<=N} or {a|b|...}; write \{ for a literal {`

// placeholder is one parsed placeholder word.
type placeholder struct {
	kind placeholderKind
	max  int64    // phInt: the largest number admitted
	alts []string // phOneOf: the literal words admitted
}

// firstBrace returns the index of the first "{" in the glob w that is not
// escaped by a backslash, or -1.
func firstBrace(w string) int {
	for i := 0; i < len(w); i++ {
		switch w[i] {
		case '\\':
			i++
		case '{':
			return i
		}
	}
	return -1
}

// parsePlaceholder parses pattern word number i (0 for the command). ok is
// false for a word that is a glob. An unescaped "{" anywhere but at the
// start of an argument word is an error, so that a brace meant as a
// placeholder never silently becomes literal text.
func parsePlaceholder(i int, w string) (ph placeholder, ok bool, err error) {
	b := firstBrace(w)
	switch {
	case b < 0:
		return placeholder{}, false, nil
	case b > 0:
		return placeholder{}, false, fmt.Errorf(`"{" inside %q: a placeholder is a whole word; write \{ for a literal {`, w)
	case i == 0:
		return placeholder{}, false, fmt.Errorf("placeholder %q in place of the command: a rule names its command", w)
	case !strings.HasSuffix(w, "}") || len(w) < 2:
		return placeholder{}, false, fmt.Errorf(`placeholder %q does not end in "}": a placeholder is a whole word; write \{ for a literal {`, w)
	}
	body := w[1 : len(w)-1]
	switch {
	case body == "unit":
		return placeholder{kind: phUnit}, true, nil
	case body == "int":
		return placeholder{kind: phInt, max: math.MaxInt64}, true, nil
	case strings.HasPrefix(body, "int<="):
		n, err := parseDecimal(strings.TrimPrefix(body, "int<="))
		if err != nil {
			return placeholder{}, false, fmt.Errorf("bad bound in placeholder %q: want a decimal integer such as {int<=500}", w)
		}
		return placeholder{kind: phInt, max: n}, true, nil
	case strings.Contains(body, "|"):
		alts := strings.Split(body, "|")
		for _, a := range alts {
			if a == "" {
				return placeholder{}, false, fmt.Errorf("empty alternative in placeholder %q", w)
			}
			if strings.ContainsAny(a, `{}\`) {
				return placeholder{}, false, fmt.Errorf(`alternative %q in placeholder %q holds "{", "}" or "\": alternatives are literal words`, a, w)
			}
		}
		return placeholder{kind: phOneOf, alts: alts}, true, nil
	}
	return placeholder{}, false, fmt.Errorf("unknown placeholder %q: %s", w, placeholderWant)
}

// errNotDecimal is parseDecimal's error for anything but a plain number.
var errNotDecimal = errors.New("not a decimal integer")

// parseDecimal parses s as a number written in decimal digits only: no
// sign, no leading zero (but "0"), no "0x", no "_", and at most
// math.MaxInt64. A program may read "010" as octal or "+5" as 5; the
// placeholder admits only the one spelling every program reads alike.
func parseDecimal(s string) (int64, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" || len(s) > 1 && s[0] == '0' {
		return 0, errNotDecimal
	}
	return strconv.ParseInt(s, 10, 64)
}

// whyNot returns why arg is not admitted by ph, or "" when it is. The
// text follows `argument N "ARG" `.
func (ph *placeholder) whyNot(arg string) string {
	switch ph.kind {
	case phUnit:
		return unitWhyNot(arg)
	case phInt:
		n, err := parseDecimal(arg)
		switch {
		case errors.Is(err, errNotDecimal) && len(arg) > 1 && arg[0] == '0' && strings.Trim(arg, "0123456789") == "":
			return "has a leading zero"
		case errors.Is(err, errNotDecimal):
			return "is not a decimal integer"
		case err != nil:
			return fmt.Sprintf("is over %d", int64(math.MaxInt64))
		case n > ph.max:
			return fmt.Sprintf("is over %d", ph.max)
		}
		return ""
	case phOneOf:
		for _, a := range ph.alts {
			if arg == a {
				return ""
			}
		}
		return "is not one of {" + strings.Join(ph.alts, "|") + "}"
	}
	return "matches no placeholder"
}

// unitWhyNot says why s is not a unit name as {unit} admits it: 1 to 255
// of the characters A-Z a-z 0-9 : _ . @ -, the first a letter or digit.
// That holds every unit name systemd writes unescaped (nginx,
// nginx.service, getty@tty1.service) and no option, glob or path.
func unitWhyNot(s string) string {
	if s == "" {
		return "is not a unit name: it is empty"
	}
	if len(s) > unitNameMax {
		return fmt.Sprintf("is not a unit name: it is over %d characters", unitNameMax)
	}
	if c := s[0]; !isASCIIAlnum(c) {
		return fmt.Sprintf("is not a unit name: it starts with %q", rune(c))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isASCIIAlnum(c) && !strings.ContainsRune(":_.@-", rune(c)) {
			if c >= 0x80 {
				return "is not a unit name: it holds a non-ASCII character"
			}
			return fmt.Sprintf("is not a unit name: it holds %q", rune(c))
		}
	}
	return ""
}

func isASCIIAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// argWhyNot returns why argument i (1 or more) of a stage does not match
// pattern word i of r, or "" when it does.
func (r *Rule) argWhyNot(i int, arg string, explain bool) string {
	if i < len(r.places) && r.places[i].kind != phNone {
		if why := r.places[i].whyNot(arg); why != "" {
			if !explain {
				return no
			}
			return fmt.Sprintf("argument %d %q %s", i, arg, why)
		}
		return ""
	}
	if !wordMatch(r.words[i], arg) {
		if !explain {
			return no
		}
		return fmt.Sprintf("argument %d %q does not match %q", i, arg, r.words[i])
	}
	return ""
}
