package mcpserver

import (
	"strings"
	"testing"

	"github.com/rootgate/rootgate/wire"
)

// TestResultNoEligibleApprover: an agent refused because it controls every
// approver is told not to retry and what the user should change.
func TestResultNoEligibleApprover(t *testing.T) {
	r := render(LocalHost, "/run/rootgate/rootgate.sock", [][]string{{"id"}},
		&wire.Response{ID: "x", Status: wire.StatusDenied, Code: wire.CodeNoEligibleApprover, Message: wire.NoEligibleApproverError(1000, "alice").Error()}, DefaultMaxText)
	if !strings.Contains(r.Next, "Do not retry") || !strings.Contains(r.Next, "Secure setup") {
		t.Fatalf("next: %q", r.Next)
	}
}

// TestResultNoEligibleApproverRunAs: an agent refused because the account
// it asked to run as controls every approver is told so, not to run
// under an account of its own (it may well do so already).
func TestResultNoEligibleApproverRunAs(t *testing.T) {
	r := render(LocalHost, "/run/rootgate/rootgate.sock", [][]string{{"id"}},
		&wire.Response{ID: "x", Status: wire.StatusDenied, Code: wire.CodeNoEligibleApprover, Message: wire.NoEligibleApproverRunAsError(1000, "alice").Error()}, DefaultMaxText)
	if !strings.Contains(r.Next, "Do not retry") || !strings.Contains(r.Next, "may approve rootgate requests") || strings.Contains(r.Next, "Secure setup") {
		t.Fatalf("next: %q", r.Next)
	}
}
