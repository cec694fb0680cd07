package web

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"net/http"
	"strings"
	"sync"

	"github.com/rootgate/rootgate/approval/passkey"
	"github.com/rootgate/rootgate/approval/remote"
)

//go:embed enrol.html
var enrolHTML []byte

//go:embed enrol.js
var enrolJS []byte

// Enrol serves one enrolment's page at /enrol/Token, for `rootgate
// passkeys add`: the creation options the daemon gave (Options, an
// enrol_options message), and the browser's answer, handed to Finish once.
// After the first answer every request is refused.
type Enrol struct {
	Token   string
	Name    string
	Options *remote.Message
	// Finish relays the browser's answer to the daemon and returns the
	// enrolled credential id, or the daemon's refusal.
	Finish func(ctx context.Context, attestation string, a *passkey.Assertion) (string, error)

	mu   sync.Mutex
	used bool
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
	used := e.used
	e.mu.Unlock()
	if used {
		http.Error(w, "this enrolment link was used", http.StatusGone)
		return
	}
	switch {
	case req.Method == http.MethodGet && sub == "":
		h.Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(enrolHTML)
	case req.Method == http.MethodGet && sub == "enrol.js":
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write(enrolJS)
	case req.Method == http.MethodGet && sub == "options":
		writeJSON(w, http.StatusOK, map[string]any{"options": e.Options.Options, "confirm": e.Options.Confirm, "credentials": e.Options.Credentials,
			"rp_id": e.Options.RPID, "name": e.Name,
			"confirm_challenge": base64.RawURLEncoding.EncodeToString(passkey.EnrolChallenge(e.Options.Challenge, e.Name))})
	case req.Method == http.MethodPost && sub == "finish":
		var q struct {
			Attestation string             `json:"attestation"`
			Assertion   *passkey.Assertion `json:"assertion"`
		}
		if !readJSON(w, req, &q) {
			return
		}
		e.mu.Lock()
		if e.used {
			e.mu.Unlock()
			http.Error(w, "this enrolment link was used", http.StatusGone)
			return
		}
		e.used = true
		e.mu.Unlock()
		id, err := e.Finish(req.Context(), q.Attestation, q.Assertion)
		if err != nil {
			writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"id": id})
	default:
		http.NotFound(w, req)
	}
}
