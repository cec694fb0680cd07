package clidoc

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Flag is one flag as data. A command's flag table ([]Flag) is read as it
// is by the command's parsing ([NewFlagSet]), its manual page and its
// completions.
type Flag struct {
	Name string
	// Usage is one line; a `backquoted` word in it names the value, as
	// with package flag.
	Usage string
	// Default is the default value, and its type is the flag's: bool,
	// string, int, float64, time.Duration, [List] (repeatable), [Size] or
	// [Custom].
	Default any
}

// List is a repeatable string flag's type: each use adds one value.
type List []string

// String joins the values with commas.
func (l *List) String() string { return strings.Join(*l, ",") }

// Set adds v.
func (l *List) Set(v string) error { *l = append(*l, v); return nil }

// Get returns the values as a []string.
func (l *List) Get() any { return []string(*l) }

// Custom is a flag of a program's own type: it returns a new
// [flag.Value] holding the default.
type Custom func() flag.Value

// NewFlagSet makes a flag set named name holding flags, each at its
// default, that reports parse errors to out and returns them.
func NewFlagSet(name string, flags []Flag, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	for _, f := range flags {
		switch d := f.Default.(type) {
		case bool:
			fs.Bool(f.Name, d, f.Usage)
		case string:
			fs.String(f.Name, d, f.Usage)
		case int:
			fs.Int(f.Name, d, f.Usage)
		case float64:
			fs.Float64(f.Name, d, f.Usage)
		case time.Duration:
			fs.Duration(f.Name, d, f.Usage)
		case List:
			l := slices.Clone(d)
			fs.Var(&l, f.Name, f.Usage)
		case Custom:
			fs.Var(d(), f.Name, f.Usage)
		case Size:
			v := sizeValue(d)
			fs.Var(&v, f.Name, f.Usage)
		default:
			panic(fmt.Sprintf("clidoc: flag --%s: default of unknown type %T", f.Name, f.Default))
		}
	}
	return fs
}

// Values reads a parsed flag set's flags by name. Asking for a flag the
// set lacks, or as another type than its own, is a programming error and
// panics.
type Values struct{ fs *flag.FlagSet }

// ValuesOf reads fs's flags.
func ValuesOf(fs *flag.FlagSet) Values { return Values{fs} }

func (v Values) lookup(name string) *flag.Flag {
	f := v.fs.Lookup(name)
	if f == nil {
		panic(fmt.Sprintf("clidoc: %s has no flag --%s", v.fs.Name(), name))
	}
	return f
}

func (v Values) get(name string) any { return v.lookup(name).Value.(flag.Getter).Get() }

// String is a string flag's value.
func (v Values) String(name string) string { return v.get(name).(string) }

// Bool is a boolean flag's value.
func (v Values) Bool(name string) bool { return v.get(name).(bool) }

// Int is an int flag's value.
func (v Values) Int(name string) int { return v.get(name).(int) }

// Float is a float64 flag's value.
func (v Values) Float(name string) float64 { return v.get(name).(float64) }

// Duration is a time.Duration flag's value.
func (v Values) Duration(name string) time.Duration { return v.get(name).(time.Duration) }

// List is a [List] flag's values, in the order given.
func (v Values) List(name string) []string { return v.get(name).([]string) }

// Value is a [Custom] flag's value.
func (v Values) Value(name string) flag.Value { return v.lookup(name).Value }

// Given reports whether the flag was on the command line.
func (v Values) Given(name string) bool {
	v.lookup(name)
	found := false
	v.fs.Visit(func(f *flag.Flag) { found = found || f.Name == name })
	return found
}
