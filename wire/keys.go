package wire

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Go's JSON decoder matches an object key to a struct field ignoring case
// and folding Unicode ("Approve", "APPROVE" and "ſ" for "s" all land on
// the same field), keeps the last of repeated keys, and turns an escaped
// lone UTF-16 surrogate ("\ud800") into U+FFFD. Each of these lets one
// line mean one thing to the daemon and another to a person or another
// reader. [CheckKeys] refuses such lines before they are decoded; it is
// run on every line that carries requester or approver input.

// Shape says which keys a JSON value's objects may have: the object keys
// [CheckKeys] accepts, level by level. A nil or zero Shape is a scalar (a
// string, number, boolean, or a type that decodes itself).
type Shape struct {
	// Fields, when not nil, makes the value an object whose keys must be
	// exactly these names, each with the shape of its value.
	Fields map[string]*Shape
	// Map makes the value an object with any keys (each once), whose
	// values have the shape Elem.
	Map bool
	// Elem, when Map is false, makes the value an array of Elem.
	Elem *Shape
	// Max, when not 0, is the most members (elements, or keys) the
	// array or object may have: [CheckKeys] refuses the next one (a
	// [*CountError]) before reading it, so that no decoder is given a
	// million of them to allocate.
	Max int
}

func (s *Shape) isObject() bool { return s != nil && (s.Fields != nil || s.Map) }

// ShapeOf derives a Shape from t's encoding/json form: the names of a
// struct's fields come from their json tags (or the Go names), so a field
// added to the struct is known without more code. Types that decode
// themselves (json.Unmarshaler, encoding.TextUnmarshaler, such as
// time.Time) and []byte are scalars. t must not refer to itself.
func ShapeOf(t reflect.Type) *Shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pt := reflect.PointerTo(t)
	if pt.Implements(reflect.TypeFor[json.Unmarshaler]()) || pt.Implements(reflect.TypeFor[encoding.TextUnmarshaler]()) {
		return &Shape{}
	}
	switch t.Kind() {
	case reflect.Struct:
		s := &Shape{Fields: map[string]*Shape{}}
		addFields(s.Fields, t)
		return s
	case reflect.Map:
		return &Shape{Map: true, Elem: ShapeOf(t.Elem())}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return &Shape{} // base64 string
		}
		return &Shape{Elem: ShapeOf(t.Elem())}
	}
	return &Shape{}
}

// addFields adds t's JSON field names to fields, flattening untagged
// embedded structs as encoding/json does.
func addFields(fields map[string]*Shape, t reflect.Type) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if name == "-" && !strings.HasPrefix(tag, "-,") {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			addFields(fields, f.Type)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = ShapeOf(f.Type)
	}
}

// KeyError is an object key [CheckKeys] refuses.
type KeyError struct {
	// Path is where the object is: "" for the top level, else e.g.
	// "request", "request.stages[0]" or "env".
	Path string
	Key  string
	// Repeated: the object names Key twice. Otherwise Key is not exactly
	// one of the object's field names.
	Repeated bool
}

func (e *KeyError) Error() string {
	what := "unknown field"
	if e.Repeated {
		what = "duplicate field"
	}
	if e.Path == "" {
		return fmt.Sprintf("%s %q", what, e.Key)
	}
	return fmt.Sprintf("%s %q in %s", what, e.Key, e.Path)
}

// CountError is an array or object with more members than its
// [Shape.Max].
type CountError struct {
	// Path is where the array or object is, as in [KeyError].
	Path string
	Max  int
}

func (e *CountError) Error() string {
	where := e.Path
	if where == "" {
		where = "the value"
	}
	return fmt.Sprintf("%s has more than %d members", where, e.Max)
}

// SurrogateError is a string [CheckKeys] refuses because it holds an
// escaped UTF-16 surrogate that is not half of a pair ("\ud800"): the
// decoder would make it U+FFFD, so the string used would differ from the
// one sent.
type SurrogateError struct {
	// Path names the string: e.g. "pipeline[0][1]", `env["K"]`, or
	// "a field name" when it is an object key.
	Path string
}

func (e *SurrogateError) Error() string {
	return e.Path + " contains an escaped lone surrogate (\\ud800-\\udfff without its pair)"
}

// CheckKeys walks raw, one JSON value, and refuses the first object key
// that s does not allow (not exactly a field name, or given twice: a
// [*KeyError]) and the first string holding an escaped lone surrogate (a
// [*SurrogateError]). Where raw is not valid JSON, or a value has another
// type than s says (an object where a string belongs), what is wrong is
// left to the decoder, which must run next: CheckKeys returns nil then,
// or an error it found before.
//
// CheckKeys first refuses a value nested deeper than [MaxDepth] (a
// [*DepthError]), by one pass over raw that keeps no more than a count,
// so that no line costs more than a pass per byte whatever its shape.
func CheckKeys(raw []byte, s *Shape) error {
	if err := CheckDepth(raw); err != nil {
		return err
	}
	return checkKeysShallow(raw, s)
}

// checkKeysShallow is CheckKeys for raw that passed CheckDepth already
// (Decode's line): the depth is not counted a second time.
func checkKeysShallow(raw []byte, s *Shape) error {
	w := &keyWalker{raw: raw, stack: make([]level, 0, 8)}
	return w.walk(s)
}

// MaxDepth is the deepest nesting of arrays and objects a line may have:
// a request needs 3 (the object, its pipeline, a stage), an approver's
// message 4. Deeper lines are refused before any parser sees them, since
// a parser's work (encoding/json's, or CheckKeys' walk) grows with the
// depth it is asked to track.
const MaxDepth = 32

// DepthError is a line nested deeper than [MaxDepth].
type DepthError struct{}

func (*DepthError) Error() string {
	return fmt.Sprintf("JSON nested deeper than %d levels", MaxDepth)
}

// CheckDepth refuses (a [*DepthError]) JSON text raw whose arrays and
// objects nest deeper than [MaxDepth], in one pass over raw that skips
// strings and counts brackets. Brackets that do not match, and any other
// error, are left to the decoder: where raw is not JSON, the decoder
// stops at or before the first byte where this count and its own view
// could part.
func CheckDepth(raw []byte) error {
	depth := 0
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '"':
			// Skip the string: to the first quote not escaped.
			for i++; i < len(raw) && raw[i] != '"'; i++ {
				if raw[i] == '\\' {
					i++
				}
			}
		case '[', '{':
			if depth++; depth > MaxDepth {
				return &DepthError{}
			}
		case ']', '}':
			depth--
		}
	}
	return nil
}

// keyWalker is CheckKeys' one pass over a line: a loop with a stack of
// the arrays and objects it is in (at most MaxDepth, as CheckDepth made
// sure), not a call per level, and no token decoded but object keys.
type keyWalker struct {
	raw   []byte
	i     int     // the next byte to read
	stack []level // the arrays and objects the walk is in, outermost first
}

// level is an array or object the walk is in.
type level struct {
	shape  *Shape
	object bool
	seen   map[string]bool // keys so far, where shape names them
	index  int             // of an array's next element, or how many keys so far
	step   pathElem        // to the member being walked
}

// pathElem is one step of a path: a field name, a map key or an index.
type pathElem struct {
	name  string
	index int
	kind  byte // 'f' field, 'k' map key, 'i' index
}

// where renders the path of the first n levels' steps, for an error.
func (w *keyWalker) where(n int) string {
	var b strings.Builder
	for _, l := range w.stack[:n] {
		e := l.step
		switch e.kind {
		case 'f':
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(e.name)
		case 'k':
			b.WriteString("[" + strconv.Quote(e.name) + "]")
		case 'i':
			b.WriteString("[" + strconv.Itoa(e.index) + "]")
		}
	}
	return b.String()
}

// errStop ends the walk where raw is not JSON: the decoder says what is
// wrong.
var errStop = errors.New("not JSON")

// walk checks the value at w.i, of shape s, and all it holds.
func (w *keyWalker) walk(s *Shape) error {
	err := w.values(s)
	if err == errStop {
		return nil
	}
	return err
}

// values walks the value at w.i, of shape want, and every value after
// it up to the end of the outermost one: a value opens an array or
// object, or is a scalar; after one, the arrays and objects that end
// there are closed and the walk goes on with the next member.
func (w *keyWalker) values(want *Shape) error {
	for {
		// A value of shape want.
		c, err := w.peek()
		if err != nil {
			return err
		}
		if c == '{' || c == '[' {
			first, more, err := w.open(c, want)
			if err != nil {
				return err
			}
			if more {
				want = first
				continue
			}
		} else if err := w.scalar(c); err != nil {
			return err
		}
		// The value is done: end the arrays and objects that end here,
		// then go on with the next member.
		next, done, err := w.close()
		if err != nil || done {
			return err
		}
		want = next
	}
}

// open enters the array or object that c, at w.i, begins, of shape want.
// more says it is not empty: w.i is then at its first member's value,
// of shape first.
func (w *keyWalker) open(c byte, want *Shape) (first *Shape, more bool, err error) {
	w.i++
	l := level{shape: want, object: c == '{'}
	if l.object && want.isObject() {
		l.seen = map[string]bool{}
	}
	w.stack = append(w.stack, l)
	if c, err = w.peek(); err != nil {
		return nil, false, err
	}
	if c == '}' || c == ']' {
		return nil, false, nil
	}
	first, err = w.member()
	return first, true, err
}

// scalar reads the string, number, boolean or null that c, at w.i,
// begins, refusing a string with an escaped lone surrogate.
func (w *keyWalker) scalar(c byte) error {
	start := w.i
	if c == '"' {
		if err := w.skipString(); err != nil {
			return err
		}
		if loneSurrogate(w.raw[start:w.i]) {
			where := w.where(len(w.stack))
			if where == "" {
				where = "the value"
			}
			return &SurrogateError{Path: where}
		}
		return nil
	}
	for w.i < len(w.raw) && scalarByte(w.raw[w.i]) {
		w.i++
	}
	if w.i == start {
		return errStop
	}
	return nil
}

// close follows a value: it ends the arrays and objects that end after
// it, up to a ',' and the next member's value, of shape next. done says
// the outermost value ended (what follows it is the decoder's).
func (w *keyWalker) close() (next *Shape, done bool, err error) {
	for len(w.stack) > 0 {
		c, err := w.peek()
		if err != nil {
			return nil, false, err
		}
		if c == ',' {
			w.i++
			next, err = w.member()
			return next, false, err
		}
		top := &w.stack[len(w.stack)-1]
		if top.object && c != '}' || !top.object && c != ']' {
			return nil, false, errStop
		}
		w.i++
		w.stack = w.stack[:len(w.stack)-1]
	}
	return nil, true, nil
}

// member reads the beginning of the next member of the innermost array
// or object, up to its value: for an object, its key and colon, checked
// against the object's shape. It returns the value's shape.
func (w *keyWalker) member() (*Shape, error) {
	top := &w.stack[len(w.stack)-1]
	s := top.shape
	if s != nil && s.Max > 0 && top.index >= s.Max {
		return nil, &CountError{Path: w.where(len(w.stack) - 1), Max: s.Max}
	}
	if !top.object {
		top.step = pathElem{index: top.index, kind: 'i'}
		top.index++
		if s != nil && !s.Map {
			return s.Elem, nil
		}
		return nil, nil
	}
	k, err := w.key()
	if err != nil {
		return nil, err
	}
	top.index++
	if top.seen != nil {
		if top.seen[k] {
			return nil, &KeyError{Path: w.where(len(w.stack) - 1), Key: k, Repeated: true}
		}
		top.seen[k] = true
	}
	var sub *Shape
	top.step = pathElem{name: k, kind: 'k'}
	switch {
	case s == nil:
	case s.Fields != nil:
		var known bool
		if sub, known = s.Fields[k]; !known {
			return nil, &KeyError{Path: w.where(len(w.stack) - 1), Key: k}
		}
		top.step.kind = 'f'
	case s.Map:
		sub = s.Elem
	}
	return sub, nil
}

// key reads an object's key, at w.i, and the colon after it, refusing a
// key with an escaped lone surrogate.
func (w *keyWalker) key() (string, error) {
	c, err := w.peek()
	if err != nil || c != '"' {
		return "", errStop
	}
	start := w.i
	if err := w.skipString(); err != nil {
		return "", err
	}
	span := w.raw[start:w.i]
	if loneSurrogate(span) {
		where := w.where(len(w.stack) - 1)
		if where == "" {
			where = "a field name"
		} else {
			where = "a key in " + where
		}
		return "", &SurrogateError{Path: where}
	}
	k, ok := keyText(span)
	if !ok {
		return "", errStop
	}
	if c, err = w.peek(); err != nil || c != ':' {
		return "", errStop
	}
	w.i++
	return k, nil
}

// peek skips JSON whitespace and returns the byte that follows.
func (w *keyWalker) peek() (byte, error) {
	for ; w.i < len(w.raw); w.i++ {
		switch c := w.raw[w.i]; c {
		case ' ', '\t', '\r', '\n':
		default:
			return c, nil
		}
	}
	return 0, errStop
}

// skipString moves past the string that begins at w.i.
func (w *keyWalker) skipString() error {
	for w.i++; w.i < len(w.raw); w.i++ {
		switch c := w.raw[w.i]; {
		case c == '"':
			w.i++
			return nil
		case c == '\\':
			w.i++
		case c < 0x20:
			return errStop
		}
	}
	return errStop
}

// scalarByte: b may be part of a number, true, false or null.
func scalarByte(b byte) bool {
	return '0' <= b && b <= '9' || 'a' <= b && b <= 'z' || b == '-' || b == '+' || b == '.' || b == 'E'
}

// keyText is the text of span, a JSON string, as the decoder reads it.
func keyText(span []byte) (string, bool) {
	plain := true
	for _, c := range span {
		if c == '\\' || c >= utf8.RuneSelf {
			plain = false
			break
		}
	}
	if plain {
		return string(span[1 : len(span)-1]), true
	}
	var k string
	err := json.Unmarshal(span, &k)
	return k, err == nil
}

// loneSurrogate reports whether b, JSON text, holds a \u escape of a
// UTF-16 surrogate that is not a high one directly followed by a low one.
func loneSurrogate(b []byte) bool {
	for i := bytes.IndexByte(b, '\\'); i >= 0 && i+1 < len(b); {
		if b[i+1] != 'u' {
			i = next(b, i+2)
			continue
		}
		r, ok := hex4(b, i+2)
		switch {
		case !ok:
			return false // not JSON: the decoder says so
		case r >= 0xdc00 && r <= 0xdfff:
			return true
		case r >= 0xd800 && r <= 0xdbff:
			if i+12 > len(b) || b[i+6] != '\\' || b[i+7] != 'u' {
				return true
			}
			lo, ok := hex4(b, i+8)
			if !ok || lo < 0xdc00 || lo > 0xdfff {
				return true
			}
			i = next(b, i+12)
		default:
			i = next(b, i+6)
		}
	}
	return false
}

// next is the index of the first backslash of b at or after i, or -1.
func next(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	j := bytes.IndexByte(b[i:], '\\')
	if j < 0 {
		return -1
	}
	return i + j
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[i:i+4]), 16, 32)
	return rune(n), err == nil
}
