package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-webauthn/webauthn/webauthn"
	"github.com/rootgate/rootgate/internal/approval/passkey"
)

// TestPasskeysListEscapesOrigins: an origin in the passkeys file (an
// imported one, say) reaches the terminal escaped, as every other field.
func TestPasskeysListEscapesOrigins(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the passkeys file must be root's")
	}
	path := filepath.Join(t.TempDir(), "passkeys.json")
	f := &passkey.File{Version: passkey.FileVersion, RPID: "example.org", Origins: []string{"https://exa\u202emple.org"},
		Passkeys: []passkey.Enrolled{{ID: "AQ", Name: "phone", Credential: webauthn.Credential{ID: []byte{1}, PublicKey: []byte{1}}}}}
	if err := f.Save(path); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	_ = run(context.Background(), []string{"passkeys", "list", "--file", path}, strings.NewReader(""), &out, &errb)
	if !strings.Contains(out.String(), "RP ID example.org") || strings.Contains(out.String(), "\u202e") {
		t.Fatalf("origin printed unescaped: %q", out.String())
	}
}
