// Package version tells which rootgate this is.
package version

import "runtime/debug"

// override is set at link time by release builds
// (-ldflags "-X github.com/rootgate/rootgate/internal/version.override=1.2.3").
var override string

// String returns the version: the link-time value, else the module version
// Go stamped into the binary, else "dev".
func String() string {
	if override != "" {
		return override
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
