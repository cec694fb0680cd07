package clidoc

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"
)

// Setting is one setting of a program, declared once: its flag (name,
// default, doc) bound to the field of the settings struct T that holds it.
// A program's settings are a table ([]Setting[T]): [Bind] parses the
// command line into a T through it, [Settings] gives its flags to a
// [Page] (the manual page, the completions) and [Fill] gives a T's zero
// fields their defaults, for a T made without parsing.
type Setting[T any] struct {
	Flag
	// Field returns the address of the field in t that the flag sets: a
	// pointer to the Default's type (*bool, *string, *int, *float64,
	// *time.Duration, *[]string for a [List], *int64 for a [Size]).
	Field func(t *T) any
	// ZeroKept makes [Fill] leave a zero field as it is: zero is a
	// value of the setting's own ("off"), not "the default".
	ZeroKept bool
}

// Size is a size flag's default: bytes, given as a number with an
// optional K, M or G (powers of 1024). Its field is an int64.
type Size int64

// sizeValue is the [flag.Value] of a [Size] flag's field.
type sizeValue int64

func (s *sizeValue) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *sizeValue) Set(v string) error {
	mult := int64(1)
	if n := len(v); n > 0 {
		switch v[n-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		}
		if mult > 1 {
			v = v[:n-1]
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return errors.New("not a size: want bytes, or a number with K, M or G")
	}
	*s = sizeValue(n * mult)
	return nil
}

// Settings are the flags of settings, for a [Page] or [NewFlagSet].
func Settings[T any](settings []Setting[T]) []Flag {
	out := make([]Flag, len(settings))
	for i, s := range settings {
		out[i] = s.Flag
	}
	return out
}

// Within makes settings of a struct U settings of a struct T that holds
// a U, at the address in returns: a program's own settings may take a
// library's ([Setting]s of the library's Config) as they are.
func Within[T, U any](settings []Setting[U], in func(*T) *U) []Setting[T] {
	out := make([]Setting[T], len(settings))
	for i, s := range settings {
		field := s.Field
		out[i] = Setting[T]{Flag: s.Flag, ZeroKept: s.ZeroKept, Field: func(t *T) any { return field(in(t)) }}
	}
	return out
}

// Bind makes a flag set named name whose flags are settings, each at its
// default in t's field, which parsing sets; it reports parse errors to
// out and returns them. A field of another type than its Default's is a
// programming error and panics.
func Bind[T any](name string, settings []Setting[T], t *T, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(out)
	for _, s := range settings {
		p := s.Field(t)
		ok := true
		switch d := s.Default.(type) {
		case bool:
			var f *bool
			if f, ok = p.(*bool); ok {
				fs.BoolVar(f, s.Name, d, s.Usage)
			}
		case string:
			var f *string
			if f, ok = p.(*string); ok {
				fs.StringVar(f, s.Name, d, s.Usage)
			}
		case int:
			var f *int
			if f, ok = p.(*int); ok {
				fs.IntVar(f, s.Name, d, s.Usage)
			}
		case float64:
			var f *float64
			if f, ok = p.(*float64); ok {
				fs.Float64Var(f, s.Name, d, s.Usage)
			}
		case time.Duration:
			var f *time.Duration
			if f, ok = p.(*time.Duration); ok {
				fs.DurationVar(f, s.Name, d, s.Usage)
			}
		case List:
			var f *[]string
			if f, ok = p.(*[]string); ok {
				*f = slices.Clone(d)
				fs.Var((*List)(f), s.Name, s.Usage)
			}
		case Size:
			var f *int64
			if f, ok = p.(*int64); ok {
				*f = int64(d)
				fs.Var((*sizeValue)(f), s.Name, s.Usage)
			}
		default:
			panic(fmt.Sprintf("clidoc: flag --%s: default of unknown type %T", s.Name, s.Default))
		}
		if !ok {
			panic(fmt.Sprintf("clidoc: flag --%s: default %T, field %T", s.Name, s.Default, p))
		}
	}
	return fs
}

// Fill gives each field of t that settings bind and that is zero (or,
// for a number, negative) its setting's default, except where the setting
// keeps zero (ZeroKept).
func Fill[T any](settings []Setting[T], t *T) {
	for _, s := range settings {
		if s.ZeroKept {
			continue
		}
		switch f := s.Field(t).(type) {
		case *string:
			if *f == "" {
				*f = s.Default.(string)
			}
		case *int:
			if *f <= 0 {
				*f = s.Default.(int)
			}
		case *float64:
			if *f <= 0 {
				*f = s.Default.(float64)
			}
		case *time.Duration:
			if *f <= 0 {
				*f = s.Default.(time.Duration)
			}
		case *int64:
			if *f <= 0 {
				*f = int64(s.Default.(Size))
			}
		case *[]string:
			if *f == nil {
				*f = slices.Clone([]string(s.Default.(List)))
			}
		}
	}
}
