package policy

import (
	"slices"
	"testing"
)

// TestConcerns: a rule concerns a requester's privileged requests when its
// scope admits them and its user= qualifier, if any, names the requester;
// a rule for another user, or for unprivileged requests only, does not.
func TestConcerns(t *testing.T) {
	p := mustParse(t, `allow privileged id
deny any rm ...
allow unprivileged ls ...
allow privileged,user=alice apt-get update
allow any,user=a* systemctl status {unit}
ask privileged,session=ci make install
`)
	for _, c := range []struct {
		user       string
		privileged bool
		want       []int // lines
	}{
		{"alice", true, []int{1, 2, 4, 5, 6}},
		{"bob", true, []int{1, 2, 6}},
		{"bob", false, []int{2, 3}},
		{"anna", false, []int{2, 3, 5}},
	} {
		var got []int
		for i := range p.Rules {
			if r := &p.Rules[i]; r.Concerns(c.user, c.privileged) {
				got = append(got, r.Line)
			}
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("rules concerning %s (privileged %v): lines %v, want %v", c.user, c.privileged, got, c.want)
		}
	}
	var hand Rule // built outside Parse: no scope, concerns no one
	if hand.Concerns("alice", true) {
		t.Errorf("a rule without scope concerns alice")
	}
}
