package clidoc

import (
	"io"
	"testing"
	"time"
)

type inner struct {
	Wait time.Duration
	Off  int64
}

type outer struct {
	In    inner
	Name  string
	Many  []string
	Size  int64
	Count int
	On    bool
}

var innerSettings = []Setting[inner]{
	{Flag: Flag{Name: "wait", Default: time.Minute}, Field: func(c *inner) any { return &c.Wait }},
	{Flag: Flag{Name: "off", Default: Size(2 << 10)}, Field: func(c *inner) any { return &c.Off }, ZeroKept: true},
}

var outerSettings = append(Within(innerSettings, func(o *outer) *inner { return &o.In }), []Setting[outer]{
	{Flag: Flag{Name: "name", Default: "def"}, Field: func(o *outer) any { return &o.Name }},
	{Flag: Flag{Name: "many", Default: List{"a"}}, Field: func(o *outer) any { return &o.Many }},
	{Flag: Flag{Name: "size", Default: Size(1 << 20)}, Field: func(o *outer) any { return &o.Size }},
	{Flag: Flag{Name: "count", Default: 3}, Field: func(o *outer) any { return &o.Count }},
	{Flag: Flag{Name: "on", Default: false}, Field: func(o *outer) any { return &o.On }},
}...)

// TestSettings: Bind parses into the fields, a library's settings
// included (Within), each parse starting from the defaults; Fill gives a
// zero field its default unless the setting keeps zero; a field of another
// type than its default's is a programming error.
func TestSettings(t *testing.T) {
	var o outer
	fs := Bind("prog", outerSettings, &o, io.Discard)
	if err := fs.Parse([]string{"-wait", "2s", "-off", "0", "-name", "x", "-many", "b", "-size", "3K", "-count", "4", "-on"}); err != nil {
		t.Fatal(err)
	}
	if o.In.Wait != 2*time.Second || o.In.Off != 0 || o.Name != "x" || len(o.Many) != 2 || o.Many[1] != "b" || o.Size != 3<<10 || o.Count != 4 || !o.On {
		t.Errorf("parsed %+v", o)
	}
	var def outer
	if err := Bind("prog", outerSettings, &def, io.Discard).Parse(nil); err != nil {
		t.Fatal(err)
	}
	if def.In.Wait != time.Minute || def.In.Off != 2<<10 || def.Name != "def" || len(def.Many) != 1 || def.Size != 1<<20 || def.Count != 3 || def.On {
		t.Errorf("defaults %+v", def)
	}
	if err := Bind("prog", outerSettings, &def, io.Discard).Parse([]string{"-size", "1T"}); err == nil {
		t.Error("-size 1T parsed")
	}

	var zero outer
	Fill(outerSettings, &zero)
	if zero.In.Wait != time.Minute || zero.In.Off != 0 || zero.Name != "def" || zero.Size != 1<<20 || zero.Count != 3 {
		t.Errorf("filled %+v", zero)
	}
	if got := Settings(outerSettings); len(got) != len(outerSettings) || got[0].Name != "wait" {
		t.Errorf("Settings: %+v", got)
	}

	defer func() {
		if recover() == nil {
			t.Error("a field of another type than its default's did not panic")
		}
	}()
	Bind("prog", []Setting[outer]{{Flag: Flag{Name: "n", Default: 1}, Field: func(o *outer) any { return &o.Name }}}, &o, io.Discard)
}
