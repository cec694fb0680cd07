package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/approval/passkey"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/termsafe"
	"golang.org/x/sys/unix"
)

// Exit codes of audit verify besides exitOK, exitUsage and exitError
// (a file could not be read).
const exitBroken = 1 // the chain is broken; the first broken record is named

const auditUsage = `usage: rootgate audit verify [--file F]... [--passkeys F]
       rootgate audit show [--file F]... [--id ID] [--since T]

` + auditAbout

// auditAbout is the help of the audit commands.
const auditAbout = `verify checks the audit log's chain: each record's hash, sequence numbers
and links, across rotated files. It prints a summary, or the first broken
record (file, line, seq and what is wrong).
show prints the records readably; control characters and other invisible
text are escaped, as records hold requester-controlled text.

--passkeys (verify) names the enrolled passkeys file (default
` + passkey.DefaultFile + ` when it exists; "" for none): every passkey
approval in the log is checked again against the public
key enrolled there: its signature over the recorded request hash, nonce and
grant, its origin and RP ID, user presence and verification. So is every
enrolment confirmed by an enrolled passkey: that passkey's signature over
the recorded creation challenge, name, new credential id and public key;
and the key enrolled under a recorded id must be the one recorded.
--file names one file; given once it also takes the rotated files beside it
(FILE.NNNNNNNNNNNNNNNNNNNN), given more than once exactly the files named,
oldest first. The default is ` + audit.DefaultPath + `.
--since takes a time (2026-02-13T14:30:00Z, 2026-02-13) or a duration
back from now (90m, 24h).

Examples:
  sudo rootgate audit verify
  sudo rootgate audit show --since 1h
  sudo rootgate audit show --id 0c1e5d4e-8f3a-4b7e-9d55-2a5f3c1a9b77

Exit codes: 0 intact (verify) or shown (show), 1 broken chain (verify) or
unreadable records (show), 2 bad usage, 70 a file could not be read.
`

// auditFlags are rootgate audit verify's flags; auditShowFlags are
// rootgate audit show's.
var (
	auditFlags       = []clidoc.Flag{{Name: "file", Default: clidoc.List(nil), Usage: "audit log `file` (repeatable)"}}
	auditVerifyFlags = append(slices.Clip(auditFlags),
		clidoc.Flag{Name: "passkeys", Default: passkey.DefaultFile, Usage: "enrolled passkeys `file` to check passkey approvals against (\"\" for none)"})
	auditShowFlags = append(slices.Clip(auditFlags),
		clidoc.Flag{Name: "id", Default: "", Usage: "show only the records of request `ID`"},
		clidoc.Flag{Name: "since", Default: "", Usage: "show only records from `T` on"})
)

// cmdAudit runs "rootgate audit" with no known subcommand after it ("audit
// verify" and "audit show" are commands of their own): it prints the usage
// or says what is wrong.
func cmdAudit(_ context.Context, e *env, _ clidoc.Values, args []string) int {
	switch {
	case len(args) == 0:
		fmt.Fprint(e.stderr, auditUsage)
		return exitUsage
	case args[0] == "help":
		fmt.Fprint(e.stdout, auditUsage)
		return exitOK
	}
	errorWithHint(e.stderr, fmt.Sprintf("unknown audit command %q", args[0]), "rootgate audit verify, or rootgate audit show")
	return exitUsage
}

// auditFiles expands --file as documented in auditUsage.
func auditFiles(files []string) ([]string, error) {
	if len(files) > 1 {
		return files, nil
	}
	path := audit.DefaultPath
	if len(files) == 1 {
		path = files[0]
	}
	all, err := audit.Files(path)
	if err != nil {
		return nil, err
	}
	if len(all) == 0 {
		return nil, fmt.Errorf("no audit log at %s", path)
	}
	return all, nil
}

func cmdAuditVerify(_ context.Context, e *env, fl clidoc.Values, _ []string) int {
	stdout, stderr := e.stdout, e.stderr
	names, err := auditFiles(fl.List("file"))
	if err != nil {
		return fail(stderr, err)
	}
	sum, err := audit.Verify(names)
	var p *audit.Problem
	switch {
	case errors.As(err, &p):
		sayf(stderr, "broken", "%s", termsafe.Sanitize(p.Error()))
		return exitBroken
	case err != nil:
		return fail(stderr, err)
	}
	fmt.Fprintf(stdout, "ok: %d records, seq %d to %d, in %d file(s)\n", sum.Records, sum.FirstSeq, sum.LastSeq, sum.Files)
	if sum.Genesis != "" {
		fmt.Fprintf(stdout, "genesis %s\n", sum.Genesis)
	} else {
		fmt.Fprintf(stdout, "starts with a rotated record after %s (pruned or not given): earlier records not checked\n", termsafe.Sanitize(sum.After))
	}
	fmt.Fprintf(stdout, "last hash %s\n", sum.LastHash)
	return verifyPasskeys(e, fl, names)
}

// verifyPasskeys checks every passkey assertion recorded in the files
// names against the enrolled passkeys file --passkeys (skipped when it is
// the default and missing): each approval's, and each enrolment's
// confirmation.
func verifyPasskeys(e *env, fl clidoc.Values, names []string) int {
	path := fl.String("passkeys")
	if path == "" {
		return exitOK
	}
	if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) && !fl.Given("passkeys") {
		return exitOK
	}
	keys, err := passkey.Load(path)
	if err != nil {
		return fail(e.stderr, err)
	}
	approvals, enrolments, broken := 0, 0, 0
	err = audit.ReadAll(names, func(rd audit.Read) error {
		if rd.Err != nil {
			return nil
		}
		var what string
		var err error
		switch r := rd.Record; {
		case r.Decision != nil && r.Decision.Passkey != nil:
			approvals++
			pk := r.Decision.Passkey
			what = "passkey approval of request " + r.ID + " by " + pk.Credential
			_, err = keys.VerifyRecorded(recordedAssertion(pk), passkey.Challenge(pk.RequestHash, pk.Nonce, pk.Grant, pk.GrantRunsAnything))
		case r.Passkeys != nil && r.Passkeys.Change == "enrolled":
			enrolments++
			what = "enrolment of passkey " + strings.Join(r.Passkeys.IDs, " ")
			err = checkEnrolment(keys, r.Passkeys)
		default:
			return nil
		}
		if err != nil {
			broken++
			sayf(e.stderr, "broken", "%s:%d: seq %d: %s does not verify: %s",
				termsafe.Sanitize(rd.File), rd.Line, rd.Record.Seq, termsafe.Sanitize(what), termsafe.Sanitize(err.Error()))
		}
		return nil
	})
	if err != nil {
		return fail(e.stderr, err)
	}
	fmt.Fprintf(e.stdout, "passkeys: %d approval(s) and %d enrolment(s) checked against %s, %d broken\n", approvals, enrolments, termsafe.Sanitize(path), broken)
	if broken > 0 {
		return exitBroken
	}
	return exitOK
}

func recordedAssertion(pk *audit.Passkey) *passkey.Assertion {
	return &passkey.Assertion{CredentialID: pk.Credential, AuthenticatorData: pk.AuthenticatorData, ClientData: pk.ClientData, Signature: pk.Signature, UserHandle: pk.UserHandle}
}

// checkEnrolment checks an enrolment's record against the enrolled
// passkeys keys: one confirmed by an enrolled passkey holds that
// passkey's assertion over passkey.EnrolChallenge of the new credential
// recorded (its id and public key), which must verify; one confirmed on
// root's terminal holds no signature. Either way the passkey enrolled
// under that id, while it still is, must have the public key recorded.
func checkEnrolment(keys *passkey.File, pc *audit.PasskeyChange) error {
	if len(pc.IDs) != 1 || pc.PublicKey == "" || pc.Creation == "" {
		return errors.New("the record does not name one new credential with its public key and creation challenge")
	}
	pub, err := base64.RawURLEncoding.DecodeString(pc.PublicKey)
	if err != nil {
		return fmt.Errorf("bad public key: %v", err)
	}
	switch {
	case pc.Proof != nil:
		if pc.Proof.Credential != pc.ConfirmedBy {
			return errors.New("its confirming assertion is not by the passkey it names")
		}
		if _, err := keys.VerifyRecorded(recordedAssertion(pc.Proof), passkey.EnrolChallenge(pc.Creation, pc.Name, pc.IDs[0], pub)); err != nil {
			return fmt.Errorf("its confirmation by %s: %w", pc.ConfirmedBy, err)
		}
	case !pc.ConsoleConfirmed:
		return errors.New("it was confirmed neither by an enrolled passkey nor on root's terminal")
	}
	if k := keys.Find(pc.IDs[0]); k != nil && !bytes.Equal(k.Credential.PublicKey, pub) {
		return errors.New("the passkey enrolled under that id has another public key than the one confirmed")
	}
	return nil
}

func cmdAuditShow(_ context.Context, e *env, fl clidoc.Values, _ []string) int {
	stdout, stderr := e.stdout, e.stderr
	id, since := fl.String("id"), fl.String("since")
	var from time.Time
	if since != "" {
		var err error
		if from, err = parseSince(since, e.now()); err != nil {
			errorf(stderr, "--since: %v", err)
			return exitUsage
		}
	}
	names, err := auditFiles(fl.List("file"))
	if err != nil {
		return fail(stderr, err)
	}
	bad := 0
	width := terminalWidth(stdout)
	err = audit.ReadAll(names, func(rd audit.Read) error {
		if rd.Err != nil {
			bad++
			warningf(stderr, "%s:%d: %s", termsafe.Sanitize(rd.File), rd.Line, termsafe.Sanitize(rd.Err.Error()))
			return nil
		}
		r := rd.Record
		if (id != "" && r.ID != id) || r.Time.Before(from) {
			return nil
		}
		_, err := io.WriteString(stdout, wrapRows(formatRecord(r), width))
		return err
	})
	if err != nil {
		return fail(stderr, err)
	}
	if bad > 0 {
		hintf(stderr, "%d record(s) could not be read; run \"rootgate audit verify\"", bad)
		return exitBroken
	}
	return exitOK
}

// parseSince reads --since: an RFC 3339 time, a date (UTC midnight), or a
// duration back from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%q is neither a time (2026-02-13T14:30:00Z, 2026-02-13) nor a duration (90m)", s)
}

// passkeyChangeLines renders a change of the enrolled passkeys with
// line (formatRecord's).
func passkeyChangeLines(pc *audit.PasskeyChange, line func(key, format string, args ...any)) {
	q := termsafe.Sanitize
	what := q(pc.Change) + " " + q(strings.Join(pc.IDs, " "))
	if pc.Name != "" {
		what += " (" + q(pc.Name) + ")"
	}
	line("passkeys", "%s by root", what)
	if pc.Fingerprint != "" {
		line("new key", "fingerprint %s, at %s", q(pc.Fingerprint), q(pc.Origin))
	}
	switch {
	case pc.ConfirmedBy != "":
		line("confirmed", "by enrolled passkey %s", q(pc.ConfirmedBy))
	case pc.ConsoleConfirmed:
		line("confirmed", "on root's terminal, by its fingerprint")
	}
	if who := approvalUIDs(pc.Controllers); who != "" {
		line("session", "controlled by %s", who)
	}
}

// formatRecord renders one record: a heading line (time, seq, kind, id)
// and indented detail lines. Every string from the record is escaped.
func formatRecord(r *audit.Record) string {
	var b strings.Builder
	q := termsafe.Sanitize
	fmt.Fprintf(&b, "%s  #%d  %s", r.Time.UTC().Format(time.RFC3339Nano), r.Seq, q(string(r.Kind)))
	if r.ID != "" {
		fmt.Fprintf(&b, "  %s", q(r.ID))
	}
	b.WriteByte('\n')
	line := func(key, format string, args ...any) {
		fmt.Fprintf(&b, "    %-10s "+format+"\n", append([]any{key + ":"}, args...)...)
	}
	if p := r.Peer; p != nil {
		line("requester", "uid %d gid %d pid %d exe %s", p.UID, p.GID, p.PID, quoteOrNone(p.Exe))
	}
	if rq := r.Request; rq != nil {
		line("action", "%s", q(rq.Action))
		if len(rq.Pipeline) > 0 {
			line("pipeline", "%s", pipelineText(rq.Pipeline))
		}
		runAs := map[bool]string{true: "root (privileged)", false: "the requester"}[rq.Privileged]
		if rq.RunAs != "" {
			runAs = "the account " + q(rq.RunAs) + " (run_as)"
		}
		if rq.RunAsGroup != "" {
			runAs += " with the group " + q(rq.RunAsGroup) + " (run_as_group)"
		}
		line("run as", "%s", runAs)
		if rq.Reason != "" {
			line("reason", "%s", termsafe.Quote(rq.Reason))
		}
		if rq.Cwd != "" {
			line("cwd", "%s", termsafe.Quote(rq.Cwd))
		}
		for _, k := range sortedKeys(rq.Env) {
			line("env", "%s=%s", q(k), termsafe.Quote(rq.Env[k]))
		}
		for _, k := range sortedKeys(rq.EnvSHA256) {
			line("env", "%s=(secret, sha256 %s)", q(k), q(rq.EnvSHA256[k]))
		}
		if rq.StdinSHA256 != "" {
			line("stdin", "%d bytes, sha256 %s", rq.StdinBytes, q(rq.StdinSHA256))
		}
		if rq.Host != "" || rq.Session != "" {
			line("from", "host %s session %s", termsafe.Quote(rq.Host), termsafe.Quote(rq.Session))
		}
		if rq.Timeout != "" {
			line("timeout", "%s", q(rq.Timeout))
		}
		line("line", "sha256 %s", q(rq.LineSHA256))
	}
	if l := r.Line; l != nil {
		line("line", "%d bytes, sha256 %s", l.Bytes, q(l.SHA256))
	}
	if r.Error != "" {
		line("error", "%s", q(r.Error))
	}
	if d := r.Dropped; d != nil {
		line("dropped", "%d rejected record(s) since %s", d.Count, d.Since.UTC().Format(time.RFC3339Nano))
	}
	if p := r.Policy; p != nil {
		if p.OK {
			line("policy", "reloaded: %d rule(s) from %s", p.Rules, q(strings.Join(p.Files, " ")))
		} else {
			line("policy", "reload refused at %s line %d; %d rule(s) stay in force", q(p.File), p.Line, p.Rules)
		}
	}
	if g := r.Grant; g != nil {
		by := "the daemon"
		if g.ApproverUID != nil {
			by = fmt.Sprintf("%s (uid %d)", q(g.Approver), *g.ApproverUID)
		}
		switch r.Kind {
		case audit.KindGrantCreated:
			line("grant", "%s given by %s for uid %d, ends %s", q(g.ID), by, g.RequesterUID, g.Ends.UTC().Format(time.RFC3339))
		default:
			line("grant", "%s %s by %s after %d use(s)", q(g.ID), q(g.Why), by, g.Uses)
		}
		line("pipeline", "%s", pipelineText(g.Pipeline))
		for i, st := range g.Stages {
			exe := termsafe.Quote(st.Path)
			if st.Target != "" {
				exe += " -> " + termsafe.Quote(st.Target)
			}
			line("stage "+strconv.Itoa(i+1), "%s", exe)
		}
		line("run as", "%s in %s", q(g.RunAsUser), termsafe.Quote(g.Cwd))
		line("shape", "sha256 %s", q(g.Shape))
	}
	if pc := r.Passkeys; pc != nil {
		passkeyChangeLines(pc, line)
	}
	if ru := r.Rule; ru != nil {
		by := fmt.Sprintf("%s (uid %d)", q(ru.Approver), ru.ApproverUID)
		if ru.OK {
			line("rule", "saved by %s to %s line %d, for uid %d", by, q(ru.File), ru.Line, ru.RequesterUID)
		} else {
			line("rule", "NOT saved (confirmed by %s, for uid %d)", by, ru.RequesterUID)
		}
		line("text", "%s", q(ru.Text))
		if ru.Error != "" {
			line("why", "%s", q(ru.Error))
		}
	}
	if d := r.Decision; d != nil {
		by := q(d.By)
		if d.ApproverUID != nil {
			by += fmt.Sprintf(" (uid %d)", *d.ApproverUID)
		}
		line("decision", "%s by %s", q(d.Verdict), by)
		if d.Grant != "" {
			line("grant", "%s, the standing grant of %s", q(d.Grant), by)
		}
		if pk := d.Passkey; pk != nil {
			grant := ""
			if pk.Grant > 0 {
				grant = fmt.Sprintf(", with a standing grant of %ds", pk.Grant)
			}
			line("passkey", "%s (%s) signed request hash %s, nonce %s%s", q(pk.Name), q(pk.Credential), q(pk.RequestHash), q(pk.Nonce), grant)
		}
		if d.Group > 1 {
			shown := "this request's"
			if d.GroupOf != "" {
				shown = q(d.GroupOf) + "'s"
			}
			line("group", "one answer for %d identical requests, on %s prompt", d.Group, shown)
		}
		if d.PolicyRule != "" {
			where := fmt.Sprintf("line %d", d.PolicyLine)
			if d.PolicyFile != "" { // records before the file was kept
				where = fmt.Sprintf("%s:%d", q(d.PolicyFile), d.PolicyLine)
			}
			line("rule", "%s: %s", where, q(d.PolicyRule))
		}
		if d.Message != "" {
			line("message", "%s", q(d.Message))
		}
	}
	if ru := r.Run; ru != nil {
		line("run as", "%s (uid %d gid %d)", q(ru.RunAsUser), ru.RunAsUID, ru.RunAsGID)
		for i, st := range ru.Stages {
			exe := termsafe.Quote(st.Path)
			if st.Target != "" {
				exe += " -> " + termsafe.Quote(st.Target)
			}
			line("stage "+strconv.Itoa(i+1), "%s", exe)
		}
		line("cwd", "%s", termsafe.Quote(ru.Cwd))
		line("limit", "%s", q(ru.Timeout))
	}
	if res := r.Result; res != nil {
		line("duration", "%s", q(res.Duration))
		for i, st := range res.Stages {
			sig := ""
			if st.Signal != "" {
				sig = " (" + q(st.Signal) + ")"
			}
			line("stage "+strconv.Itoa(i+1), "exit %d%s after %s; stderr %d bytes%s sha256 %s", st.ExitCode, sig, q(st.Duration), st.StderrBytes, truncated(st.StderrTruncated), q(st.StderrSHA256))
		}
		line("stdout", "%d bytes%s sha256 %s", res.StdoutBytes, truncated(res.StdoutTruncated), q(res.StdoutSHA256))
		if u := res.Usage; u != nil {
			us := func(n int64) time.Duration { return time.Duration(n) * time.Microsecond }
			mem := ""
			if u.MemoryPeak != nil {
				mem = fmt.Sprintf("; memory peak %d bytes", *u.MemoryPeak)
			}
			line("usage", "cpu %s (user %s, system %s)%s", us(u.CPUUsec), us(u.UserUsec), us(u.SystemUsec), mem)
		}
	}
	if r.PrevFile != "" {
		line("follows", "%s", q(r.PrevFile))
	}
	if dm := r.Daemon; dm != nil {
		line("daemon", "rootgated %s, pid %d", q(dm.Version), dm.PID)
	}
	return b.String()
}

// terminalWidth is the width in columns of the terminal w is, or 0.
func terminalWidth(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}

// contMark starts each row after the first of a line wrapped by
// wrapRows: indented deeper than any label, so that no row a requester's
// text fills can look like a record's heading or one of its lines.
// shortMark replaces it on a terminal too narrow for it and 8 cells more:
// a row starting with an arrow is no heading or line of a record either.
const (
	contMark  = "              ↳ "
	shortMark = "↳ "
)

// wrapRows cuts each line of s longer than width cells ([termsafe.Cells])
// into rows, the rows after the first starting with contMark (shortMark
// below 25 columns, no mark below 5, where a row has no room for a label
// anyway); width 0 leaves s as it is. No row is wider than width, but for
// a rune of 2 cells on a terminal of 1 column. A line the terminal
// wrapped itself would start a row with whatever the requester padded
// its text to put there.
func wrapRows(s string, width int) string {
	if width <= 0 {
		return s
	}
	mark := contMark
	switch {
	case width < termsafe.Cells(shortMark)+2:
		mark = ""
	case width < termsafe.Cells(contMark)+8:
		mark = shortMark
	}
	var b strings.Builder
	for line := range strings.Lines(s) {
		line = strings.TrimSuffix(line, "\n")
		w := width
		for {
			head, tail := termsafe.Cut(line, w)
			if head == "" {
				// One rune of 2 cells on 1 column: shown as it is.
				_, n := utf8.DecodeRuneInString(line)
				head, tail = line[:n], line[n:]
			}
			b.WriteString(head)
			b.WriteByte('\n')
			if tail == "" {
				break
			}
			b.WriteString(mark)
			line, w = tail, width-termsafe.Cells(mark)
		}
	}
	return b.String()
}

func truncated(t bool) string {
	if t {
		return " (truncated)"
	}
	return ""
}

func quoteOrNone(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return termsafe.Quote(s)
}

func pipelineText(p [][]string) string {
	stages := make([]string, len(p))
	for i, argv := range p {
		words := make([]string, len(argv))
		for j, w := range argv {
			words[j] = termsafe.Quote(w)
		}
		stages[i] = strings.Join(words, " ")
	}
	return strings.Join(stages, " | ")
}

func sortedKeys(m map[string]string) []string { return slices.Sorted(maps.Keys(m)) }

// approvalUIDs lists the uids but root, for a record's controller set.
func approvalUIDs(uids []int) string {
	var out []string
	for _, u := range uids {
		if u != 0 {
			out = append(out, "uid "+strconv.Itoa(u))
		}
	}
	return strings.Join(out, ", ")
}
