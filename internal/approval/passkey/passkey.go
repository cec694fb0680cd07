// Package passkey is rootgated's WebAuthn relying party: the file of
// enrolled passkeys, the challenge an approval signs, and the checks of an
// assertion and of an enrolment.
//
// An approval by passkey is a WebAuthn assertion whose challenge is
// [Challenge] of the prompt's request hash (the one a terminal approver's
// decision carries), a nonce the daemon gave that prompt, and the standing
// grant asked for with it. rootgated checks it itself ([File.Verify]) against
// the public keys in its file: user presence and user verification, the
// signature counter, the origin and RP ID, and that challenge. Whoever relays
// it (the page process, `rootgate web`) holds no key and cannot make one.
//
// An enrolment is confirmed over the new credential itself: the browser
// creates it first, and then either an enrolled passkey signs
// [EnrolChallenge], which names the new credential's id and public key, or
// (for the first passkey) root confirms its [Fingerprint] on the console of
// `rootgate passkeys add`.
//
// The file ([DefaultFile]) is root's alone: [Load] refuses one that is not a
// regular file owned by root with no group or other access, that is a
// symlink, or that someone other than root could replace (a directory on
// its path writable by another), and [File.Save] writes a new file and
// renames it into place. rootgated keeps it in memory ([Keeper]).
package passkey

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/webauthn"
)

// DefaultFile is where rootgated keeps the enrolled passkeys.
const DefaultFile = "/etc/rootgate/passkeys.json"

// FileVersion is the version of the file's format.
const FileVersion = 1

// File is the enrolled passkeys and the relying party they were enrolled
// for. Its zero value has none.
type File struct {
	Version int `json:"version"`
	// RPID is the WebAuthn relying party id every passkey is scoped to:
	// the host name of the page's origin ("localhost", "approve.example.org").
	RPID string `json:"rp_id"`
	// Origins are the page origins an assertion may come from
	// ("https://approve.example.org:8443"); the browser writes its origin
	// into the signed client data.
	Origins  []string   `json:"origins"`
	Passkeys []Enrolled `json:"passkeys"`
}

// Enrolled is one enrolled passkey.
type Enrolled struct {
	ID         string              `json:"id"` // the credential id, base64url without padding
	Name       string              `json:"name"`
	Added      time.Time           `json:"added"`
	Credential webauthn.Credential `json:"credential"` // public key, flags, signature counter
	// Fingerprint is the [Fingerprint] of the authenticator data it was
	// created with, as root confirmed it, or as the enrolment page showed it.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Assertion is a WebAuthn assertion as a browser returns it, each part
// base64url without padding.
type Assertion struct {
	CredentialID      string `json:"credential_id"`
	AuthenticatorData string `json:"authenticator_data"`
	ClientData        string `json:"client_data"` // clientDataJSON
	Signature         string `json:"signature"`
	UserHandle        string `json:"user_handle,omitempty"`
}

// Errors of [Load] and [File.Verify] that callers tell apart.
var (
	// ErrNotEnrolled: the assertion's credential is not in the file.
	ErrNotEnrolled = errors.New("passkey not enrolled")
	// ErrCounter: the signature counter did not advance, so the
	// authenticator may have been cloned, or the assertion replayed.
	ErrCounter = errors.New("passkey signature counter did not advance")
)

// userID is the WebAuthn user handle of rootgate's one user: passkeys
// approve for the machine, not for an account.
var userID = []byte("rootgate")

// IDs are the enrolled credential ids.
func (f *File) IDs() []string {
	ids := make([]string, len(f.Passkeys))
	for i, e := range f.Passkeys {
		ids[i] = e.ID
	}
	return ids
}

// Find returns the enrolled passkey id, or nil.
func (f *File) Find(id string) *Enrolled {
	for i := range f.Passkeys {
		if f.Passkeys[i].ID == id {
			return &f.Passkeys[i]
		}
	}
	return nil
}

// Remove takes passkey id out of f; it reports whether it was there.
func (f *File) Remove(id string) bool {
	n := len(f.Passkeys)
	f.Passkeys = slices.DeleteFunc(f.Passkeys, func(e Enrolled) bool { return e.ID == id })
	return len(f.Passkeys) < n
}

// RPIDOf is the RP ID of a page origin: its host name. The origin must be
// https, or http on localhost (a browser's secure context either way).
func RPIDOf(origin string) (string, error) {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("origin %q: want https://HOST[:PORT]", origin)
	}
	host := u.Hostname()
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && host == "localhost":
	default:
		return "", fmt.Errorf("origin %q: a browser allows passkeys only on https, or on http://localhost", origin)
	}
	return host, nil
}

// Challenge is what an approval by passkey signs: SHA-256 of the domain
// "rootgate approval v1", the prompt's request hash (hex, as the prompt
// message carries it), the prompt's nonce, the standing grant asked for
// (seconds, 0 for none) and whether it was confirmed for a request that
// runs anything, each followed by a NUL byte. Another request, another
// nonce or another grant gives another challenge.
func Challenge(hash, nonce string, grant int64, grantRunsAnything bool) []byte {
	h := sha256.New()
	for _, s := range []string{"rootgate approval v1", hash, nonce, strconv.FormatInt(grant, 10), strconv.FormatBool(grantRunsAnything)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// EnrolChallenge is what an enrolled passkey signs to confirm the
// enrolment of another, once the browser created it: SHA-256 of
// "rootgate enrol v2", the enrolment's creation challenge (base64url, as
// the daemon gave it), the new passkey's name, its credential id (the
// raw id, base64url without padding, as [Enrolled.ID]) and its public key
// (the COSE key as the file keeps it, base64url without padding), each
// followed by a NUL byte. A confirmation made for another credential,
// or another key under the same id, confirms nothing else.
func EnrolChallenge(creation, name, id string, publicKey []byte) []byte {
	h := sha256.New()
	for _, s := range []string{"rootgate enrol v2", creation, name, id, base64.RawURLEncoding.EncodeToString(publicKey)} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return h.Sum(nil)
}

// Fingerprint is how a person compares a new credential with the one
// their device made: the first 8 bytes of the SHA-256 of the
// authenticator data it was created with (which holds its id, its public
// key and its authenticator's AAGUID), in hex, in four groups
// ("1a2b 3c4d 5e6f 7a8b"). The enrolment page computes it from what the
// browser returned, rootgated from what it checked.
func Fingerprint(authData []byte) string {
	sum := sha256.Sum256(authData)
	x := hex.EncodeToString(sum[:8])
	return x[0:4] + " " + x[4:8] + " " + x[8:12] + " " + x[12:16]
}

// AAGUID is the AAGUID of e's authenticator (its model), as a UUID, or ""
// when it gave none (all zero, as most do without attestation).
func (e *Enrolled) AAGUID() string {
	g := e.Credential.Authenticator.AAGUID
	if len(g) != 16 || !slices.ContainsFunc(g, func(b byte) bool { return b != 0 }) {
		return ""
	}
	x := hex.EncodeToString(g)
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// user is rootgate's one WebAuthn user, holding the enrolled credentials.
type user struct{ creds []webauthn.Credential }

func (u user) WebAuthnID() []byte                         { return userID }
func (u user) WebAuthnName() string                       { return "rootgate" }
func (u user) WebAuthnDisplayName() string                { return "rootgate approver" }
func (u user) WebAuthnCredentials() []webauthn.Credential { return u.creds }

func (f *File) user() user {
	u := user{}
	for _, e := range f.Passkeys {
		u.creds = append(u.creds, e.Credential)
	}
	return u
}

func (f *File) relyingParty(origins []string) (*webauthn.WebAuthn, error) {
	return webauthn.New(&webauthn.Config{RPID: f.RPID, RPDisplayName: "rootgate", RPOrigins: origins})
}

// Verify checks assertion a against the enrolled passkeys: it names one
// of them, its challenge is challenge, its origin is one of f.Origins, its
// RP ID hash is f.RPID's, user presence and user verification are flagged,
// the signature is that passkey's over the authenticator data and client
// data, and the signature counter advanced (unless the authenticator keeps
// none: both zero). It returns the passkey, with its counter updated for
// the caller to save.
func (f *File) Verify(a *Assertion, challenge []byte) (*Enrolled, error) {
	e, err := f.check(a, challenge)
	if err != nil {
		return nil, err
	}
	if e.Credential.Authenticator.CloneWarning {
		return nil, ErrCounter
	}
	return e, nil
}

// VerifyRecorded is [File.Verify] without the counter: it checks an
// assertion recorded earlier (the audit log's), whose counter is behind
// the passkey's by now.
func (f *File) VerifyRecorded(a *Assertion, challenge []byte) (*Enrolled, error) {
	return f.check(a, challenge)
}

func (f *File) check(a *Assertion, challenge []byte) (*Enrolled, error) {
	if a == nil {
		return nil, errors.New("no assertion")
	}
	e := f.Find(a.CredentialID)
	if e == nil {
		return nil, ErrNotEnrolled
	}
	raw, err := json.Marshal(map[string]any{
		"id": a.CredentialID, "rawId": a.CredentialID, "type": "public-key",
		"response": map[string]string{"authenticatorData": a.AuthenticatorData, "clientDataJSON": a.ClientData, "signature": a.Signature, "userHandle": a.UserHandle},
	})
	if err != nil {
		return nil, err
	}
	parsed, err := protocol.ParseCredentialRequestResponseBytes(raw)
	if err != nil {
		return nil, fmt.Errorf("bad assertion: %s", detail(err))
	}
	fl := parsed.Response.AuthenticatorData.Flags
	if !fl.UserPresent() || !fl.UserVerified() {
		return nil, errors.New("assertion without user presence and user verification")
	}
	rp, err := f.relyingParty(f.Origins)
	if err != nil {
		return nil, err
	}
	only := user{creds: []webauthn.Credential{e.Credential}}
	sess := webauthn.SessionData{
		Challenge: base64.RawURLEncoding.EncodeToString(challenge), RelyingPartyID: f.RPID, UserID: userID,
		AllowedCredentialIDs: [][]byte{e.Credential.ID}, UserVerification: protocol.VerificationRequired,
	}
	cred, err := rp.ValidateLogin(only, sess, parsed)
	if err != nil {
		return nil, fmt.Errorf("assertion refused: %s", detail(err))
	}
	out := *e
	out.Credential = *cred
	return &out, nil
}

// detail is the library's error with its details, on one line.
func detail(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) && pe.Details != "" {
		return pe.Details
	}
	return err.Error()
}

// Enrolment is one passkey enrolment under way: the creation options for
// the browser, and what the daemon checks the answer against.
type Enrolment struct {
	Name    string
	Origin  string
	Options []byte // the PublicKeyCredentialCreationOptions, JSON, for navigator.credentials.create
	// Challenge is the creation challenge, base64url.
	Challenge string
	session   webauthn.SessionData
	rpID      string
}

// BeginEnrol starts the enrolment of a passkey called name for a page at
// origin. The first enrolment fixes the RP ID (origin's host name); later
// ones must share it. User verification is required.
func (f *File) BeginEnrol(name, origin string) (*Enrolment, error) {
	rpID, err := RPIDOf(origin)
	if err != nil {
		return nil, err
	}
	if f.RPID != "" && len(f.Passkeys) > 0 && rpID != f.RPID {
		return nil, fmt.Errorf("origin %s: its host is not the passkeys' RP ID %s", origin, f.RPID)
	}
	g := *f
	g.RPID = rpID
	rp, err := g.relyingParty([]string{origin})
	if err != nil {
		return nil, err
	}
	var exclude []protocol.CredentialDescriptor
	for _, e := range f.Passkeys {
		exclude = append(exclude, e.Credential.Descriptor())
	}
	creation, sess, err := rp.BeginRegistration(f.user(),
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{UserVerification: protocol.VerificationRequired, ResidentKey: protocol.ResidentKeyRequirementPreferred}),
		webauthn.WithConveyancePreference(protocol.PreferNoAttestation),
		webauthn.WithExclusions(exclude))
	if err != nil {
		return nil, err
	}
	opts, err := json.Marshal(creation.Response)
	if err != nil {
		return nil, err
	}
	return &Enrolment{Name: name, Origin: origin, Options: opts, Challenge: sess.Challenge, session: *sess, rpID: rpID}, nil
}

// Finish checks the browser's answer (a PublicKeyCredential of a
// create(), as JSON) and returns the passkey to add, with the
// [Fingerprint] of the authenticator data it came with; [File.Add] adds
// it. Nothing is added yet: the enrolment is confirmed first.
func (en *Enrolment) Finish(f *File, response []byte) (*Enrolled, error) {
	parsed, err := protocol.ParseCredentialCreationResponseBytes(response)
	if err != nil {
		return nil, fmt.Errorf("bad enrolment answer: %s", detail(err))
	}
	g := *f
	g.RPID = en.rpID
	rp, err := g.relyingParty([]string{en.Origin})
	if err != nil {
		return nil, err
	}
	cred, err := rp.CreateCredential(f.user(), en.session, parsed)
	if err != nil {
		return nil, fmt.Errorf("enrolment refused: %s", detail(err))
	}
	if !cred.Flags.UserVerified {
		return nil, errors.New("enrolment refused: the authenticator did not verify the user")
	}
	id := base64.RawURLEncoding.EncodeToString(cred.ID)
	if f.Find(id) != nil {
		return nil, fmt.Errorf("passkey %s is enrolled already", id)
	}
	return &Enrolled{ID: id, Name: en.Name, Added: time.Now().UTC(), Credential: *cred,
		Fingerprint: Fingerprint(parsed.Response.AttestationObject.RawAuthData)}, nil
}

// Add adds e, enrolled by en, to f: the first passkey fixes f's RP ID, and
// en's origin joins f's origins.
func (f *File) Add(en *Enrolment, e *Enrolled) {
	f.Version = FileVersion
	if len(f.Passkeys) == 0 {
		f.RPID = en.rpID
	}
	if !slices.Contains(f.Origins, en.Origin) {
		f.Origins = append(f.Origins, en.Origin)
	}
	f.Passkeys = append(f.Passkeys, *e)
}

// Nonce returns a fresh random nonce, base64url.
func Nonce() string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		panic("passkey: no randomness: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b)
}
