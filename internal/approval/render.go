package approval

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/termsafe"
)

// Rendering rules. Everything in a Prompt except the daemon's own numbers
// comes from the requester, or from a file system the requester may have
// shaped (a resolved path, a symlink target, /proc/PID/exe), so every such
// string goes through [termsafe.Quote] or [termsafe.Sanitize] before it
// reaches a person. Both escape every rune that is not printable (C0 and C1
// controls, DEL, format characters such as zero-width and bidi controls,
// separators other than the ASCII space, unassigned code points) and every
// byte that is not valid UTF-8, so no terminal control sequence can survive and nothing displayed is
// invisible. Nothing is shortened: the caller decides how to show a long text.

// StdinPreviewBytes is how much of the request's stdin Render shows.
const StdinPreviewBytes = 200

// RequesterMark starts every line of the requester's own words (the id,
// time, host, session, client version and reason it sent, and the lines of
// its stdin) in a rendered request. No line of the daemon's own starts with
// it, so a requester's text cannot pass for the daemon's.
const RequesterMark = "  ┊ "

// Render returns the full description of a request that an approver is
// shown: first the daemon's own facts about who asks (user, uid, gid, pid,
// executable, per the kernel); then, each line marked with [RequesterMark],
// what the requester says about itself (id, time, host, session, client
// version, reason), none of which the daemon checked; then what would run
// (run-as user, loudly when root; working directory; environment; stdin
// size, SHA-256 and a preview; SSH agent forwarding; time limit) and last,
// every stage's full argv quoted shell-style with its resolved path and,
// when that differs, the real path of the file that runs.
//
// A prompt with SelfApproval set starts with [SelfApprovalBanner].
//
// The text is plain: no ANSI sequences, no control character other than the
// '\n' that ends each line, no invisible rune. Nothing is truncated except
// the stdin preview, which says how many bytes it leaves out.
func Render(p *Prompt) string { return render(p, false) }

// RenderWhole is [Render] with the whole of stdin, one numbered line of the
// input per line (each quoted), instead of a preview: what a terminal
// approver pages through.
func RenderWhole(p *Prompt) string { return render(p, true) }

func render(p *Prompt, wholeStdin bool) string {
	var b page
	b.head(p)
	b.field("Requester:", DescribeRequester(&p.Requester)+", per the kernel")
	b.requesterSays(p)
	b.WriteString("What would run:\n")
	b.field("Run as:", describeRunAs(p))
	if p.ApproverPower != "" {
		b.more("which may approve rootgate requests: " + termsafe.Sanitize(p.ApproverPower))
	}
	b.where(p)
	b.stdin(p.Stdin, wholeStdin)
	b.limits(p)
	b.stages(p.Stages, wholeStdin)
	b.tail(p)
	return b.String()
}

// page is a rendered prompt being written, with its three kinds of
// line: a field of the daemon's, its continuation, and the requester's
// own words.
type page struct{ strings.Builder }

func (b *page) field(label, value string) {
	fmt.Fprintf(b, "  %-13s%s\n", label, value)
}

func (b *page) more(value string) {
	fmt.Fprintf(b, "  %-13s%s\n", "", value)
}

func (b *page) says(label, value string) {
	fmt.Fprintf(b, "%s%-8s %s\n", RequesterMark, label, value)
}

// head writes the loud lines that come before all else and the title.
func (b *page) head(p *Prompt) {
	if p.Named != nil {
		b.WriteString(RunAsLine(p) + "\n")
	}
	if p.ApproverPower != "" {
		b.WriteString(ApproverPowerLine(p) + "\n")
	}
	b.WriteString("rootgate approval request\n")
	if p.SelfApproval {
		b.WriteString(SelfApprovalBanner)
	}
	if p.Group > 1 {
		b.WriteString(GroupBanner(p.Group) + "\n")
		b.WriteString("!!! they are the same in all shown below under Requester (but its pid) and What would run; their\n" +
			"!!! id, time, host, session, client and reason may differ (the first one's are shown)\n")
	}
}

// requesterSays writes what the requester says of itself, each line
// marked as its own.
func (b *page) requesterSays(p *Prompt) {
	b.WriteString("The requester says (its own words, not checked by rootgated):\n")
	b.says("id:", noneIfEmpty(termsafe.Sanitize(p.ID)))
	t := "(none)"
	if !p.Time.IsZero() {
		t = p.Time.Format(time.RFC3339Nano)
	}
	b.says("time:", t)
	b.says("host:", noneIfEmpty(termsafe.Sanitize(p.Host)))
	b.says("session:", noneIfEmpty(termsafe.Sanitize(p.Session)))
	b.says("client:", noneIfEmpty(termsafe.Sanitize(p.Version)))
	if p.Reason == "" {
		b.says("reason:", "(none given)")
		return
	}
	label := "reason:"
	for line := range strings.SplitSeq(p.Reason, "\n") {
		b.says(label, termsafe.Sanitize(line))
		label = ""
	}
}

// where writes the run's working directory and environment.
func (b *page) where(p *Prompt) {
	cwd := "/"
	if p.Cwd != "" {
		cwd = termsafe.Quote(p.Cwd)
	}
	b.field("Directory:", cwd)
	if p.CwdOthers {
		b.more("WARNING: others than root may change the files in it: what the run reads from there is theirs")
	}
	if len(p.Env) == 0 {
		b.field("Environment:", "only PATH, HOME, USER, LOGNAME, SHELL of the run-as user")
		return
	}
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		kv := termsafe.Quote(k) + "=" + termsafe.Quote(p.Env[k])
		if i == 0 {
			b.field("Environment:", kv)
		} else {
			b.more(kv)
		}
	}
}

// stdin writes the run's stdin: its size and SHA-256, and a preview of
// it, or all of it a quoted line each.
func (b *page) stdin(stdin []byte, whole bool) {
	if len(stdin) == 0 {
		b.field("Stdin:", "none (/dev/null)")
		return
	}
	sum := sha256.Sum256(stdin)
	if whole {
		lines := strings.Split(string(stdin), "\n")
		end := "ends with a newline"
		if lines[len(lines)-1] == "" {
			lines = lines[:len(lines)-1]
		} else {
			end = "no newline at the end"
		}
		b.field("Stdin:", fmt.Sprintf("%d bytes, SHA-256 %s", len(stdin), hex.EncodeToString(sum[:])))
		b.more(fmt.Sprintf("all of it below: %d lines, each quoted (%s)", len(lines), end))
		for i, line := range lines {
			b.says(fmt.Sprintf("stdin %d:", i+1), termsafe.Quote(line))
		}
		return
	}
	b.field("Stdin:", fmt.Sprintf("%d bytes, SHA-256 %s", len(stdin), hex.EncodeToString(sum[:])))
	n := stdinPreviewLen(stdin)
	if n == len(stdin) {
		b.more("all of it: " + termsafe.Quote(string(stdin)))
	} else {
		b.more(fmt.Sprintf("first %d bytes: %s", n, termsafe.Quote(string(stdin[:n]))))
		b.more(fmt.Sprintf("... and %d more bytes not shown", len(stdin)-n))
	}
}

// limits writes SSH agent forwarding, the time limit and other limits.
func (b *page) limits(p *Prompt) {
	if p.ForwardAgent {
		b.field("SSH agent:", "FORWARDED: the run may use the operator's SSH agent (your keys) while it runs")
		// Keys that log in to an account that may approve (the
		// operator's own, root) let the run approve what follows.
		b.more("!!! where your keys log in to an account that may approve rootgate requests (yours, root):")
		b.more("!!! approving this approves root")
	} else {
		b.field("SSH agent:", "not forwarded")
	}
	if p.RunTimeout > 0 {
		b.field("Time limit:", DisplaySeconds(p.RunTimeout))
	} else {
		b.field("Time limit:", "none")
	}
	if p.Limits != "" {
		b.field("Limits:", termsafe.Sanitize(p.Limits))
	}
}

// stages writes every stage: its argv, its executable, and its captured
// content.
func (b *page) stages(stages []Stage, whole bool) {
	switch len(stages) {
	case 0:
		b.WriteString("Command: (none)\n")
	case 1:
		b.WriteString("Command (1 stage):\n")
	default:
		fmt.Fprintf(b, "Pipeline (%d stages; each stage's output is the next one's input):\n", len(stages))
	}
	for i, s := range stages {
		fmt.Fprintf(b, "  [%d] %s\n", i+1, QuoteArgv(s.Argv))
		fmt.Fprintf(b, "      executable: %s\n", describePath(s))
		if c := s.Content; c != nil {
			renderContent(&b.Builder, c, whole)
		}
		if s.Uncaptured {
			b.WriteString("      content:    NOT CAPTURED: neither the run's account nor the requester may read the file,\n")
			b.WriteString("                  so what runs is what it holds when the run starts, which others than root\n")
			b.WriteString("                  may change after you approve: this prompt cannot show it\n")
		}
	}
}

// tail writes the warning of an interpreter found by its path, and the
// hint.
func (b *page) tail(p *Prompt) {
	if p.NoGrant != "" {
		// The kernel finds an interpreter by its path when the run
		// starts, and reads a file not captured then: what the person
		// approves is not all that runs.
		b.field("WARNING:", termsafe.Sanitize(p.NoGrant)+": the kernel runs whatever is there when the run starts, which this prompt cannot show")
	}
	if p.Hint != "" {
		label := "Hint:"
		for line := range strings.SplitSeq(p.Hint, "\n") {
			b.field(label, termsafe.Sanitize(line))
			label = ""
		}
	}
}

// renderContent writes what a prompt says of a stage's captured file: its
// size and SHA-256, that exactly this runs, and, for a script, its text
// (the first lines as a preview, or all that is kept in a pager) on lines
// marked as the requester's, since the requester may have written it.
func renderContent(b *strings.Builder, c *Content, whole bool) {
	fmt.Fprintf(b, "      content:    %d bytes, SHA-256 %s, read when the request came:\n", c.Size, c.SHA256)
	b.WriteString("                  exactly this runs, whatever is done to the file from now on\n")
	if c.Beside != "" {
		fmt.Fprintf(b, "      WARNING:    others than root may change the files beside it in %s:\n", termsafe.Quote(c.Beside))
		b.WriteString("                  what it reads or runs from there is theirs, after you approve too\n")
	}
	if len(c.Text) == 0 {
		return
	}
	lines := strings.Split(string(c.Text), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	shown := len(lines)
	if !whole {
		shown = min(shown, contentPreviewLines)
	}
	for i, line := range lines[:shown] {
		fmt.Fprintf(b, "%s%-8s %s\n", RequesterMark, fmt.Sprintf("file %d:", i+1), termsafe.Quote(line))
	}
	switch {
	case shown < len(lines) || !c.Whole && !whole:
		fmt.Fprintf(b, "      (the rest of the file, %d bytes in all, is in the pager)\n", c.Size)
	case !c.Whole:
		fmt.Fprintf(b, "      (%d bytes of it shown; the rest, to %d bytes, is not: read the file's SHA-256)\n", len(c.Text), c.Size)
	}
}

// contentPreviewLines is how many lines of a captured script the short
// form of a prompt shows.
const contentPreviewLines = 5

// describePath is a stage's resolved executable for display.
func describePath(s Stage) string {
	path := "(not resolved)"
	if s.Path != "" {
		path = termsafe.Quote(s.Path)
	}
	if s.Target != "" {
		path += ", which is the file " + termsafe.Quote(s.Target)
	}
	if s.Is != "" {
		path += ", the same program as " + termsafe.Quote(s.Is)
	}
	return path
}

// QuoteArgv is argv for display, each word as [termsafe.Quote] gives it.
func QuoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = termsafe.Quote(a)
	}
	return strings.Join(q, " ")
}

// DescribeRequester is the requester as the kernel reported it, for display:
// user name (or uid), uid, gid, pid and executable.
func DescribeRequester(r *Requester) string {
	user := termsafe.Sanitize(r.User)
	if user == "" {
		user = strconv.Itoa(r.UID)
	}
	exe := "unknown"
	switch {
	case r.Exe != "" && r.ExeOwnNamespace:
		exe = termsafe.Quote(r.Exe) + ", a path in its own mount namespace: its own word, not a file here"
	case r.Exe != "":
		exe = termsafe.Quote(r.Exe)
	case r.ExeOwnNamespace:
		exe = "unknown, in its own mount namespace"
	}
	return fmt.Sprintf("%s (uid %d, gid %d, pid %d, exe %s)", user, r.UID, r.GID, r.PID, exe)
}

// RunsAsRoot reports whether the prompt's run would have root's rights.
func RunsAsRoot(p *Prompt) bool {
	if p.Named != nil {
		return p.Named.UID == 0
	}
	return p.Privileged || p.RunAs == "root"
}

// RunAsLine is the line that heads the prompt of a request naming the
// account or group it runs as, in capitals so that no approver takes it
// for an ordinary run as root or as the requester:
// "RUN AS postgres (uid 108, gid 115)", with " WITH GROUP staff (gid 50)"
// for a run_as_group. "" when the request names neither.
func RunAsLine(p *Prompt) string {
	if p.Named == nil {
		return ""
	}
	line := "RUN AS " + namedIdentity(p)
	if p.Named.UID == 0 {
		line += "   *** PRIVILEGED: ROOT ***"
	}
	return line
}

// ApproverPowerLine is the loud line of a prompt whose run may approve
// rootgate requests ([Prompt.ApproverPower]), saying what approving it
// means: "!!! runs as alice, who may approve rootgate requests:
// approving this approves root". "" for any other prompt. The "Run as"
// field says why the account may approve.
func ApproverPowerLine(p *Prompt) string {
	if p.ApproverPower == "" {
		return ""
	}
	return fmt.Sprintf("!!! runs as %s%s, who may approve rootgate requests: approving this approves root",
		RunAsName(p), WithGroup(p))
}

// namedIdentity is the identity of p's named run: "postgres (uid 108,
// gid 115)", or "postgres (uid 108) WITH GROUP staff (gid 50)".
func namedIdentity(p *Prompt) string {
	n := p.Named
	if n.Group != "" {
		return fmt.Sprintf("%s (uid %d)%s", RunAsName(p), n.UID, WithGroup(p))
	}
	return fmt.Sprintf("%s (uid %d, gid %d)", RunAsName(p), n.UID, n.GID)
}

// WithGroup is " WITH GROUP staff (gid 50)" for a prompt whose request
// names a group (run_as_group), "" for any other: what every question
// about the run appends to whom it runs as, so that no group the run
// gets goes unsaid.
func WithGroup(p *Prompt) string {
	if p.Named == nil || p.Named.Group == "" {
		return ""
	}
	return fmt.Sprintf(" WITH GROUP %s (gid %d)", termsafe.Sanitize(p.Named.Group), p.Named.GID)
}

// RunAsWord is who a run would be, for the question every prompt asks
// ("run this command as …?"): the account with its uid, ROOT in
// capitals, and the group the request names, if any (a group alone runs
// as the requester, with that group); for a run that may approve
// ([Prompt.ApproverPower]), that it is root's equal.
func RunAsWord(p *Prompt) string {
	var who string
	switch {
	case p.Named != nil && p.Named.UID != 0:
		who = fmt.Sprintf("%s (uid %d)", RunAsName(p), p.Named.UID)
	case RunsAsRoot(p):
		who = "ROOT"
	default:
		who = RunAsName(p)
	}
	if p.ApproverPower != "" && !RunsAsRoot(p) {
		// What approving it means, in the question itself.
		return who + WithGroup(p) + ", who may approve rootgate requests (ROOT'S EQUAL)"
	}
	return who + WithGroup(p)
}

// RunAsName is the run-as user for display, escaped.
func RunAsName(p *Prompt) string {
	switch {
	case p.RunAs != "":
		return termsafe.Sanitize(p.RunAs)
	case p.Privileged:
		return "root"
	}
	return termsafe.Sanitize(p.Requester.User)
}

func describeRunAs(p *Prompt) string {
	if p.Named != nil {
		who := "the account the request names, neither root nor the requester"
		switch {
		case p.ApproverPower != "" && p.Named.UID != 0:
			who = "the account the request names, ROOT'S EQUAL: it may approve rootgate requests"
		case p.Named.UID == 0:
			who = "PRIVILEGED: the command runs as ROOT"
		case int(p.Named.UID) == p.Requester.UID && p.Named.Group != "":
			who = "the requester's own account" + WithGroup(p) + ", a group it may not have"
		case int(p.Named.UID) == p.Requester.UID:
			who = "the requester's own account, named by the request"
		}
		return namedIdentity(p) + ": " + who
	}
	if RunsAsRoot(p) {
		return RunAsName(p) + "   *** PRIVILEGED: the command runs as ROOT ***"
	}
	return fmt.Sprintf("%s (uid %d, the requester's own user; not privileged)", RunAsName(p), p.Requester.UID)
}

// stdinPreviewLen is how many leading bytes of data the stdin preview shows: at
// most StdinPreviewBytes, backing off (by up to 3 bytes) so as not to split a
// UTF-8 sequence.
func stdinPreviewLen(data []byte) int {
	n := len(data)
	if n <= StdinPreviewBytes {
		return n
	}
	n = StdinPreviewBytes
	for k := n; k > n-utf8.UTFMax && k > 0; k-- {
		if utf8.RuneStart(data[k]) {
			return k
		}
	}
	return n
}

// DisplaySeconds is d for display: whole seconds as "60s", else d.String().
func DisplaySeconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// GroupBanner is the loud line of a prompt that decides n identical
// requests ([Prompt.Group]).
func GroupBanner(n int) string {
	return fmt.Sprintf("!!! %d IDENTICAL REQUESTS: one answer decides all %d of them", n, n)
}

// SelfApprovalBanner heads a prompt with [Prompt.SelfApproval] set.
const SelfApprovalBanner = "!! UNSAFE SELF-APPROVAL: the requester's uid can control this terminal or\n" +
	"!! session and could have typed the answer itself (rootgated --unsafe-self-approval).\n"
