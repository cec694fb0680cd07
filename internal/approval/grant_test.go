package approval

import (
	"strings"
	"testing"
	"time"
)

// TestRunsAnything: a stage that runs whatever its arguments say is found
// by the name it was written as, by the resolved path or by the file that
// runs (sh -> dash), in any stage; find, tar and the others of runsWith
// only with an option that runs a command.
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
		// Code the directory holds, or commands read from input.
		{"git status", []Stage{{Argv: []string{"git", "status"}, Path: "/usr/bin/git"}}, 1},
		{"npm install", []Stage{{Argv: []string{"npm", "install"}, Path: "/usr/bin/npm"}}, 1},
		{"pip3", []Stage{{Argv: []string{"pip3", "install", "."}, Path: "/usr/bin/pip3"}}, 1},
		{"crontab", []Stage{{Argv: []string{"crontab", "-"}, Path: "/usr/bin/crontab"}}, 1},
		// Options that run a command: a short one alone, with its value
		// attached or among others, a long one with "=value"; none after
		// "--", and none in other programs.
		{"tar -xf", []Stage{{Argv: []string{"tar", "-xzf", "a.tar.gz"}, Path: "/usr/bin/tar"}}, 0},
		{"tar -I", []Stage{{Argv: []string{"tar", "-I", "sh", "-xf", "a"}, Path: "/usr/bin/tar"}}, 1},
		{"tar -xIsh", []Stage{{Argv: []string{"tar", "-xIsh", "-f", "a"}, Path: "/usr/bin/tar"}}, 1},
		{"tar --to-command=", []Stage{{Argv: []string{"tar", "-xf", "a", "--to-command=sh"}, Path: "/usr/bin/tar"}}, 1},
		{"tar --to-com=", []Stage{{Argv: []string{"tar", "-xf", "a", "--to-com=sh"}, Path: "/usr/bin/tar"}}, 1},
		{"tar --use-comp", []Stage{{Argv: []string{"tar", "--use-comp", "sh", "-xf", "a"}, Path: "/usr/bin/tar"}}, 1},
		{"tar --verbose", []Stage{{Argv: []string{"tar", "--verbose", "--extract", "--file=a"}, Path: "/usr/bin/tar"}}, 0},
		// "--" as an option's value: options go on after it.
		{"tar -f -- --to-command", []Stage{{Argv: []string{"tar", "-x", "-f", "--", "--to-command=sh"}, Path: "/usr/bin/tar"}}, 1},
		{"tar xIf", []Stage{{Argv: []string{"tar", "xIf", "evil.sh", "a.tar"}, Path: "/usr/bin/tar"}}, 1},
		{"tar xf", []Stage{{Argv: []string{"tar", "xf", "a.tar"}, Path: "/usr/bin/tar"}}, 0},
		{"dpkg --pre-invoke", []Stage{{Argv: []string{"dpkg", "--pre-invoke=sh", "-r", "x"}, Path: "/usr/bin/dpkg"}}, 1},
		{"man -C", []Stage{{Argv: []string{"man", "-C", "/tmp/man.conf", "ls"}, Path: "/usr/bin/man"}}, 1},
		{"apt install ./x.deb", []Stage{{Argv: []string{"apt", "install", "./x.deb"}, Path: "/usr/bin/apt"}}, 1},
		{"ip addr", []Stage{{Argv: []string{"ip", "addr"}, Path: "/usr/sbin/ip"}}, 0},
		{"ip netns exec", []Stage{{Argv: []string{"ip", "netns", "exec", "x", "sh"}, Path: "/usr/sbin/ip"}}, 1},
		{"sftp", []Stage{{Argv: []string{"sftp", "host"}, Path: "/usr/bin/sftp"}}, 1},
		{"setarch", []Stage{{Argv: []string{"setarch", "x86_64", "sh"}, Path: "/usr/bin/setarch"}}, 1},
		{"pipewire is no pip", []Stage{{Argv: []string{"pipewire"}, Path: "/usr/bin/pipewire"}}, 0},
		{"rsync -av", []Stage{{Argv: []string{"rsync", "-av", "a", "b"}, Path: "/usr/bin/rsync"}}, 0},
		{"rsync -e", []Stage{{Argv: []string{"rsync", "-e", "sh -c id", "a", "b:"}, Path: "/usr/bin/rsync"}}, 1},
		{"apt-get install", []Stage{{Argv: []string{"apt-get", "install", "-y", "nginx"}, Path: "/usr/bin/apt-get"}}, 0},
		{"apt-get -o", []Stage{{Argv: []string{"apt-get", "-o", "APT::Update::Pre-Invoke::=id", "update"}, Path: "/usr/bin/apt-get"}}, 1},
		{"dpkg -l", []Stage{{Argv: []string{"dpkg", "-l"}, Path: "/usr/bin/dpkg"}}, 0},
		{"dpkg -i", []Stage{{Argv: []string{"dpkg", "-i", "x.deb"}, Path: "/usr/bin/dpkg"}}, 1},
		{"scp -o", []Stage{{Argv: []string{"scp", "-oProxyCommand=id", "a", "b:"}, Path: "/usr/bin/scp"}}, 1},
		{"find -exec as a name", []Stage{{Argv: []string{"find", "/", "-name", "-exec;"}, Path: "/usr/bin/find"}}, 0},
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
