package web

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"net/http"
	"strings"
	"sync"

	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/approval/remote"
)

//go:embed enrol.html
var enrolHTML []byte

//go:embed enrol.js
var enrolJS []byte

// Enrol serves one enrolment's page at /enrol/Token, for `rootgate
// passkeys add`: the creation options the daemon gave (Options, an
// enrol_options message); the credential the browser created, handed to
// Attest once; then its confirmation, handed to Finish once. Once a
// credential was posted the page and its options are no longer served,
// and no other credential is taken.
type Enrol struct {
	Token   string
	Name    string
	Options *remote.Message
	// Attest relays the created credential (JSON) to the daemon and
	// returns its enrol_attested answer (the credential's id and
	// fingerprint, and the challenge an enrolled passkey signs to confirm
	// it when Options.Confirm), or its refusal.
	Attest func(ctx context.Context, attestation string) (*remote.Message, error)
	// Finish relays the confirmation and returns the enrolled credential
	// id, or the refusal: an enrolled passkey's assertion when
	// Options.Confirm; for a first passkey, nil, and root confirms on the
	// terminal of passkeys add (Finish waits for that answer).
	Finish func(ctx context.Context, a *passkey.Assertion) (string, error)

	mu    sync.Mutex
	stage int // enrolFresh, enrolAttested or enrolUsed
}

// The stages of an Enrol.
const (
	enrolFresh    = iota // no credential posted yet
	enrolAttested        // the daemon took a credential; its confirmation is awaited
	enrolUsed            // done, or failed: nothing more is taken
)

// advance moves e from stage from to enrolUsed and reports whether it
// was at from: each step is taken once.
func (e *Enrol) advance(from int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stage != from {
		return false
	}
	e.stage = enrolUsed
	return true
}

// ServeHTTP implements [http.Handler].
func (e *Enrol) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	rest, ok := strings.CutPrefix(req.URL.Path, "/enrol/")
	tok, sub, _ := strings.Cut(rest, "/")
	if !ok || subtle.ConstantTimeCompare([]byte(tok), []byte(e.Token)) != 1 {
		http.NotFound(w, req)
		return
	}
	e.mu.Lock()
	stage := e.stage
	e.mu.Unlock()
	switch {
	case req.Method == http.MethodGet && stage != enrolFresh:
		http.Error(w, "this enrolment link was used", http.StatusGone)
	case req.Method == http.MethodGet && sub == "":
		h.Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(enrolHTML)
	case req.Method == http.MethodGet && sub == "enrol.js":
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write(enrolJS)
	case req.Method == http.MethodGet && sub == "options":
		writeJSON(w, http.StatusOK, map[string]any{"options": e.Options.Options, "confirm": e.Options.Confirm, "rp_id": e.Options.RPID, "name": e.Name})
	case req.Method == http.MethodPost && sub == "attest":
		e.attest(w, req)
	case req.Method == http.MethodPost && sub == "finish":
		e.finish(w, req)
	default:
		http.NotFound(w, req)
	}
}

// attest takes the one credential this enrolment may have.
func (e *Enrol) attest(w http.ResponseWriter, req *http.Request) {
	var q struct {
		Attestation string `json:"attestation"`
	}
	if !readJSON(w, req, &q) {
		return
	}
	if !e.advance(enrolFresh) {
		http.Error(w, "this enrolment link was used", http.StatusGone)
		return
	}
	m, err := e.Attest(req.Context(), q.Attestation)
	if err != nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	e.mu.Lock()
	e.stage = enrolAttested
	e.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"id": m.ID, "fingerprint": m.Fingerprint, "aaguid": m.AAGUID, "confirm": m.Confirm,
		"challenge": m.Challenge, "credentials": m.Credentials, "rp_id": m.RPID})
}

// finish relays the confirmation of the credential taken.
func (e *Enrol) finish(w http.ResponseWriter, req *http.Request) {
	var q struct {
		Assertion *passkey.Assertion `json:"assertion"`
	}
	if !readJSON(w, req, &q) {
		return
	}
	if !e.advance(enrolAttested) {
		http.Error(w, "this enrolment link was used, or has no credential to confirm", http.StatusGone)
		return
	}
	id, err := e.Finish(req.Context(), q.Assertion)
	if err != nil {
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"id": id})
}
