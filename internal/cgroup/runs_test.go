package cgroup

import (
	"strings"
	"testing"
)

// TestCgroupName: any request id makes one directory name, never "." or
// "..", with no '/', that reads back as the id (with or without the "~N"
// of a second run of the same id).
func TestCgroupName(t *testing.T) {
	for id, want := range map[string]string{
		"550e8400-e29b-41d4-a716-446655440000": "550e8400-e29b-41d4-a716-446655440000",
		"a/b":                                  "a%2Fb",
		".":                                    "%2E",
		"..":                                   "%2E.",
		"cpu.stat":                             "cpu.stat",
		"x~2":                                  "x%7E2",
		"été 100%":                             "%C3%A9t%C3%A9%20100%25",
	} {
		got := RunName(id)
		if got != want {
			t.Errorf("RunName(%q) = %q, want %q", id, got, want)
		}
		if strings.Contains(got, "/") || got == "." || got == ".." {
			t.Errorf("RunName(%q) = %q: not a directory name", id, got)
		}
		for _, name := range []string{got, got + "~2"} {
			if back := RunID(name); back != id {
				t.Errorf("RunID(%q) = %q, want %q", name, back, id)
			}
		}
	}
}

func TestCgroupNameLong(t *testing.T) {
	// The longest id, each of its characters four bytes escaped: still a
	// directory name, read back as the id's start.
	id := strings.Repeat("\U0001F600", 128)
	name := RunName(id)
	if len(name) > maxRunName || len(name) < maxRunName-12 {
		t.Fatalf("%d bytes", len(name))
	}
	if back := RunID(name); !strings.HasPrefix(id, back) || back == "" {
		t.Errorf("RunID = %q", back)
	}
}
