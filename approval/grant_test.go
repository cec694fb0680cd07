package approval

import (
	"strings"
	"testing"
	"time"
)

// TestRunsAnything: a stage that runs whatever its arguments say is found
// by the name it was written as, by the resolved path or by the file that
// runs (sh -> dash), in any stage; find only with an action that runs a
// command.
func TestRunsAnything(t *testing.T) {
	for _, c := range []struct {
		name   string
		stages []Stage
		want   int
	}{
		{"plain command", []Stage{{Argv: []string{"systemctl", "status", "nginx"}, Path: "/usr/bin/systemctl"}}, 0},
		{"sh", []Stage{{Argv: []string{"sh", "-c", "id"}, Path: "/usr/bin/sh", Target: "/usr/bin/dash"}}, 1},
		{"a link to dash under another name", []Stage{{Argv: []string{"/opt/x/run"}, Path: "/opt/x/run", Target: "/usr/bin/dash"}}, 1},
		{"python3.12", []Stage{{Argv: []string{"python3.12"}, Path: "/usr/bin/python3.12"}}, 1},
		{"env in a later stage", []Stage{{Argv: []string{"echo", "x"}, Path: "/usr/bin/echo"}, {Argv: []string{"env", "sh"}, Path: "/usr/bin/env"}}, 1},
		{"xargs", []Stage{{Argv: []string{"xargs", "rm"}, Path: "/usr/bin/xargs"}}, 1},
		{"sudo", []Stage{{Argv: []string{"sudo", "-u", "x", "id"}, Path: "/usr/bin/sudo"}}, 1},
		{"find -name", []Stage{{Argv: []string{"find", "/var/log", "-name", "*.gz"}, Path: "/usr/bin/find"}}, 0},
		{"find -exec", []Stage{{Argv: []string{"find", "/", "-exec", "id", ";"}, Path: "/usr/bin/find"}}, 1},
		{"find -okdir", []Stage{{Argv: []string{"find", "/", "-okdir", "id", ";"}, Path: "/usr/bin/find"}}, 1},
		{"awk", []Stage{{Argv: []string{"awk", "{print}"}, Path: "/usr/bin/awk", Target: "/usr/bin/mawk"}}, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			why := RunsAnything(&Prompt{Stages: c.stages})
			if len(why) != c.want {
				t.Fatalf("RunsAnything = %q, want %d reason(s)", why, c.want)
			}
		})
	}
}

// TestRenderGrant: the grant is described whole, with its end.
func TestRenderGrant(t *testing.T) {
	p := &Prompt{Requester: Requester{UID: 1001, User: "agent"}, Privileged: true, RunAs: "root", Cwd: "/srv",
		Env: map[string]string{"LANG": "C"}, Stdin: []byte("abc"),
		Stages: []Stage{{Argv: []string{"systemctl", "restart", "nginx"}, Path: "/usr/bin/systemctl"}}}
	now := time.Date(2026, 2, 13, 14, 30, 0, 0, time.UTC)
	got := RenderGrant(p, time.Hour+30*time.Minute, now)
	for _, want := range []string{
		"STANDING GRANT for 1 h 30 min\n",
		"until 16:00:00 UTC, Fri 13 Feb (1 h 30 min from now)",
		"Requester:   uid 1001 (agent)",
		"Directory:   /srv (the same directory)",
		"Environment: LANG=C\n",
		"Stdin:       3 bytes, the same bytes as this request\n",
		"[1] systemctl restart nginx\n",
		"executable: /usr/bin/systemctl, the same file",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("RenderGrant lacks %q:\n%s", want, got)
		}
	}
}
