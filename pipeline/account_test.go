package pipeline

import (
	"errors"
	"os/user"
	"slices"
	"strings"
	"testing"
)

func TestLookupAccount(t *testing.T) {
	root, err := LookupAccount(0)
	if err != nil {
		t.Fatal(err)
	}
	if root.Name != "root" || root.UID != 0 || root.GID != 0 || root.Home != "/root" || !strings.HasPrefix(root.Shell, "/") {
		t.Errorf("LookupAccount(0) = %+v", root)
	}
	if !slices.Contains(root.Groups, 0) {
		t.Errorf("root's groups %v lack 0", root.Groups)
	}

	nobody, err := LookupAccount(65534)
	if err != nil {
		t.Fatal(err)
	}
	if nobody.Name != "nobody" || nobody.UID != 65534 || nobody.GID != 65534 || !slices.Contains(nobody.Groups, 65534) || nobody.Shell == "" {
		t.Errorf("LookupAccount(65534) = %+v", nobody)
	}

	_, err = LookupAccount(3999999)
	if !errors.As(err, new(user.UnknownUserIdError)) {
		t.Errorf("LookupAccount(unknown) error = %v, want UnknownUserIdError", err)
	}
}

func TestParseLoginShell(t *testing.T) {
	const passwd = `root:x:0:0:root:/root:/bin/bash
# a comment
alice:x:1000:1000::/home/alice:
bob:x:1001:1001::/home/bob:/usr/bin/zsh
bob:x:1002:1002::/home/bob2:/bin/fish
short:x:1003
`
	for _, tc := range []struct{ name, uid, want string }{
		{"root", "0", "/bin/bash"},
		{"alice", "1000", "/bin/sh"}, // empty field
		{"bob", "1002", "/bin/fish"}, // name and uid must both match
		{"carol", "1004", "/bin/sh"}, // not in the file
		{"short", "1003", "/bin/sh"}, // malformed line
	} {
		got, err := parseLoginShell(strings.NewReader(passwd), tc.name, tc.uid)
		if err != nil || got != tc.want {
			t.Errorf("shell of %s/%s = %q, %v; want %q", tc.name, tc.uid, got, err, tc.want)
		}
	}
}

func TestEnv(t *testing.T) {
	acct := Account{Name: "alice", UID: 1000, GID: 1000, Home: "/home/alice", Shell: "/bin/bash"}
	got := Env(acct, map[string]string{"TERM": "xterm", "LANG": "C.UTF-8", "A_B": "x=y", "HOME": "/elsewhere", "PATH": "/tmp", RunEnvKey: "x"})
	want := []string{
		"PATH=" + SearchPath,
		"HOME=/home/alice",
		"USER=alice",
		"LOGNAME=alice",
		"SHELL=/bin/bash",
		"A_B=x=y",
		"LANG=C.UTF-8",
		"TERM=xterm",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Env = %q,\nwant %q", got, want)
	}
	if got := Env(acct, nil); len(got) != 5 {
		t.Errorf("Env(nil extra) = %q", got)
	}
}
