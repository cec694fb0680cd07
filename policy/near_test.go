package policy

import (
	"fmt"
	"testing"
)

func TestNearMisses(t *testing.T) {
	p := mustParse(t, `deny   any            rm ...
allow  privileged     systemctl status {nginx|php-fpm}
allow  privileged,env=LANG   apt-get update
allow  privileged,user=alice journalctl -u nginx
allow  unprivileged   ls -l /srv
`)
	for _, c := range []struct {
		name       string
		privileged bool
		user       string
		argv       []string
		env        map[string]string
		want       string // the rule's line and why, or "" for none
	}{
		{"one argument", true, "bob", []string{"systemctl", "status", "apache2"}, nil, `2: argument 2 "apache2" is not one of {nginx|php-fpm}`},
		{"env not admitted", true, "bob", []string{"apt-get", "update"}, map[string]string{"LANG": "C", "TZ": "UTC"}, "3: the env: the rule does not admit TZ"},
		{"allowed", true, "bob", []string{"systemctl", "status", "nginx"}, nil, ""},
		{"denied", true, "bob", []string{"rm", "-rf", "/"}, nil, ""},
		{"two arguments", true, "bob", []string{"systemctl", "restart", "apache2"}, nil, ""},
		{"argument and env", true, "bob", []string{"systemctl", "status", "apache2"}, map[string]string{"LANG": "C"}, ""},
		{"more arguments", true, "bob", []string{"systemctl", "status", "nginx", "-H", "x"}, nil, ""},
		{"another command", true, "bob", []string{"service", "status", "nginx"}, nil, ""},
		{"another scope", false, "bob", []string{"systemctl", "status", "apache2"}, nil, ""},
		{"another user", true, "bob", []string{"journalctl", "-u", "sshd"}, nil, ""},
		{"its user", true, "alice", []string{"journalctl", "-u", "sshd"}, nil, `4: argument 2 "sshd" does not match "nginx"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			nm := p.NearMisses(Subject{Privileged: c.privileged, User: c.user, Stages: [][]string{c.argv}, Env: c.env})
			got := ""
			if len(nm) > 0 {
				got = fmt.Sprintf("%d: %s", nm[0].Rule.Line, nm[0].Why)
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
