package approval

import (
	"strings"
	"testing"
)

// TestRunsAnythingIssueNames: every program of issue 27 that runs what it
// reads, and the other names of listed programs, get the second
// confirmation: by the name written, and by the real file that runs when
// the name written is a harmless-looking link to it (an alternatives
// link, a multi-call binary).
func TestRunsAnythingIssueNames(t *testing.T) {
	for _, n := range []string{
		"sqlite3", "psql", "dc", "m4", "gnuplot", "ansible-playbook", "docker", "docker-compose", "hg", "terraform",
		"vim.basic", "vim.tiny", "rvim", "zsh5", "ksh93", "pypy3", "irb", "irb3.1", "toybox", "busybox",
		"python3.12", "perl5.36.0", "mysql", "podman", "tofu", "gmake", "nvim", "emacs-nox",
	} {
		t.Run(n, func(t *testing.T) {
			if why := RunsAnything(&Prompt{Stages: []Stage{{Argv: []string{n, "x"}, Path: "/usr/bin/" + n}}}); len(why) != 1 {
				t.Errorf("%s as written: RunsAnything = %q, want one reason", n, why)
			}
			// Known by what runs: a link named otherwise.
			st := Stage{Argv: []string{"/usr/local/bin/tool", "x"}, Path: "/usr/local/bin/tool", Target: "/usr/bin/" + n}
			if why := RunsAnything(&Prompt{Stages: []Stage{st}}); len(why) != 1 || !strings.Contains(why[0], n) {
				t.Errorf("tool -> %s: RunsAnything = %q, want one reason naming %s", n, why, n)
			}
		})
	}
	// vi through /etc/alternatives: the file that runs is vim.basic.
	st := Stage{Argv: []string{"editor"}, Path: "/usr/bin/editor", Target: "/usr/bin/vim.basic"}
	if why := RunsAnything(&Prompt{Stages: []Stage{st}}); len(why) != 1 {
		t.Errorf("editor -> vim.basic: %q", why)
	}
	// Not everything: programs that run nothing they read.
	for _, n := range []string{"ls", "cat", "systemctl", "journalctl", "id", "hostname", "pipewire", "grep"} {
		if why := RunsAnything(&Prompt{Stages: []Stage{{Argv: []string{n}, Path: "/usr/bin/" + n}}}); len(why) != 0 {
			t.Errorf("%s: RunsAnything = %q, want none", n, why)
		}
	}
}

// TestRunsAnythingAptLocalPaths: apt installs from any local file or
// directory it is given, running its maintainer scripts; a package name
// or a version is no path.
func TestRunsAnythingAptLocalPaths(t *testing.T) {
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"install", "./x.ddeb"}, 1},
		{[]string{"install", "x.ddeb"}, 1},
		{[]string{"install", "/tmp/x.changes"}, 1},
		{[]string{"install", "x.changes"}, 1},
		{[]string{"install", "x.udeb"}, 1},
		{[]string{"install", "./pkgdir/"}, 1},
		{[]string{"build-dep", "."}, 1},
		{[]string{"install", "/srv/repo"}, 1},
		{[]string{"install", "nginx"}, 0},
		{[]string{"install", "nginx=1.24.0-1"}, 0},
		{[]string{"install", "-y", "nginx/bookworm-backports"}, 1}, // a release, but apt reads it as a path first: asked twice
		{[]string{"update"}, 0},
	} {
		for _, prog := range []string{"apt", "apt-get"} {
			why := RunsAnything(&Prompt{Stages: []Stage{{Argv: append([]string{prog}, c.args...), Path: "/usr/bin/" + prog}}})
			if len(why) != c.want {
				t.Errorf("%s %v: RunsAnything = %q, want %d reason(s)", prog, c.args, why, c.want)
			}
		}
	}
}

// TestParseRunsAnything: the data file parses, and its format's errors
// are caught.
func TestParseRunsAnything(t *testing.T) {
	g, err := parseRunsAnything(runsAnythingText)
	if err != nil || len(g) < 4 {
		t.Fatalf("runsanything.txt: %d groups, %v", len(g), err)
	}
	for _, bad := range []string{"sh\n", "why:\nsh\n", "why: x\n", "why: x\n*\n", "why: x\n/bin/sh\n", "why: x\na*b\n"} {
		if _, err := parseRunsAnything(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// TestRunsAnythingByWhatItIs: a stage whose names are all harmless but
// whose file the daemon found to be a listed program (Stage.Is: a hard
// link to it, or a copy of it) runs anything, and the reason says what
// it is; so does a stage of runsWith with an option that runs a command
// (a copy of find). A #! script runs anything when one of its
// interpreters is listed, by the name on its #! line or by what that
// file is, and not otherwise. Listed says which names the daemon looks
// for, the issue's among them.
func TestRunsAnythingByWhatItIs(t *testing.T) {
	for _, c := range []struct {
		name string
		st   Stage
		want string // in the one reason; "" for none
	}{
		{"a copy of python", Stage{Argv: []string{"mytool", "-c", "x"}, Path: "/usr/local/bin/mytool", Is: "/usr/bin/python3.12"},
			"/usr/local/bin/mytool, the same program as /usr/bin/python3.12"},
		{"a copy of busybox", Stage{Argv: []string{"/opt/x/tool"}, Path: "/opt/x/tool", Is: "/usr/bin/busybox"}, "the same program as /usr/bin/busybox"},
		{"a copy of find with -exec", Stage{Argv: []string{"lister", "/", "-exec", "id", ";"}, Path: "/usr/local/bin/lister", Is: "/usr/bin/find"}, "find with an option"},
		{"a copy of find without", Stage{Argv: []string{"lister", "/var/log"}, Path: "/usr/local/bin/lister", Is: "/usr/bin/find"}, ""},
		{"a script of sh", Stage{Argv: []string{"backup"}, Path: "/usr/local/sbin/backup", Interpreters: []Interpreter{{Path: "/bin/sh"}}},
			"is a script run by /bin/sh, which"},
		{"a script of env python3", Stage{Argv: []string{"x"}, Path: "/usr/local/bin/x", Interpreters: []Interpreter{{Path: "/usr/bin/env"}}}, "is a script run by /usr/bin/env"},
		{"a script of a copy of python", Stage{Argv: []string{"x"}, Path: "/usr/local/bin/x", Interpreters: []Interpreter{{Path: "/usr/local/bin/mytool", Is: "/usr/bin/python3.12"}}},
			"is a script run by /usr/local/bin/mytool, the same program as /usr/bin/python3.12"},
		{"a script of find", Stage{Argv: []string{"x"}, Path: "/usr/local/bin/x", Interpreters: []Interpreter{{Path: "/usr/bin/find"}}}, "its options say"},
		{"a script of a harmless interpreter", Stage{Argv: []string{"x"}, Path: "/usr/local/bin/x", Interpreters: []Interpreter{{Path: "/usr/bin/cat"}}}, ""},
		{"a binary", Stage{Argv: []string{"id"}, Path: "/usr/bin/id"}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := RunsAnything(&Prompt{Stages: []Stage{c.st}})
			switch {
			case c.want == "" && len(why) != 0:
				t.Fatalf("RunsAnything = %q, want none", why)
			case c.want != "" && (len(why) != 1 || !strings.Contains(why[0], c.want)):
				t.Fatalf("RunsAnything = %q, want one reason with %q", why, c.want)
			}
		})
	}
	for _, n := range []string{
		"sqlite3", "psql", "dc", "m4", "gnuplot", "ansible-playbook", "docker", "docker-compose", "hg", "terraform",
		"vim.basic", "rvim", "zsh5", "ksh93", "pypy3", "irb", "toybox", "busybox", "python3.12", "find", "tar", "apt-get",
	} {
		if !Listed(n) {
			t.Errorf("Listed(%q) = false", n)
		}
	}
	for _, n := range []string{"ls", "id", "true", "systemctl", "pipewire", "cat", ".", ""} {
		if Listed(n) {
			t.Errorf("Listed(%q) = true", n)
		}
	}
}
