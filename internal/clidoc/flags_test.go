package clidoc

import (
	"bytes"
	"errors"
	"flag"
	"strconv"
	"testing"
	"time"
)

// size is a flag type of a program's own, for Custom.
type size int64

func (s *size) String() string { return strconv.FormatInt(int64(*s), 10) }
func (s *size) Set(v string) error {
	n, err := strconv.ParseInt(v, 10, 64)
	*s = size(n)
	return err
}

var testFlags = []Flag{
	{Name: "s", Default: "def", Usage: "a `word`"},
	{Name: "b", Default: false, Usage: "a switch"},
	{Name: "i", Default: 3, Usage: "a count"},
	{Name: "f", Default: 1.5, Usage: "seconds"},
	{Name: "d", Default: time.Minute, Usage: "a wait"},
	{Name: "l", Default: List(nil), Usage: "repeatable"},
	{Name: "c", Default: Custom(func() flag.Value { s := size(7); return &s }), Usage: "a `size`"},
}

// TestFlagTable: a flag table parses into values of each type, starts
// each parse at the defaults, and says which flags were given.
func TestFlagTable(t *testing.T) {
	fs := NewFlagSet("prog", testFlags, nil)
	if err := fs.Parse([]string{"-s", "x", "-b", "-i", "4", "-f", "2.5", "-d", "2s", "-l", "a", "-l", "b", "-c", "9", "rest"}); err != nil {
		t.Fatal(err)
	}
	v := ValuesOf(fs)
	if v.String("s") != "x" || !v.Bool("b") || v.Int("i") != 4 || v.Float("f") != 2.5 || v.Duration("d") != 2*time.Second {
		t.Errorf("parsed s=%q b=%v i=%d f=%v d=%v", v.String("s"), v.Bool("b"), v.Int("i"), v.Float("f"), v.Duration("d"))
	}
	if l := v.List("l"); len(l) != 2 || l[0] != "a" || l[1] != "b" {
		t.Errorf("list %q, want [a b]", l)
	}
	if c := *v.Value("c").(*size); c != 9 {
		t.Errorf("custom %d, want 9", c)
	}
	if !v.Given("l") || fs.NArg() != 1 {
		t.Errorf("given l %v, args %q", v.Given("l"), fs.Args())
	}

	// A second parse of the same table starts from the defaults again.
	fs = NewFlagSet("prog", testFlags, nil)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	v = ValuesOf(fs)
	if v.String("s") != "def" || v.Bool("b") || v.Int("i") != 3 || v.Float("f") != 1.5 || v.Duration("d") != time.Minute || len(v.List("l")) != 0 || *v.Value("c").(*size) != 7 || v.Given("l") {
		t.Errorf("defaults not restored")
	}
}

// TestFlagTableErrors: a bad value is reported to the set's output; -h is
// flag.ErrHelp; reading a flag the table lacks is a programming error.
func TestFlagTableErrors(t *testing.T) {
	var out bytes.Buffer
	fs := NewFlagSet("prog", testFlags, &out)
	if err := fs.Parse([]string{"-i", "many"}); err == nil || !bytes.Contains(out.Bytes(), []byte(`invalid value "many" for flag -i`)) {
		t.Errorf("bad int: %v\n%s", err, &out)
	}
	if err := NewFlagSet("prog", testFlags, &out).Parse([]string{"-h"}); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("reading an unknown flag did not panic")
		}
	}()
	ValuesOf(fs).String("nope")
}
