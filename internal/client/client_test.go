package client

import "testing"

// TestSocketChoice: a flag wins over the environment, which wins over the
// default, for the request and the approver socket alike.
func TestSocketChoice(t *testing.T) {
	for _, c := range []struct {
		name     string
		env, def string
		pick     func(string) string
	}{
		{"request", SocketEnv, DefaultSocket, Socket},
		{"approver", ApproverSocketEnv, DefaultApproverSocket, ApproverSocket},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(c.env, "")
			if got := c.pick(""); got != c.def {
				t.Errorf("no flag, no $%s: %q, want %q", c.env, got, c.def)
			}
			t.Setenv(c.env, "/tmp/env.sock")
			if got := c.pick(""); got != "/tmp/env.sock" {
				t.Errorf("$%s set: %q, want it", c.env, got)
			}
			if got := c.pick("/tmp/flag.sock"); got != "/tmp/flag.sock" {
				t.Errorf("flag and $%s set: %q, want the flag", c.env, got)
			}
		})
	}
}
