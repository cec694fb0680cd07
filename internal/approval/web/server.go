package web

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/approval/passkey"
)

// DefaultDwell is how long a request is shown before its Approve and
// Grant buttons work.
const DefaultDwell = 2 * time.Second

// Server serves the page for a Relay. Every request must carry Token: the
// link the page process prints has it (?t=), and the page's cookie keeps
// it, so another user of the machine, or a page of another site, reaches
// nothing.
//
// The page lives under a path of its own (see [Server.Base]), secret as
// the token is, and its cookie is sent for that path only: a browser
// sends a host's cookies to each of its ports alike, so a page on
// another port of the same host (an agent's server on localhost:3000)
// would otherwise receive the token with every request the browser makes
// to it.
type Server struct {
	Relay *Relay
	Token string        // see NewToken
	Dwell time.Duration // 0 means DefaultDwell
}

// NewToken returns a fresh random token for [Server].Token.
func NewToken() string { return passkey.Nonce() }

//go:embed page.html
var pageHTML []byte

//go:embed app.js
var appJS []byte

// Base is the path the page is served under: "/", 32 hex digits derived
// from Token, "/". Only who holds the token knows it.
func (s *Server) Base() string {
	return "/" + hex.EncodeToString(s.scope()[:16]) + "/"
}

// cookieName is the name of the page's cookie: one per token, so that
// pages of several instances (other ports, other runs) keep their own,
// and __Secure- over HTTPS, so that no plain-HTTP page of the host may
// set it. Not __Host-: that prefix requires Path=/, which would send the
// cookie to every port of the host.
func (s *Server) cookieName(secure bool) string {
	n := "rootgate_web_" + hex.EncodeToString(s.scope()[16:20])
	if secure {
		n = "__Secure-" + n
	}
	return n
}

// scope is what Base and the cookie's name are taken from.
func (s *Server) scope() []byte {
	sum := sha256.Sum256([]byte("rootgate web page v1\x00" + s.Token))
	return sum[:]
}

// ServeHTTP implements [http.Handler].
func (s *Server) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'unsafe-inline'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if t := req.URL.Query().Get("t"); t != "" && req.Method == http.MethodGet && req.URL.Path == "/" {
		s.link(w, req, t)
		return
	}
	rest, under := strings.CutPrefix(req.URL.Path, s.Base())
	if !under || !s.cookieOK(req) {
		http.Error(w, "open the link rootgate web printed (it carries the page's token)", http.StatusForbidden)
		return
	}
	if req.Method == http.MethodPost && req.Header.Get("Sec-Fetch-Site") != "" && req.Header.Get("Sec-Fetch-Site") != "same-origin" {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	switch {
	case req.Method == http.MethodGet && rest == "":
		h.Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(pageHTML)
	case req.Method == http.MethodGet && rest == "app.js":
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write(appJS)
	case req.Method == http.MethodGet && rest == "events":
		s.events(w, req)
	case req.Method == http.MethodPost && rest == "challenge":
		s.challenge(w, req)
	case req.Method == http.MethodPost && rest == "decide":
		s.decide(w, req)
	default:
		http.NotFound(w, req)
	}
}

// link answers the printed link (/?t=TOKEN): it sets the page's cookie
// and sends the browser to the page's path.
func (s *Server) link(w http.ResponseWriter, req *http.Request, t string) {
	if !s.tokenOK(t) {
		http.Error(w, "wrong token", http.StatusForbidden)
		return
	}
	// HttpOnly: no script reads it; SameSite=Strict: no other site's
	// page sends it; Path: no other port's page is sent it.
	http.SetCookie(w, &http.Cookie{Name: s.cookieName(req.TLS != nil), Value: t, Path: s.Base(), HttpOnly: true, Secure: req.TLS != nil, SameSite: http.SameSiteStrictMode})
	http.Redirect(w, req, s.Base(), http.StatusSeeOther)
}

// cookieOK reports whether the request carries the page's cookie. Every
// cookie of that name is looked at: a page of the same host may have set
// another one (for another path) beside it.
func (s *Server) cookieOK(req *http.Request) bool {
	for _, c := range req.CookiesNamed(s.cookieName(req.TLS != nil)) {
		if s.tokenOK(c.Value) {
			return true
		}
	}
	return false
}

func (s *Server) tokenOK(t string) bool {
	return s.Token != "" && subtle.ConstantTimeCompare([]byte(t), []byte(s.Token)) == 1
}

// Shown is a prompt as the page gets it.
type Shown struct {
	Key      string   `json:"key"`
	Host     string   `json:"host"`
	Socket   string   `json:"socket"`
	ID       string   `json:"id"`
	Text     string   `json:"text"`     // approval.RenderWhole: what a terminal approver pages through, escaped alike
	Own      bool     `json:"own"`      // the requester is the uid this page runs as
	Question string   `json:"question"` // "Run this command as root?"
	Deadline int64    `json:"deadline"` // Unix milliseconds
	Arrived  int64    `json:"arrived"`  // Unix milliseconds
	Dwell    int64    `json:"dwell_ms"` // before Approve works
	Count    int      `json:"count"`    // requests the one answer decides
	NoGrant  string   `json:"no_grant"` // why no standing grant is offered, or ""
	Anything bool     `json:"anything"` // a grant must confirm it runs anything
	RPID     string   `json:"rp_id"`    // for navigator.credentials.get
	Creds    []string `json:"credentials"`
}

type state struct {
	Prompts []Shown  `json:"prompts"`
	Notices []Notice `json:"notices"`
}

func (s *Server) state() state {
	dwell := s.Dwell
	if dwell <= 0 {
		dwell = DefaultDwell
	}
	st := state{Prompts: []Shown{}, Notices: append([]Notice{}, s.Relay.Notices()...)}
	for _, w := range s.Relay.Waiting() {
		p := w.Prompt
		rpID, creds, _ := s.Relay.Keys(w.Key)
		sh := Shown{Key: w.Key, Host: w.Host, Socket: w.Socket, ID: p.ID, Text: approval.RenderWhole(p), Own: p.Requester.UID == os.Getuid(),
			Question: "Run this command as " + approval.RunAsWord(p) + "?",
			Deadline: w.Deadline.UnixMilli(), Arrived: w.Arrived.UnixMilli(), Dwell: dwell.Milliseconds(),
			Count: max(p.Group, 1), RPID: rpID, Creds: append([]string{}, creds...)}
		switch {
		case p.ForwardAgent:
			sh.NoGrant = "it forwards an SSH agent"
		case approval.Grantable(p) != "":
			sh.NoGrant = approval.Grantable(p)
		}
		sh.Anything = len(approval.RunsAnything(p)) > 0
		st.Prompts = append(st.Prompts, sh)
	}
	return st
}

// events streams the state, as server-sent events, on every change.
func (s *Server) events(w http.ResponseWriter, req *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "no streaming", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	changed, stop := s.Relay.Changed()
	defer stop()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		b, _ := json.Marshal(s.state())
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return
		}
		fl.Flush()
		select {
		case <-req.Context().Done():
			return
		case <-changed:
		case <-tick.C:
		}
	}
}

// maxBody bounds a posted decision: an assertion is a few hundred bytes.
const maxBody = 64 << 10

func readJSON(w http.ResponseWriter, req *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "bad request: " + err.Error()})
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) challenge(w http.ResponseWriter, req *http.Request) {
	var q struct {
		Key               string `json:"key"`
		Grant             int64  `json:"grant"`
		GrantRunsAnything bool   `json:"grant_runs_anything"`
	}
	if !readJSON(w, req, &q) {
		return
	}
	ch, err := s.Relay.Challenge(q.Key, q.Grant, q.GrantRunsAnything)
	if err != nil {
		writeJSON(w, http.StatusGone, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"challenge": base64.RawURLEncoding.EncodeToString(ch)})
}

func (s *Server) decide(w http.ResponseWriter, req *http.Request) {
	var d Decision
	if !readJSON(w, req, &d) {
		return
	}
	ctx, cancel := context.WithTimeout(req.Context(), 30*time.Second)
	defer cancel()
	if err := s.Relay.Decide(ctx, d); err != nil {
		code := http.StatusConflict
		if errors.Is(err, ErrGone) {
			code = http.StatusGone
		}
		writeJSON(w, code, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
}
