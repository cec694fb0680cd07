package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
)

// SoftKey is a WebAuthn authenticator in software, as an agent can make
// one: a P-256 key and a credential id of its own, answering create() with
// a "none" attestation and get() with an assertion, both flagging user
// presence and verification, for any origin it is told. The passkey tests
// use it for the agent's own authenticator.
type SoftKey struct {
	ID      []byte
	Key     *ecdsa.PrivateKey
	Counter uint32
}

// NewSoftKey makes a key and a random 16-byte credential id.
func NewSoftKey() *SoftKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id)
	return &SoftKey{ID: id, Key: k}
}

var b64 = base64.RawURLEncoding.EncodeToString

// cborBytes is the CBOR head of a byte string of n bytes, and the bytes.
func cborBytes(b []byte) []byte {
	switch n := len(b); {
	case n < 24:
		return append([]byte{0x40 | byte(n)}, b...)
	case n < 256:
		return append([]byte{0x58, byte(n)}, b...)
	default:
		return append([]byte{0x59, byte(n >> 8), byte(n)}, b...)
	}
}

// COSE is the public key as a COSE_Key (EC2, ES256, P-256), the bytes a
// relying party keeps.
func (k *SoftKey) COSE() []byte {
	pt, err := k.Key.PublicKey.Bytes() // 0x04 || X || Y
	if err != nil {
		panic(err)
	}
	out := []byte{0xa5, 0x01, 0x02, 0x03, 0x26, 0x20, 0x01, 0x21}
	out = append(out, cborBytes(pt[1:33])...)
	out = append(out, 0x22)
	return append(out, cborBytes(pt[33:65])...)
}

// CreationData is the authenticator data of a create() for rpID: the RP
// ID's hash, flags UP, UV and AT, the counter, a zero AAGUID, the
// credential id and the public key.
func (k *SoftKey) CreationData(rpID string) []byte {
	rp := sha256.Sum256([]byte(rpID))
	ad := append(rp[:], 0x45)
	ad = binary.BigEndian.AppendUint32(ad, k.Counter)
	ad = append(ad, make([]byte, 16)...)
	ad = binary.BigEndian.AppendUint16(ad, uint16(len(k.ID)))
	ad = append(ad, k.ID...)
	return append(ad, k.COSE()...)
}

// Attest is the PublicKeyCredential of a create() over challenge (as the
// creation options carry it, base64url) on a page at origin, as JSON.
func (k *SoftKey) Attest(challenge, origin, rpID string) string {
	cd, _ := json.Marshal(map[string]any{"type": "webauthn.create", "challenge": challenge, "origin": origin, "crossOrigin": false})
	obj := []byte{0xa3, 0x63, 'f', 'm', 't', 0x64, 'n', 'o', 'n', 'e', 0x67, 'a', 't', 't', 'S', 't', 'm', 't', 0xa0,
		0x68, 'a', 'u', 't', 'h', 'D', 'a', 't', 'a'}
	obj = append(obj, cborBytes(k.CreationData(rpID))...)
	b, _ := json.Marshal(map[string]any{"id": b64(k.ID), "rawId": b64(k.ID), "type": "public-key", "clientExtensionResults": map[string]any{},
		"response": map[string]string{"attestationObject": b64(obj), "clientDataJSON": b64(cd)}})
	return string(b)
}

// Assert is a get() over challenge on a page at origin: the credential
// id, authenticator data (UP and UV, the counter advanced), client data
// and signature, base64url.
func (k *SoftKey) Assert(challenge []byte, origin, rpID string) (id, authData, clientData, sig string) {
	k.Counter++
	rp := sha256.Sum256([]byte(rpID))
	ad := binary.BigEndian.AppendUint32(append(rp[:], 0x05), k.Counter)
	cd, _ := json.Marshal(map[string]any{"type": "webauthn.get", "challenge": b64(challenge), "origin": origin, "crossOrigin": false})
	cdHash := sha256.Sum256(cd)
	digest := sha256.Sum256(append(append([]byte{}, ad...), cdHash[:]...))
	s, err := ecdsa.SignASN1(rand.Reader, k.Key, digest[:])
	if err != nil {
		panic(err)
	}
	return b64(k.ID), b64(ad), b64(cd), b64(s)
}
