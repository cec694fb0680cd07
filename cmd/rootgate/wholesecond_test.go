package main

import (
	"bufio"
	"encoding/json"
	"net"
	"regexp"
	"testing"

	"github.com/rootgate/rootgate/internal/testutil"
)

// TestRunSendsWholeSecondTime captures the request line the real
// `rootgate run` writes: its time is in whole seconds with Z, the only
// form the protocol's reference daemon accepts.
func TestRunSendsWholeSecondTime(t *testing.T) {
	sock := testutil.ShortDir(t) + "/s"
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lines := make(chan []byte, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		line, _ := bufio.NewReader(c).ReadBytes('\n')
		lines <- line
		var req struct{ ID string }
		_ = json.Unmarshal(line, &req)
		c.Write([]byte(`{"id":"` + req.ID + `","status":"ok","stages":[{"exit_code":0,"stderr":""}],"stdout":"","version":"test"}` + "\n"))
	}()
	out, err := rootgateCmd(t, []string{"PATH=/usr/bin:/bin"}, "run", "--socket", sock, "--reason", "time form", "--", "true").CombinedOutput()
	if err != nil {
		t.Fatalf("rootgate run: %v\n%s", err, out)
	}
	line := <-lines
	var req struct{ Time string }
	if err := json.Unmarshal(line, &req); err != nil {
		t.Fatalf("request line %q: %v", line, err)
	}
	if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`).MatchString(req.Time) {
		t.Errorf("time %q is not whole seconds with Z; line %s", req.Time, line)
	}
}
