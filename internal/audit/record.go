// Package audit writes and checks rootgate's audit trail: an append-only
// file of JSON lines, one [Record] per step of a request's life, each
// carrying a sequence number, the time, the SHA-256 of the record before it
// and its own SHA-256, so that a changed, removed, reordered or cut record
// breaks the chain where it happened.
//
// The daemon opens the file with [Open] and appends with [Log.Append],
// which writes, syncs and only then returns; [Verify] checks a file and its
// rotated predecessors ([Files] finds them); [ReadAll] reads records for
// display. A record's wire form is its JSON encoding without the hash
// field, with `,"hash":"HEX"}` put in place of the final `}`, where HEX is
// the SHA-256 of the encoding without it.
//
// The format is documented for operators in docs/audit.md.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
)

// Kind names what a record records.
type Kind string

// Record kinds. The first three are about the log itself, policy_reload
// about the daemon; the rest follow a request's life in order.
const (
	KindGenesis Kind = "genesis" // the first record of a new log; Prev is its random genesis value
	KindRotated Kind = "rotated" // the first record of a file after rotation; chains to the last record of PrevFile
	KindOpened  Kind = "opened"  // a daemon opened the log to append to it
	// KindPolicyReload: the daemon read its policy again; Policy says
	// whether it took the new one, Error why not.
	KindPolicyReload Kind = "policy_reload"
	// KindGrantCreated and KindGrantRevoked: a person gave a standing
	// grant (with the approval of request ID), or one was revoked (by a
	// person, or when the daemon found it ended); Grant says which. A
	// request a grant decides has a decided record whose Decision.Grant
	// names it.
	KindGrantCreated Kind = "grant_created"
	KindGrantRevoked Kind = "grant_revoked"
	// KindRuleSaved: a person confirmed a policy rule with the approval of
	// request ID; Rule says where it was written, or (OK false, Error) why
	// it was not, or was taken out again.
	KindRuleSaved Kind = "rule_saved"
	// KindPasskey: root enrolled, removed or imported passkeys; Passkeys
	// says which, and which enrolled passkey confirmed an enrolment.
	KindPasskey Kind = "passkeys_changed"

	KindReceived  Kind = "received"  // a request decoded; Peer and Request
	KindRejected  Kind = "rejected"  // a request refused by a check; Error
	KindDecided   Kind = "decided"   // the policy or a person decided; Decision
	KindStarted   Kind = "started"   // the run is about to start; Run
	KindFinished  Kind = "finished"  // the run ended by itself; Result
	KindTimedOut  Kind = "timed_out" // the run passed its time limit and was killed; Result
	KindCancelled Kind = "cancelled" // the requester went away and the run was killed; Result
	KindKilled    Kind = "killed"    // the daemon stopped and killed the run; Result
	KindFailed    Kind = "failed"    // the request ended in an error after it was decided (the run could not start, ...); Error
	KindDropped   Kind = "dropped"   // rejected records of one uid left out past the rate limit; Peer (uid) and Dropped
	// KindOrphaned: a run that a daemon which did not stop cleanly left
	// without an end, found by the next daemon at its start: its started
	// record without an end in the trail (see [Unfinished]), one record
	// per run. ID is the request id; how the run ended is unknown; Error
	// says so, and whether the run's cgroup was found and killed.
	KindOrphaned Kind = "orphaned"
)

// Record is one line of the audit log. Seq, Time, Prev and Hash are set by
// [Log.Append]; the other fields by the caller, only those of its Kind.
type Record struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
	// Prev is the previous record's Hash, or for a genesis record the
	// log's genesis value.
	Prev string `json:"prev"`
	Kind Kind   `json:"kind"`
	ID   string `json:"id,omitempty"` // the request's id

	Peer     *Peer     `json:"peer,omitempty"`
	Request  *Request  `json:"request,omitempty"`
	Error    string    `json:"error,omitempty"`
	Decision *Decision `json:"decision,omitempty"`
	Run      *Run      `json:"run,omitempty"`
	Result   *Result   `json:"result,omitempty"`
	// Line is the size and SHA-256 of the raw line of a request rejected
	// before it was received: the line itself is never recorded.
	Line *Line `json:"line,omitempty"`
	// Dropped counts the rejected records left out, on dropped records.
	Dropped *Dropped `json:"dropped,omitempty"`
	// PrevFile names (base name) the file a rotated record chains to.
	PrevFile string `json:"prev_file,omitempty"`
	// Daemon is the version and identity of the daemon writing, on
	// opened records.
	Daemon *Daemon `json:"daemon,omitempty"`
	// Policy is the outcome of a policy reload, on policy_reload records.
	Policy *PolicyLoad `json:"policy,omitempty"`
	// Grant is a standing grant, on grant_created and grant_revoked
	// records.
	Grant *Grant `json:"grant,omitempty"`
	// Rule is a policy rule saved from the prompt, on rule_saved records.
	Rule *RuleSaved `json:"rule,omitempty"`
	// Passkeys is a change of the enrolled passkeys, on passkeys_changed
	// records.
	Passkeys *PasskeyChange `json:"passkeys,omitempty"`

	// Hash is the SHA-256 of the record's line without its hash field.
	Hash string `json:"-"`
	// Size is the length of the record's line, its newline included,
	// once [Log.Append] (or its variants) wrote it.
	Size int `json:"-"`
}

// Peer is the requesting process as the kernel named it at connect.
type Peer struct {
	UID    int      `json:"uid"`
	GID    int      `json:"gid"`
	PID    int      `json:"pid"`
	Groups []uint32 `json:"groups,omitempty"`
	Exe    string   `json:"exe,omitempty"`
	// ExeOwnNamespace: the peer was not in the daemon's mount namespace,
	// so Exe is a path in its own, its word rather than a file here.
	ExeOwnNamespace bool `json:"exe_own_namespace,omitempty"`
}

// Request is a request as received, without its stdin's content.
type Request struct {
	LineSHA256   string     `json:"line_sha256"` // of the raw request line, without its newline
	IDGiven      bool       `json:"id_given"`
	Action       string     `json:"action"`
	Host         string     `json:"host,omitempty"`
	Session      string     `json:"session,omitempty"`
	Time         string     `json:"time,omitempty"` // as sent
	Reason       string     `json:"reason,omitempty"`
	Pipeline     [][]string `json:"pipeline,omitempty"`
	Privileged   bool       `json:"privileged"`
	ForwardAgent bool       `json:"forward_agent,omitempty"`
	Cwd          string     `json:"cwd,omitempty"`
	// Env holds the variables whose values are recorded; EnvSHA256 the
	// SHA-256 (hex) of the values of those named like secrets.
	Env         map[string]string `json:"env,omitempty"`
	EnvSHA256   map[string]string `json:"env_sha256,omitempty"`
	StdinBytes  int               `json:"stdin_bytes"`
	StdinSHA256 string            `json:"stdin_sha256,omitempty"` // absent when there is no stdin
	Timeout     string            `json:"timeout,omitempty"`      // the run time limit asked for
	Version     string            `json:"version,omitempty"`      // the client's
	// Check: a check request, evaluated against the policy and never
	// asked about or run.
	Check bool `json:"check,omitempty"`
	// RunAs and RunAsGroup are the account and group the request named
	// to run as, as sent ("" when it named none); the started record's
	// run holds the uid, gid and groups they resolved to.
	RunAs      string `json:"run_as,omitempty"`
	RunAsGroup string `json:"run_as_group,omitempty"`
}

// Line describes a raw request line without holding it.
type Line struct {
	Bytes  int    `json:"bytes"`  // without the newline
	SHA256 string `json:"sha256"` // of the line without its newline
}

// Dropped is how many rejected records of one uid were left out, and
// since when.
type Dropped struct {
	Count int       `json:"count"`
	Since time.Time `json:"since"`
}

// Decision is who or what decided, and what.
type Decision struct {
	// Verdict is allow, deny, timeout (nobody decided in time), withdrawn
	// (the request went away first) or unavailable (nobody could be asked).
	Verdict string `json:"verdict"`
	By      string `json:"by"` // e.g. "policy /etc/rootgate/policy:3", "approver root on pts/2", "timeout", "no approver"
	Message string `json:"message,omitempty"`
	// PolicyFile, PolicyLine and PolicyRule are the rule that decided,
	// if one did: its file (the policy file or a drop-in), line and text.
	PolicyFile string `json:"policy_file,omitempty"`
	PolicyLine int    `json:"policy_line,omitempty"`
	PolicyRule string `json:"policy_rule,omitempty"`
	// ApproverUID and Approver (user and terminal) are the person who
	// decided, if one did.
	ApproverUID *int   `json:"approver_uid,omitempty"`
	Approver    string `json:"approver,omitempty"`
	// UnsafeSelfApproval is set when that person was only asked because
	// of rootgated --unsafe-self-approval: the requester's uid could
	// control the approver's terminal or session and type the answer.
	UnsafeSelfApproval bool `json:"unsafe_self_approval,omitempty"`
	// Grant is the id of the standing grant that decided, if one did;
	// Approver and ApproverUID are then who gave it.
	Grant string `json:"grant,omitempty"`
	// Group, when more than 1, says one prompt decided that many
	// identical requests at once; GroupOf is the id of the request whose
	// prompt was shown, when it is another.
	Group   int    `json:"group,omitempty"`
	GroupOf string `json:"group_of,omitempty"`
	// Passkey is the passkey assertion that approved, when a passkey
	// did: `rootgate audit verify --passkeys` checks it again.
	Passkey *Passkey `json:"passkey,omitempty"`
}

// Passkey is a passkey's assertion as the daemon checked it: the
// credential, what its challenge was made of (passkey.Challenge: the
// prompt's request hash, the nonce, the grant signed for) and the signed
// data, base64url.
type Passkey struct {
	Credential        string `json:"credential"`
	Name              string `json:"name"`
	RequestHash       string `json:"request_hash,omitempty"`
	Nonce             string `json:"nonce,omitempty"`
	Grant             int64  `json:"grant_seconds,omitempty"`
	GrantRunsAnything bool   `json:"grant_runs_anything,omitempty"`
	AuthenticatorData string `json:"authenticator_data"`
	ClientData        string `json:"client_data"`
	Signature         string `json:"signature"`
	UserHandle        string `json:"user_handle,omitempty"`
}

// PasskeyChange is a change of the enrolled passkeys.
type PasskeyChange struct {
	Change string   `json:"change"` // enrolled, removed, imported
	IDs    []string `json:"ids"`
	Name   string   `json:"name,omitempty"`
	// ConfirmedBy is the enrolled passkey whose assertion (Proof)
	// confirmed an enrolment, over passkey.EnrolChallenge(Creation, Name,
	// IDs[0], PublicKey); empty for a first one, which root confirmed on
	// the terminal of the enrolling process (ConsoleConfirmed).
	ConfirmedBy      string   `json:"confirmed_by,omitempty"`
	Proof            *Passkey `json:"proof,omitempty"`
	ConsoleConfirmed bool     `json:"console_confirmed,omitempty"`
	// An enrolment's creation challenge (base64url) and page origin, and
	// the new passkey's public key (COSE, base64url), fingerprint
	// (passkey.Fingerprint) and authenticator AAGUID (when it gave one).
	Creation    string `json:"creation,omitempty"`
	Origin      string `json:"origin,omitempty"`
	PublicKey   string `json:"public_key,omitempty"`
	Fingerprint string `json:"fingerprint,omitempty"`
	AAGUID      string `json:"aaguid,omitempty"`
	// Controllers are the uids that could control the session of the
	// root process that asked.
	Controllers []int `json:"controllers,omitempty"`
}

// Grant is a standing grant: requests from RequesterUID whose shape has
// the SHA-256 Shape (the resolved files by identity, argv, env, run-as,
// cwd, stdin, privileged, forward_agent) run without asking until Ends.
type Grant struct {
	ID           string     `json:"id"`
	RequesterUID int        `json:"requester_uid"`
	Pipeline     [][]string `json:"pipeline"`
	Stages       []Stage    `json:"stages"`
	RunAsUser    string     `json:"run_as_user"`
	Cwd          string     `json:"cwd"`
	Shape        string     `json:"shape_sha256"`
	Ends         time.Time  `json:"ends"`
	// ApproverUID and Approver gave the grant (on grant_created) or
	// revoked it (on grant_revoked; absent when it ended by itself).
	ApproverUID *int   `json:"approver_uid,omitempty"`
	Approver    string `json:"approver,omitempty"`
	Uses        int    `json:"uses"`
	// Why, on grant_revoked: "revoked" or "ended".
	Why string `json:"why,omitempty"`
}

// Run is what is about to run.
type Run struct {
	RunAsUID  uint32   `json:"run_as_uid"`
	RunAsGID  uint32   `json:"run_as_gid"`
	RunAsUser string   `json:"run_as_user"`
	Groups    []uint32 `json:"groups,omitempty"`
	Stages    []Stage  `json:"stages"`
	Cwd       string   `json:"cwd"`
	Timeout   string   `json:"timeout"`
	Agent     bool     `json:"forward_agent,omitempty"`
	// DaemonPID is the pid of the daemon that started the run: the
	// next daemon tells by it a run whose end went unrecorded (see
	// [Unfinished]).
	DaemonPID int `json:"daemon_pid,omitempty"`
}

// Stage is one resolved executable: the path resolved and, when it
// differs, the real path of the file that runs (every symlink resolved).
type Stage struct {
	Path   string `json:"path"`
	Target string `json:"target,omitempty"`
	// SHA256 is the SHA-256 of the file's content the daemon captured
	// when the request came, and ran, when someone other than root may
	// change the file; absent for a file only root can change.
	SHA256 string `json:"sha256,omitempty"`
}

// Result is how a run ended. Output is never recorded, only its size and
// the SHA-256 of what was captured (and sent to the requester).
type Result struct {
	Duration        string        `json:"duration"`
	Stages          []StageResult `json:"stages"`
	StdoutBytes     int64         `json:"stdout_bytes"`
	StdoutTruncated bool          `json:"stdout_truncated"`
	StdoutSHA256    string        `json:"stdout_sha256"`
	// Usage is what the run's cgroup counted, when it had one.
	Usage *Usage `json:"usage,omitempty"`
}

// Usage is what a run's cgroup counted: its CPU time in microseconds, and
// its memory's peak in bytes where the memory controller counted it (the
// usage of the run's answer, docs/protocol.md).
type Usage struct {
	CPUUsec    int64  `json:"cpu_usec"`
	UserUsec   int64  `json:"user_usec"`
	SystemUsec int64  `json:"system_usec"`
	MemoryPeak *int64 `json:"memory_peak,omitempty"`
}

// StageResult is how one stage ended.
type StageResult struct {
	ExitCode        int    `json:"exit_code"`
	Signal          string `json:"signal,omitempty"`
	Duration        string `json:"duration"`
	StderrBytes     int64  `json:"stderr_bytes"`
	StderrTruncated bool   `json:"stderr_truncated"`
	StderrSHA256    string `json:"stderr_sha256"`
}

// PolicyLoad is what a policy reload did. On success the new policy is
// in force from the next request on; on failure the one before stays in
// force, and File and Line (when known) point at the fault.
type PolicyLoad struct {
	OK    bool     `json:"ok"`
	Files []string `json:"files,omitempty"` // read, in order, on success
	Rules int      `json:"rules"`           // in force now
	File  string   `json:"file,omitempty"`  // the file refused or that does not parse
	Line  int      `json:"line,omitempty"`  // the first line that does not parse
}

// RuleSaved is a policy rule a person saved from the prompt. On success
// (OK) the rule is line Line of File and the policy was reloaded with it;
// otherwise Error says why the file was left (or put back) as it was.
type RuleSaved struct {
	OK           bool   `json:"ok"`
	File         string `json:"file"`
	Line         int    `json:"line,omitempty"`
	Text         string `json:"text"`
	ApproverUID  int    `json:"approver_uid"`
	Approver     string `json:"approver"` // "USER on WHERE"
	RequesterUID int    `json:"requester_uid"`
	Error        string `json:"error,omitempty"`
}

// Daemon identifies the process writing the log. A pid alone names a
// process only while it lives: after a reboot or once pids wrap, another
// process (the requester's own, if it forks until it gets that pid) can
// hold it. BootID and Start tell that process from the daemon (see
// [Running]); records written before they were added lack them.
type Daemon struct {
	Version string `json:"version"`
	PID     int    `json:"pid"`
	// BootID is the kernel's boot id (/proc/sys/kernel/random/boot_id)
	// when the daemon started.
	BootID string `json:"boot_id,omitempty"`
	// Start is the process's start time, in clock ticks since boot
	// (field 22 of /proc/PID/stat).
	Start uint64 `json:"start_time,omitempty"`
}

// SHA256 is the hex SHA-256 of b.
func SHA256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// IsSecretName reports whether an environment variable's value must not be
// recorded: its name contains TOKEN, PASSWORD, SECRET or KEY, in any case.
func IsSecretName(name string) bool {
	u := strings.ToUpper(name)
	for _, w := range []string{"TOKEN", "PASSWORD", "SECRET", "KEY"} {
		if strings.Contains(u, w) {
			return true
		}
	}
	return false
}

// SplitEnv splits env into the values that may be recorded and the
// SHA-256 of those that may not ([IsSecretName]). Either may be nil.
func SplitEnv(env map[string]string) (plain, hashed map[string]string) {
	for k, v := range env {
		if IsSecretName(k) {
			if hashed == nil {
				hashed = map[string]string{}
			}
			hashed[k] = SHA256([]byte(v))
			continue
		}
		if plain == nil {
			plain = map[string]string{}
		}
		plain[k] = v
	}
	return plain, hashed
}

// hashSuffix is what follows a record's body in its line: `,"hash":"` +
// 64 hex digits + `"}`.
const (
	hashKey    = `,"hash":"`
	hashSuffix = len(hashKey) + 2*sha256.Size + len(`"}`)
)

// encode makes r's line (without the newline) and sets r.Hash. '<', '>'
// and '&' are written as themselves: escaped, as json.Marshal does for
// HTML, a request's arguments made of them take six times their size, and
// a requester's records would fill the log (and rotate older ones out of
// it) six times as fast.
func encode(r *Record) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("encode record: %w", err)
	}
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	r.Hash = SHA256(body)
	line := make([]byte, 0, len(body)+hashSuffix+1) // and the newline the writer adds
	line = append(line, body[:len(body)-1]...)
	line = append(line, hashKey...)
	line = append(line, r.Hash...)
	line = append(line, `"}`...)
	return line, nil
}

// head is what verification needs of a record.
type head struct {
	Seq      *uint64    `json:"seq"`
	Time     *time.Time `json:"time"`
	Prev     *string    `json:"prev"`
	Kind     Kind       `json:"kind"`
	PrevFile string     `json:"prev_file"`
}

// parse checks one line (without its newline) on its own: valid JSON, the
// hash field last and matching the rest, the chain fields present. It
// returns the record's head and hash.
func parse(line []byte) (head, string, error) {
	var h head
	if !json.Valid(line) {
		return h, "", errors.New("not a valid JSON record")
	}
	n := len(line)
	if n < hashSuffix+2 || !bytes.Equal(line[n-hashSuffix:n-hashSuffix+len(hashKey)], []byte(hashKey)) || !bytes.HasSuffix(line, []byte(`"}`)) {
		return h, "", errors.New(`record does not end with its "hash" field`)
	}
	sum := string(line[n-hashSuffix+len(hashKey) : n-2])
	if !isHex(sum) {
		return h, "", errors.New("hash is not 64 lowercase hex digits")
	}
	body := make([]byte, 0, n-hashSuffix+1)
	body = append(body, line[:n-hashSuffix]...)
	body = append(body, '}')
	if SHA256(body) != sum {
		return h, "", errors.New("hash does not match the record's content: the record was changed")
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return h, "", fmt.Errorf("malformed record: %v", err)
	}
	switch {
	case h.Seq == nil:
		return h, "", errors.New("record has no seq")
	case h.Time == nil:
		return h, "", errors.New("record has no time")
	case h.Prev == nil || !isHex(*h.Prev):
		return h, "", errors.New("record has no valid prev")
	case h.Kind == "":
		return h, "", errors.New("record has no kind")
	}
	return h, sum, nil
}

// decode parses a line into a full Record, checking its hash.
func decode(line []byte) (*Record, error) {
	_, sum, err := parse(line)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("malformed record: %v", err)
	}
	r.Hash = sum
	return &r, nil
}

func isHex(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for _, c := range s {
		if !unicode.Is(unicode.ASCII_Hex_Digit, c) || unicode.IsUpper(c) {
			return false
		}
	}
	return true
}
