package clidoc

import "strings"

// List is a repeatable string flag: each use adds one value. Use it with
// [flag.FlagSet.Var].
type List []string

// String joins the values with commas.
func (l *List) String() string { return strings.Join(*l, ",") }

// Set adds v.
func (l *List) Set(v string) error { *l = append(*l, v); return nil }
