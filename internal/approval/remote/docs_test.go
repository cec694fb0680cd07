package remote

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// TestDocsQuoteApproverErrors holds the approver protocol's part of
// docs/protocol.md to the code: every error message the daemon sends an
// approver appears there, as the code writes it.
func TestDocsQuoteApproverErrors(t *testing.T) {
	b, err := os.ReadFile("../../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, doc, ok := strings.Cut(string(b), "# Approver protocol")
	if !ok {
		t.Fatal("docs/protocol.md has no approver protocol")
	}
	for _, m := range []string{
		ApproverPeerCredentials, ApproverHelloName, ApproverHelloAgent, ApproverNoVerdict,
		ApproverNotAdmitted(65534, "nobody"),
		ApproverControllers(errors.New("…")),
		ApproverInRun("…"),
		ApproverNoHello(errors.New("…")),
		ApproverNotHello("decision"),
		ApproverVersion(2, 1),
		ApproverTooManyRefused(32),
		ApproverUnknownType("Approve"),
		ApproverNoPrompt("ID"),
		ApproverHashMismatch("…"),
		ApproverNoPasskeys, ApproverPasskeyAgent, ApproverNoAssertion, ApproverPasskeyRule, ApproverAssertionUnasked, ApproverPasskeyRootOnly,
		ApproverAssertionRefused("ID", "…"),
		PasskeyEnrolRefused(""),
	} {
		if !strings.Contains(doc, "`"+m+"`") && !strings.Contains(doc, `"message":"`+strings.ReplaceAll(m, `"`, `\"`)+`"`) {
			t.Errorf("docs/protocol.md's approver protocol does not quote %q", m)
		}
	}
}
