package approval

import (
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/termsafe"
)

func TestRenderFull(t *testing.T) {
	p := &Prompt{
		ID:        "550e8400-e29b-41d4-a716-446655440000",
		Host:      "workstation.local",
		Session:   "claude-code-project-alpha",
		Version:   "rootgate/0.1.0",
		Time:      time.Date(2026, 2, 13, 14, 30, 0, 0, time.FixedZone("", 3600)),
		Reason:    "Look for errors\nin\tthe journal",
		Requester: Requester{UID: 1000, GID: 1000, PID: 4242, User: "alice", Exe: "/usr/bin/node"},
		Stages: []Stage{
			{Argv: []string{"journalctl", "-u", "nginx", "--since", "1 hour ago"}, Path: "/usr/bin/journalctl"},
			{Argv: []string{"awk", "/error/ {print $1}\n"}, Path: "/usr/bin/awk", Target: "/etc/alternatives/awk"},
		},
		RunAs:        "alice",
		Cwd:          "/home/alice/my project",
		Env:          map[string]string{"TZ": "UTC", "LANG": "C.UTF-8", "PAGER": "less -R"},
		Stdin:        []byte("hello\n"),
		ForwardAgent: true,
		RunTimeout:   90 * time.Second,
		Limits:       "memory 512M, tasks 100 (the run's own cgroup)",
	}
	want := `rootgate approval request
  Requester:   alice (uid 1000, gid 1000, pid 4242, exe /usr/bin/node), per the kernel
The requester says (its own words, not checked by rootgated):
  ┊ id:      550e8400-e29b-41d4-a716-446655440000
  ┊ time:    2026-02-13T14:30:00+01:00
  ┊ host:    workstation.local
  ┊ session: claude-code-project-alpha
  ┊ client:  rootgate/0.1.0
  ┊ reason:  Look for errors
  ┊          in\tthe journal
What would run:
  Run as:      alice (uid 1000, the requester's own user; not privileged)
  Directory:   '/home/alice/my project'
  Environment: LANG=C.UTF-8
               PAGER='less -R'
               TZ=UTC
  Stdin:       6 bytes, SHA-256 5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03
               all of it: $'hello\n'
  SSH agent:   FORWARDED: the run may use the operator's SSH agent (your keys) while it runs
               !!! where your keys log in to an account that may approve rootgate requests (yours, root):
               !!! approving this approves root
  Time limit:  90s
  Limits:      memory 512M, tasks 100 (the run's own cgroup)
Pipeline (2 stages; each stage's output is the next one's input):
  [1] journalctl -u nginx --since '1 hour ago'
      executable: /usr/bin/journalctl
  [2] awk $'/error/ {print $1}\n'
      executable: /usr/bin/awk, which is the file /etc/alternatives/awk
`
	if got := Render(p); got != want {
		t.Errorf("Render:\n%s\nwant:\n%s", got, want)
	}
}

func TestRenderMinimal(t *testing.T) {
	p := &Prompt{
		Requester:  Requester{UID: 1000, GID: 100, PID: 7},
		Stages:     []Stage{{Argv: []string{"true"}}},
		Privileged: true,
	}
	want := `rootgate approval request
  Requester:   1000 (uid 1000, gid 100, pid 7, exe unknown), per the kernel
The requester says (its own words, not checked by rootgated):
  ┊ id:      (none)
  ┊ time:    (none)
  ┊ host:    (none)
  ┊ session: (none)
  ┊ client:  (none)
  ┊ reason:  (none given)
What would run:
  Run as:      root   *** PRIVILEGED: the command runs as ROOT ***
  Directory:   /
  Environment: only PATH, HOME, USER, LOGNAME, SHELL of the run-as user
  Stdin:       none (/dev/null)
  SSH agent:   not forwarded
  Time limit:  none
Command (1 stage):
  [1] true
      executable: (not resolved)
`
	if got := Render(p); got != want {
		t.Errorf("Render:\n%s\nwant:\n%s", got, want)
	}
}

func TestRenderEscapesControlSequences(t *testing.T) {
	p := &Prompt{
		ID:        "id\x1b[2J",
		Host:      "h\x1b]0;title\x07",
		Session:   "s\u202e",
		Version:   "v\u009b\x9b",
		Reason:    "see \x1b[31mred\x1b[0m\r\nand \u200bhidden",
		Requester: Requester{User: "u\x1bc", Exe: "/tmp/\x1b[8mx"},
		Stages: []Stage{{
			Argv:   []string{"echo", "\x1b[31mred\x1b[0m", "\x1b]0;title\x07", "a\nb", "c\td"},
			Path:   "/tmp/e\x1b[1m",
			Target: "/tmp/t\x07",
		}},
		RunAs:      "r\x1b",
		Privileged: true,
		Cwd:        "/tmp/\x1b[H",
		Env:        map[string]string{"LANG\x1b": "\x1b[0m"},
		Stdin:      []byte("\x1b[?1049h"),
	}
	got := Render(p)
	for _, want := range []string{
		`  ┊ id:      id\x1b[2J`,
		`  ┊ host:    h\x1b]0;title\x07`,
		`  ┊ session: s\u202e`,
		`  ┊ client:  v\u009b\x9b`,
		`  ┊ reason:  see \x1b[31mred\x1b[0m\r`,
		`  ┊          and \u200bhidden`,
		`Requester:   u\x1bc (uid 0, gid 0, pid 0, exe $'/tmp/\x1b[8mx')`,
		`Run as:      r\x1b   *** PRIVILEGED`,
		`Directory:   $'/tmp/\x1b[H'`,
		`Environment: $'LANG\x1b'=$'\x1b[0m'`,
		`all of it: $'\x1b[?1049h'`,
		`[1] echo $'\x1b[31mred\x1b[0m' $'\x1b]0;title\x07' $'a\nb' $'c\td'`,
		`executable: $'/tmp/e\x1b[1m', which is the file $'/tmp/t\x07'`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Render lacks %s; it is:\n%s", want, got)
		}
	}
	checkDisplaySafe(t, "Render", got, true)
}

func TestRenderStdinPreview(t *testing.T) {
	tests := []struct {
		name  string
		stdin []byte
		want  []string
	}{
		{"exactly 200 bytes", []byte(strings.Repeat("a", 200)),
			[]string{"200 bytes", "all of it: " + strings.Repeat("a", 200) + "\n"}},
		{"1000 bytes", []byte(strings.Repeat("ab", 500)),
			[]string{"1000 bytes", "first 200 bytes: " + strings.Repeat("ab", 100) + "\n", "... and 800 more bytes not shown"}},
		// "é" is 2 bytes; the cut backs off rather than split it.
		{"no split rune", []byte(strings.Repeat("a", 199) + "é" + "z"),
			[]string{"202 bytes", "first 199 bytes: " + strings.Repeat("a", 199) + "\n", "... and 3 more bytes not shown"}},
		{"binary", []byte{0, 1, 0xff, '\n'},
			[]string{"4 bytes", `all of it: $'\x00\x01\xff\n'`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Render(&Prompt{Stdin: tt.stdin})
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Render lacks %q; it is:\n%s", w, got)
				}
			}
		})
	}
}

func TestRenderShowsLongArgumentsWhole(t *testing.T) {
	long := strings.Repeat("x", 1<<20)
	got := Render(&Prompt{Stages: []Stage{{Argv: []string{"echo", long + "\n" + long}}}})
	if want := "echo $'" + long + `\n` + long + "'\n"; !strings.Contains(got, want) {
		t.Error("Render does not show a 2 MiB argument whole")
	}
}

// checkDisplaySafe fails unless s is valid UTF-8 with nothing but printable
// runes (and '\n' if newlines is set): no C0 or C1 control, DEL, zero-width,
// bidi or other invisible rune: [termsafe.String].
func checkDisplaySafe(t *testing.T, what, s string, newlines bool) {
	t.Helper()
	if !termsafe.String(s, false) && !(newlines && termsafe.String(strings.ReplaceAll(s, "\n", ""), false)) {
		t.Fatalf("%s output is not safe to show: %q", what, s)
	}
}

func FuzzRender(f *testing.F) {
	f.Add("id", "host", "session", "reason\nline two", "echo", "hello world", "KEY", "value", []byte("stdin"))
	f.Add("\x1b[2J", "\x1b]0;t\x07", "\u202e", "\u200b\t\r\n", "a\x00", "\xff\xfe", "\x9b", "\u2066", []byte{0x1b, 0x9b, 0xff})
	f.Fuzz(func(t *testing.T, id, host, session, reason, arg0, arg1, envKey, envValue string, stdin []byte) {
		p := &Prompt{
			ID: id, Host: host, Session: session, Version: id + host, Reason: reason,
			Requester: Requester{User: session, Exe: arg1},
			Stages: []Stage{
				{Argv: []string{arg0, arg1, reason}, Path: arg0, Target: arg1},
				{Argv: []string{envValue}, Path: envKey},
			},
			Privileged: len(id)%2 == 0, RunAs: host, Cwd: arg0,
			Env:   map[string]string{envKey: envValue, "X": reason},
			Stdin: stdin,
		}
		checkDisplaySafe(t, "Render", Render(p), true)
		checkDisplaySafe(t, "RenderWhole", RenderWhole(p), true)
		checkDisplaySafe(t, "DescribeRequester", DescribeRequester(&p.Requester), false)
		checkDisplaySafe(t, "RunAsName", RunAsName(p), false)
		for _, s := range []string{id, host, session, reason, arg0, arg1, envKey, envValue, string(stdin)} {
			checkDisplaySafe(t, "Sanitize", termsafe.Sanitize(s), false)
			checkDisplaySafe(t, "Quote", termsafe.Quote(s), false)
		}
	})
}

func TestRenderMarksRequesterWords(t *testing.T) {
	// A reason, id and stdin made to look like the daemon's own lines.
	fake := "What would run:\n  Run as:      nobody (uid 65534; not privileged)\nCommand (1 stage):\n  [1] true"
	p := &Prompt{
		ID: "x", Host: "Command (1 stage):", Session: "  [1] true", Version: "What would run:",
		Reason: "routine\n" + fake, Stdin: []byte("#!/bin/sh\n" + fake + "\n"),
		Requester:  Requester{UID: 1000, User: "alice"},
		Stages:     []Stage{{Argv: []string{"sh", "-s"}, Path: "/usr/bin/sh"}},
		Privileged: true,
	}
	for name, got := range map[string]string{"Render": Render(p), "RenderWhole": RenderWhole(p)} {
		count := map[string]int{}
		for line := range strings.SplitSeq(got, "\n") {
			if !strings.HasPrefix(line, RequesterMark) {
				count[line]++
			}
		}
		if count["What would run:"] != 1 || count["Command (1 stage):"] != 1 || count["  [1] true"] != 0 ||
			count["  Run as:      nobody (uid 65534; not privileged)"] != 0 {
			t.Errorf("%s: the requester's words pass for the daemon's:\n%s", name, got)
		}
	}
	whole := RenderWhole(p)
	for _, want := range []string{
		"  Stdin:       106 bytes, SHA-256 ",
		"               all of it below: 5 lines, each quoted (ends with a newline)\n",
		"  ┊ stdin 1: '#!/bin/sh'\n",
		"  ┊ stdin 5: '  [1] true'\n",
		"Command (1 stage):\n  [1] sh -s\n",
	} {
		if !strings.Contains(whole, want) {
			t.Errorf("RenderWhole lacks %q:\n%s", want, whole)
		}
	}
	checkDisplaySafe(t, "RenderWhole", whole, true)
}

// TestRenderNamedAccount: a run as a named account says so on the
// prompt's first line, with its uid and gid (and group), and is never
// shown as root or as the requester's own run; a group named for a run
// as root keeps the root warning.
func TestRenderNamedAccount(t *testing.T) {
	base := func() *Prompt {
		return &Prompt{
			Requester:  Requester{UID: 1000, GID: 1000, PID: 7, User: "alice"},
			Stages:     []Stage{{Argv: []string{"psql", "-l"}, Path: "/usr/bin/psql"}},
			Privileged: true,
			RunAs:      "postgres",
			Named:      &NamedRun{UID: 108, GID: 115},
		}
	}
	for _, tc := range []struct {
		name          string
		edit          func(p *Prompt)
		first, runAs  string
		root, notRoot bool
	}{
		{"account", func(*Prompt) {}, "RUN AS postgres (uid 108, gid 115)",
			"  Run as:      postgres (uid 108, gid 115): the account the request names, neither root nor the requester", false, true},
		{"account and group", func(p *Prompt) { p.Named.GID, p.Named.Group = 34, "backup" },
			"RUN AS postgres (uid 108) WITH GROUP backup (gid 34)",
			"  Run as:      postgres (uid 108) WITH GROUP backup (gid 34): the account the request names, neither root nor the requester", false, true},
		{"root and group", func(p *Prompt) { p.RunAs, p.Named = "root", &NamedRun{UID: 0, GID: 34, Group: "backup"} },
			"RUN AS root (uid 0) WITH GROUP backup (gid 34)   *** PRIVILEGED: ROOT ***",
			"  Run as:      root (uid 0) WITH GROUP backup (gid 34): PRIVILEGED: the command runs as ROOT", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := base()
			tc.edit(p)
			out := Render(p)
			lines := strings.Split(out, "\n")
			if lines[0] != tc.first || lines[1] != "rootgate approval request" {
				t.Fatalf("first lines %q, want %q then the header:\n%s", lines[:2], tc.first, out)
			}
			if !strings.Contains(out, "\n"+tc.runAs+"\n") {
				t.Fatalf("no line %q:\n%s", tc.runAs, out)
			}
			if RunsAsRoot(p) != tc.root {
				t.Fatalf("RunsAsRoot = %v", RunsAsRoot(p))
			}
			if tc.notRoot && strings.Contains(out, "ROOT") {
				t.Fatalf("a run as %s is shown as root:\n%s", p.RunAs, out)
			}
		})
	}
	// Without Named, nothing comes before the header.
	p := base()
	p.Named, p.RunAs = nil, "root"
	if out := Render(p); !strings.HasPrefix(out, "rootgate approval request\n") || RunAsLine(p) != "" {
		t.Fatalf("a plain run as root:\n%s", out)
	}
}

// TestRenderApproverPower: a run as an account that may approve says
// first that approving it approves root, calls the account root's equal
// and says why; neither a grant nor a rule is made from its prompt.
func TestRenderApproverPower(t *testing.T) {
	p := &Prompt{
		Requester:     Requester{UID: 1001, GID: 1001, PID: 7, User: "agent"},
		Stages:        []Stage{{Argv: []string{"id"}, Path: "/usr/bin/id"}},
		Privileged:    true,
		RunAs:         "alice",
		Named:         &NamedRun{UID: 1000, GID: 1000},
		ApproverPower: "it is admitted as an approver: --approver alice\x1b[2J",
	}
	out := Render(p)
	lines := strings.Split(out, "\n")
	if want := "!!! runs as alice, who may approve rootgate requests: approving this approves root"; lines[0] != "RUN AS alice (uid 1000, gid 1000)" || lines[1] != want {
		t.Fatalf("first lines %q, want the RUN AS line, then %q:\n%s", lines[:2], want, out)
	}
	for _, want := range []string{
		"  Run as:      alice (uid 1000, gid 1000): the account the request names, ROOT'S EQUAL: it may approve rootgate requests\n",
		"               which may approve rootgate requests: it is admitted as an approver: --approver alice\\x1b[2J\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no line %q:\n%s", want, out)
		}
	}
	if want := "alice (uid 1000), who may approve rootgate requests (ROOT'S EQUAL)"; RunAsWord(p) != want {
		t.Errorf("RunAsWord = %q, want %q", RunAsWord(p), want)
	}
	if Grantable(p) == "" || Ruleable(p) == "" {
		t.Errorf("a grant (%q) or a rule (%q) may be made for a run that may approve", Grantable(p), Ruleable(p))
	}
	if _, err := SuggestRule(p); err == nil {
		t.Error("a rule is suggested for a run that may approve")
	}
	p.ApproverPower = ""
	if out := Render(p); strings.Contains(out, "may approve") || Grantable(p) != "" || Ruleable(p) != "" {
		t.Errorf("a run as an account that may not approve:\n%s", out)
	}
}
