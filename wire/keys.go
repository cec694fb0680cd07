package wire

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
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
func CheckKeys(raw []byte, s *Shape) error {
	w := &keyWalker{dec: json.NewDecoder(bytes.NewReader(raw)), raw: raw, path: make([]pathElem, 0, 8)}
	w.dec.UseNumber()
	err := w.value(s)
	if _, ok := err.(*KeyError); ok {
		return err
	}
	if _, ok := err.(*SurrogateError); ok {
		return err
	}
	return nil
}

type keyWalker struct {
	dec  *json.Decoder
	raw  []byte
	off  int64      // where the last token ended
	path []pathElem // where the walk is; rendered only for an error
}

// pathElem is one step of a path: a field name, a map key or an index.
type pathElem struct {
	name  string
	index int
	kind  byte // 'f' field, 'k' map key, 'i' index
}

func (w *keyWalker) where() string {
	var b strings.Builder
	for _, e := range w.path {
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

// token reads the next token and checks the bytes it spanned for lone
// surrogates; the span holds one token and the punctuation before it, so
// any backslash in it is inside that token's string.
func (w *keyWalker) token(key bool) (json.Token, error) {
	tok, err := w.dec.Token()
	if err != nil {
		return nil, err
	}
	end := w.dec.InputOffset()
	span := w.raw[w.off:end]
	w.off = end
	if loneSurrogate(span) {
		where := w.where()
		switch {
		case key && where == "":
			where = "a field name"
		case key:
			where = "a key in " + where
		case where == "":
			where = "the value"
		}
		return nil, &SurrogateError{Path: where}
	}
	return tok, nil
}

func (w *keyWalker) value(s *Shape) error {
	tok, err := w.token(false)
	if err != nil {
		return err
	}
	return w.rest(tok, s)
}

// rest walks what follows tok, the first token of a value.
func (w *keyWalker) rest(tok json.Token, s *Shape) error {
	d, ok := tok.(json.Delim)
	if !ok {
		return nil
	}
	switch d {
	case '[':
		var elem *Shape
		if s != nil && !s.Map {
			elem = s.Elem
		}
		for i := 0; w.dec.More(); i++ {
			w.path = append(w.path, pathElem{index: i, kind: 'i'})
			err := w.value(elem)
			w.path = w.path[:len(w.path)-1]
			if err != nil {
				return err
			}
		}
	case '{':
		var seen map[string]bool
		if s.isObject() {
			seen = map[string]bool{}
		}
		for w.dec.More() {
			tok, err := w.token(true)
			if err != nil {
				return err
			}
			k, _ := tok.(string)
			if seen != nil {
				if seen[k] {
					return &KeyError{Path: w.where(), Key: k, Repeated: true}
				}
				seen[k] = true
			}
			var sub *Shape
			step := pathElem{name: k, kind: 'k'}
			switch {
			case s == nil:
			case s.Fields != nil:
				var known bool
				if sub, known = s.Fields[k]; !known {
					return &KeyError{Path: w.where(), Key: k}
				}
				step.kind = 'f'
			case s.Map:
				sub = s.Elem
			}
			w.path = append(w.path, step)
			err = w.value(sub)
			w.path = w.path[:len(w.path)-1]
			if err != nil {
				return err
			}
		}
	default:
		return nil // a closing delimiter: the decoder reports it
	}
	_, err := w.dec.Token() // the closing delimiter
	if err != nil {
		return err
	}
	w.off = w.dec.InputOffset()
	return nil
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
