package remote

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/approval"
	"github.com/rootgate/rootgate/approval/passkey"
	"github.com/rootgate/rootgate/internal/termsafe"
)

// EnrolWithin is how long an enrolment may take from its options to the
// browser's answer.
const EnrolWithin = 10 * time.Minute

// PasskeyChange is a change of the enrolled passkeys, for the audit trail.
type PasskeyChange struct {
	Kind string   // "enrolled", "removed" or "imported"
	IDs  []string // the credential ids enrolled, removed or imported
	Name string   // the passkey's name, when one
	// ConfirmedBy is the enrolled passkey that confirmed an enrolment, or
	// "" for the first one, allowed by the session it came from.
	ConfirmedBy string
	// Controllers are the uids that could control the session of the
	// root process that asked.
	Controllers []int
	// Proof is the confirming passkey's assertion.
	Proof *approval.PasskeyProof
}

// passkeyChange answers a connection that opened with enrol,
// passkey_remove or passkey_import (docs/protocol.md, "Passkeys"), then
// it is closed. Only root may change the passkeys. The first passkey is
// enrolled (or a file imported) only while none is, and only from a
// session no uid but root controls; every later enrolment must be
// confirmed by an enrolled passkey's signature.
func (h *Host) passkeyChange(c *net.UnixConn, br *bufio.Reader, m *Message, peer Peer, log *slog.Logger) {
	_ = c.SetWriteDeadline(time.Now().Add(WriteWithin))
	switch {
	case m.Version != ProtoVersion:
		Refuse(c, ApproverVersion(m.Version, ProtoVersion))
		return
	case peer.UID != 0:
		Refuse(c, ApproverPasskeyRootOnly)
		return
	case h.Passkeys == nil:
		Refuse(c, PasskeyEnrolRefused("this daemon keeps no passkeys"))
		return
	}
	controlled := approval.Uninvolved(peer.Controllers, func(int) string { return "" })
	record := func(ch PasskeyChange) {
		ch.Controllers = peer.Controllers
		if h.PasskeyChanged != nil {
			h.PasskeyChanged(ch)
		}
		log.Info("passkeys changed", "change", ch.Kind, "ids", ch.IDs, "confirmed_by", ch.ConfirmedBy)
		h.tellRelays(ch)
	}
	switch m.Type {
	case MsgPasskeyRemove:
		err := h.Passkeys.Update(func(f *passkey.File) error {
			if !f.Remove(m.ID) {
				return errString("no passkey " + termsafe.Sanitize(m.ID) + " is enrolled")
			}
			return nil
		})
		if err != nil {
			Refuse(c, PasskeyEnrolRefused(err.Error()))
			return
		}
		record(PasskeyChange{Kind: "removed", IDs: []string{m.ID}})
		_ = WriteMessage(c, &Message{Type: MsgPasskeyRemoved, ID: m.ID})
	case MsgPasskeyImport:
		in, err := passkey.Parse([]byte(m.Data))
		if err != nil {
			Refuse(c, PasskeyEnrolRefused(err.Error()))
			return
		}
		err = h.Passkeys.Update(func(f *passkey.File) error {
			switch {
			case len(f.Passkeys) > 0:
				return errString("passkeys are enrolled here already: remove them first, or enrol with rootgate passkeys add")
			case controlled != "":
				return errString("passkeys are imported only from a session no user but root controls; this one is controlled by " + controlled)
			}
			*f = *in
			return nil
		})
		if err != nil {
			Refuse(c, PasskeyEnrolRefused(err.Error()))
			return
		}
		record(PasskeyChange{Kind: "imported", IDs: in.IDs()})
		_ = WriteMessage(c, &Message{Type: MsgPasskeyImported, Credentials: in.IDs()})
	case MsgEnrol:
		h.enrol(c, br, m, controlled, record)
	}
}

// tellRelays tells every attached passkey relay of change ch, with the
// passkeys now enrolled: its page shows the change, and asks for the new
// credentials.
func (h *Host) tellRelays(ch PasskeyChange) {
	f, err := h.Passkeys.Load()
	if err != nil {
		return
	}
	what := fmt.Sprintf("%d passkey(s) imported by root", len(ch.IDs))
	switch ch.Kind {
	case "enrolled":
		what = "passkey " + termsafe.Sanitize(ch.Name) + " (" + strings.Join(ch.IDs, "") + ") enrolled by root"
		if ch.ConfirmedBy != "" {
			what += ", confirmed by passkey " + ch.ConfirmedBy
		}
	case "removed":
		what = "passkey " + termsafe.Sanitize(strings.Join(ch.IDs, "")) + " removed by root"
	}
	m := &Message{Type: MsgPasskeys, Reason: what, RPID: f.RPID, Credentials: f.IDs()}
	h.mu.Lock()
	relays := make([]*remote, 0, len(h.relays))
	for r := range h.relays {
		relays = append(relays, r)
	}
	h.mu.Unlock()
	for _, r := range relays {
		_ = r.send(m)
	}
}

// enrol runs one enrolment (see passkeyChange).
func (h *Host) enrol(c *net.UnixConn, br *bufio.Reader, m *Message, controlled string, record func(PasskeyChange)) {
	name := m.Name
	if name == "" || utf8.RuneCountInString(name) > 64 || !termsafe.String(name, false) {
		Refuse(c, PasskeyEnrolRefused("a passkey's name is 1 to 64 printable characters"))
		return
	}
	f, err := h.Passkeys.Load()
	if err != nil {
		Refuse(c, PasskeyEnrolRefused(err.Error()))
		return
	}
	if len(f.Passkeys) == 0 && controlled != "" {
		Refuse(c, PasskeyEnrolRefused("the first passkey is enrolled only from a session no user but root controls; this one is controlled by "+
			controlled+" (a process of that uid could open the enrolment link first)"))
		return
	}
	en, err := f.BeginEnrol(name, m.Origin)
	if err != nil {
		Refuse(c, PasskeyEnrolRefused(err.Error()))
		return
	}
	confirm := len(f.Passkeys) > 0
	rpID, _ := passkey.RPIDOf(m.Origin)
	if err := WriteMessage(c, &Message{Type: MsgEnrolOptions, Options: string(en.Options), Challenge: en.Challenge, Confirm: confirm,
		Credentials: f.IDs(), RPID: rpID}); err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(EnrolWithin))
	fin, err := ReadMessage(br, MaxApproverLine)
	if err != nil {
		return
	}
	_ = c.SetWriteDeadline(time.Now().Add(WriteWithin))
	if fin.Type != MsgEnrolFinish {
		Refuse(c, ApproverUnknownType(fin.Type))
		return
	}
	var confirmedBy *passkey.Enrolled
	if confirm {
		if fin.Assertion == nil {
			Refuse(c, PasskeyEnrolRefused("an enrolled passkey must confirm this enrolment"))
			return
		}
		if confirmedBy, err = h.Passkeys.Verify(fin.Assertion, passkey.EnrolChallenge(en.Challenge, name)); err != nil {
			Refuse(c, PasskeyEnrolRefused("the confirming assertion does not verify: "+err.Error()))
			return
		}
	}
	var added *passkey.Enrolled
	err = h.Passkeys.Update(func(f *passkey.File) error {
		if confirm != (len(f.Passkeys) > 0) {
			return errString("the enrolled passkeys changed meanwhile")
		}
		e, err := en.Finish(f, []byte(fin.Attestation))
		if err != nil {
			return err
		}
		f.Add(en, e)
		added = e
		return nil
	})
	if err != nil {
		Refuse(c, PasskeyEnrolRefused(err.Error()))
		return
	}
	ch := PasskeyChange{Kind: "enrolled", IDs: []string{added.ID}, Name: name}
	if confirmedBy != nil {
		a := fin.Assertion
		ch.ConfirmedBy = confirmedBy.ID
		ch.Proof = &approval.PasskeyProof{Credential: confirmedBy.ID, Name: confirmedBy.Name, AuthenticatorData: a.AuthenticatorData,
			ClientData: a.ClientData, Signature: a.Signature, UserHandle: a.UserHandle}
	}
	record(ch)
	_ = WriteMessage(c, &Message{Type: MsgEnrolled, ID: added.ID, Name: name})
}

type errString string

func (e errString) Error() string { return strings.TrimSpace(string(e)) }

// RemovePasskey asks the daemon at the approver socket to remove the
// enrolled passkey id (root only).
func RemovePasskey(ctx context.Context, socket, id string) error {
	_, err := oneExchange(ctx, socket, &Message{Type: MsgPasskeyRemove, Version: ProtoVersion, ID: id}, MsgPasskeyRemoved)
	return err
}

// ImportPasskeys asks the daemon at the approver socket to take data, a
// passkeys file, as its enrolled passkeys (root only, while none is
// enrolled); it returns the ids imported.
func ImportPasskeys(ctx context.Context, socket string, data []byte) ([]string, error) {
	m, err := oneExchange(ctx, socket, &Message{Type: MsgPasskeyImport, Version: ProtoVersion, Data: string(data)}, MsgPasskeyImported)
	if err != nil {
		return nil, err
	}
	return m.Credentials, nil
}

// Enrolment is an enrolment under way with a daemon (root only): Options
// is its enrol_options message; Finish sends the browser's answer.
type Enrolment struct {
	Options *Message
	c       net.Conn
	br      *bufio.Reader
}

// StartEnrol asks the daemon at the approver socket to enrol a passkey
// called name for a page at origin.
func StartEnrol(ctx context.Context, socket, name, origin string) (*Enrolment, error) {
	d := net.Dialer{Timeout: HelloWithin}
	c, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(HelloWithin))
	if err := WriteMessage(c, &Message{Type: MsgEnrol, Version: ProtoVersion, Name: name, Origin: origin}); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	m, err := ReadMessage(br, MaxDaemonLine)
	switch {
	case err != nil:
		c.Close()
		return nil, fmt.Errorf("no answer from rootgated: %w", err)
	case m.Type == MsgError:
		c.Close()
		return nil, &RefusedError{Message: m.Message}
	case m.Type != MsgEnrolOptions:
		c.Close()
		return nil, errors.New("unexpected answer from rootgated: " + m.Type)
	}
	return &Enrolment{Options: m, c: c, br: br}, nil
}

// Finish sends the created credential (JSON) and, when the daemon asked
// for one, an enrolled passkey's confirming assertion; it returns the new
// passkey's id.
func (e *Enrolment) Finish(attestation string, a *passkey.Assertion) (string, error) {
	defer e.c.Close()
	_ = e.c.SetDeadline(time.Now().Add(HelloWithin))
	if err := WriteMessage(e.c, &Message{Type: MsgEnrolFinish, Attestation: attestation, Assertion: a}); err != nil {
		return "", err
	}
	m, err := ReadMessage(e.br, MaxDaemonLine)
	switch {
	case err != nil:
		return "", fmt.Errorf("no answer from rootgated: %w", err)
	case m.Type == MsgError:
		return "", &RefusedError{Message: m.Message}
	case m.Type != MsgEnrolled:
		return "", errors.New("unexpected answer from rootgated: " + m.Type)
	}
	return m.ID, nil
}

// Close gives the enrolment up.
func (e *Enrolment) Close() { e.c.Close() }
