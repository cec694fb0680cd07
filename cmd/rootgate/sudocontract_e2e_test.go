package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/testutil"
	"github.com/rootgate/rootgate/internal/testutil/rgtest"
)

// TestSudoPasswordDropped: agents given a password pipe it to sudo -S.
// rootgate sudo -S reads that first line and throws it away: the
// command gets the rest of stdin, and the password is in none of the
// bytes sent to rootgated (read here off a socket of the test's own),
// nor in the audit log of a real daemon, which records the stdin that
// was sent.
func TestSudoPasswordDropped(t *testing.T) {
	t.Parallel()
	const password = "hunter2-rgpw"
	const input = password + "\nrest of stdin\n"
	// What goes on the wire.
	dir := testutil.ShortDir(t)
	sock := filepath.Join(dir, "fake")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sent := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			sent <- nil
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		sent <- line
	}()
	cmd := sudoCmd(t, &rgtest.Daemon{Sock: sock}, "-S", "cat")
	cmd.Stdin = strings.NewReader(input)
	_ = cmd.Run() // the fake daemon answers nothing
	line := <-sent
	var req struct {
		Stdin string `json:"stdin"`
	}
	if err := json.Unmarshal(line, &req); err != nil {
		t.Fatalf("request %q: %v", line, err)
	}
	if stdin, err := base64.StdEncoding.DecodeString(req.Stdin); err != nil || string(stdin) != "rest of stdin\n" {
		t.Errorf("request's stdin %q (%v), want the rest of stdin only", stdin, err)
	}
	if bytes.Contains(line, []byte(password)) {
		t.Errorf("the password is in the request: %s", line)
	}

	// Through a real daemon.
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: testutil.ShortDir(t)})
	cmd = sudoCmd(t, d, "-S", "cat")
	cmd.Stdin = strings.NewReader(input)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil || o.String() != "rest of stdin\n" {
		t.Fatalf("sudo -S cat: %v, stdout %q, stderr %q", err, o.String(), e.String())
	}
	log, err := os.ReadFile(rgtest.AuditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(log, []byte(password)) {
		t.Errorf("the password is in the audit log")
	}
	files, err := audit.Files(rgtest.AuditPath(d.Dir))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("rest of stdin\n"))
	found := false
	_ = audit.ReadAll(files, func(r audit.Read) error {
		if r.Err == nil && r.Record.Kind == audit.KindReceived && r.Record.Request != nil {
			q := r.Record.Request
			found = q.StdinBytes == len("rest of stdin\n") && q.StdinSHA256 == hex.EncodeToString(sum[:])
		}
		return nil
	})
	if !found {
		t.Errorf("the audit log records no request with the rest of stdin as its stdin")
	}
}

// TestSudoEnvFromDaemon: SUDO_USER and its kin are the daemon's word on
// who asked. A request that sends them itself is refused (no such key
// passes the env allowlist), and a NAME=value word of rootgate sudo's
// with one is an error; the run's values are those of the peer.
func TestSudoEnvFromDaemon(t *testing.T) {
	t.Parallel()
	d := rgtest.StartDaemon(t, rgtest.Opts{Dir: testutil.ShortDir(t)})
	bin := rgtest.Rootgate(t)
	for _, key := range []string{"SUDO_USER", "SUDO_UID", "SUDO_GID", "SUDO_HOME", "SUDO_COMMAND"} {
		line := `{"id":"` + strings.Repeat("a", 32) + `","version":"test","pipeline":[["printenv","` + key + `"]],"privileged":true,"env":{"` + key + `":"evil"},"time":"` + nowRFC3339() + `"}` + "\n"
		cmd := exec.Command(bin, "send", "--socket", d.Sock)
		cmd.Stdin = strings.NewReader(line)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("send: %v", err)
		}
		if !bytes.Contains(out, []byte(`"code":"env_not_allowed"`)) || bytes.Contains(out, []byte("evil")) {
			t.Errorf("a request sending %s: %s", key, out)
		}
		cmd = sudoCmd(t, d, key+"=evil", "printenv", key)
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Run(); err == nil || o.Len() != 0 || !strings.Contains(e.String(), key+" may not be set") {
			t.Errorf("sudo %s=evil printenv %s: %v, stdout %q, stderr %q", key, key, err, o.String(), e.String())
		}
	}
	cmd := sudoCmd(t, d, "printenv", "SUDO_USER", "SUDO_UID", "SUDO_GID", "SUDO_HOME", "SUDO_COMMAND")
	out, err := cmd.Output()
	if want := "root\n0\n0\n/root\n/usr/bin/printenv SUDO_USER SUDO_UID SUDO_GID SUDO_HOME SUDO_COMMAND\n"; err != nil || string(out) != want {
		t.Errorf("sudo printenv SUDO_*: %v, %q, want %q", err, out, want)
	}
}

func nowRFC3339() string { return time.Now().UTC().Format(time.RFC3339) }
