package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/rootgate/rootgate/internal/termsafe"
)

// The policy file: the operator's standing decisions (docs/policy.md).
//
// A file is read whole by [Parse] into a [Policy], a list of [Rule]s
// in file order. [Policy.Evaluate] gives each stage of a request the action
// of the strictest rule that matches it, whatever the rules' order, and
// combines the stages' actions into one [Match]: deny beats ask, ask beats
// allow, within a stage as across stages.

// Action is what a rule says about a stage, and what a [Policy] says about
// a request.
type Action int

const (
	// ActionAsk sends the request to a person. It is the zero value.
	ActionAsk Action = iota
	// ActionAllow runs the request without asking.
	ActionAllow
	// ActionDeny refuses the request without asking.
	ActionDeny
)

// String returns the action's keyword in the policy file: "ask", "allow"
// or "deny".
func (a Action) String() string {
	switch a {
	case ActionAsk:
		return "ask"
	case ActionAllow:
		return "allow"
	case ActionDeny:
		return "deny"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// strictness orders actions as they override each other: allow, then ask,
// then deny.
func strictness(a Action) int {
	switch a {
	case ActionAllow:
		return 0
	case ActionAsk:
		return 1
	}
	return 2
}

// ruleScope says which requests a rule is about. The zero value is no
// scope at all: a Rule built outside this file matches nothing.
type ruleScope int

const (
	scopeUnset ruleScope = iota
	scopePrivileged
	scopeUnprivileged
	scopeAny
)

// restWord is the pattern word that matches any number of remaining
// arguments when written last and unquoted.
const restWord = "..."

// Rule is one rule of a policy file. Only [Parse] makes rules that
// match anything: a Rule built by hand has no scope and matches no request.
type Rule struct {
	File   string // the name its file was parsed under (see [ParsePolicy])
	Line   int    // 1-based line number in the file
	Text   string // the rule as written, comment and surrounding blanks removed
	Action Action

	scope ruleScope
	// Qualifier globs; "" means the qualifier was not given.
	user, session, host string
	// runas and rungroup are the runas= and rungroup= globs: the account
	// and the group a privileged request names to run as. An allow rule
	// without runas= matches only a run as root, without rungroup= only a
	// request naming no group.
	runas, rungroup string
	// cwd is the cwd= glob, matched against the request's working
	// directory (its real path) as a path word is; "" when not given.
	cwd string
	// stdin is the stdin= qualifier: "none" for a request with no stdin,
	// or the hex SHA-256 of the one stdin admitted; "" when not given.
	stdin string
	// env lists what the env= qualifiers of an allow rule admit. An allow
	// rule matches only a request whose every env key one of them admits.
	env []envAdmit
	// memory and tasks are the memory= and tasks= qualifiers of an allow
	// rule: limits of the run it allows (0: not given).
	memory, tasks int64
	// words are the pattern's globs, without a trailing "..." (see rest).
	words []string
	// places holds, index for index with words, the placeholder a word
	// stands for (kind phNone for a glob). It is nil when the rule has no
	// placeholder.
	places []placeholder
	// rest is set when the pattern ends with an unquoted "...".
	rest bool
}

// envAdmit is one env=KEY or env=KEY=VALUE qualifier: a glob for the key
// and, when value is set, one for its value.
type envAdmit struct {
	key, value string
	hasValue   bool
}

func (e envAdmit) admits(k, v string) bool {
	return globMatch(e.key, k) && (!e.hasValue || globMatch(e.value, v))
}

// Policy is a parsed policy file. A nil *Policy, like the zero value, has no
// rules: it asks about every request.
type Policy struct {
	// Rules are the file's rules in file order; blank and comment lines
	// have none.
	Rules []Rule

	name  string
	files []string // see Files
}

// Name returns the name the policy was parsed under (the file's path for
// [Load]), or "" for a nil or zero Policy.
func (p *Policy) Name() string {
	if p == nil {
		return ""
	}
	return p.name
}

// ParseError reports a line of a policy file that does not parse. Its
// text is "policy NAME:LINE: what is wrong". A bad glob unwraps to
// [path.ErrBadPattern].
type ParseError struct {
	Name string // as given to Parse
	Line int    // 1-based
	Err  error  // what is wrong with the line
}

func (e *ParseError) Error() string {
	return fmt.Sprintf("policy %s:%d: %v", e.Name, e.Line, e.Err)
}

// Unwrap returns e.Err.
func (e *ParseError) Unwrap() error { return e.Err }

// Load reads and parses the policy file at path (see [Parse]).
// A file that does not exist is not an error: the result is an empty
// Policy, which asks about everything. Any other failure to read the file
// is returned as is, and a line that does not parse as a [*ParseError].
func Load(path string) (*Policy, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return &Policy{name: path}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	return Parse(path, f)
}

// Parse reads a policy file from r; name (usually the file's path)
// only labels errors. The grammar is in docs/policy.md: one rule a line,
//
//	ACTION SCOPE[,QUALIFIER...] [PATTERN...]
//
// with blank lines and "#" comments ignored. Every glob and placeholder
// ({unit}, {int<=N}, ...) is checked here, so a Policy that parsed never
// meets a bad pattern while evaluating.
//
// The first line that does not parse stops the parse with a [*ParseError];
// an error reading r is returned wrapped.
func Parse(name string, r io.Reader) (*Policy, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", name, err)
	}
	p := &Policy{name: name}
	n := 0
	for line := range strings.Lines(string(data)) {
		n++
		line = strings.TrimSuffix(line, "\n")
		if !termsafe.String(strings.ReplaceAll(line, "\r", " "), true) { // CR is a blank here
			// A rule is shown on terminals (policy test, prompts, logs):
			// it must not hide or rewrite what is around it.
			return nil, &ParseError{Name: name, Line: n, Err: errUnsafeText}
		}
		rule, ok, err := parseRule(line)
		if err != nil {
			return nil, &ParseError{Name: name, Line: n, Err: err}
		}
		if ok {
			rule.File, rule.Line = name, n
			p.Rules = append(p.Rules, rule)
		}
	}
	return p, nil
}

// errUnsafeText: a line holds a control, invisible or invalid character.
var errUnsafeText = errors.New("a control, invisible or invalid UTF-8 character; a policy is plain text")

// ruleWord is one word of a rule line.
type ruleWord struct {
	text   string // with quotes and escapes removed
	quoted bool   // some of it was inside double quotes
}

// isRuleBlank reports whether c separates words. A carriage return is a
// blank so that files with CRLF line ends read as expected.
func isRuleBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\r' }

// splitRuleLine cuts line into words. A "#" where a word would start begins
// a comment that runs to the end of the line. A word runs to the next blank
// outside quotes; double quotes may hold blanks and "#", and within them a
// backslash escapes only '"' and '\'. text is the line from the start of
// the first word to the end of the last.
func splitRuleLine(line string) (words []ruleWord, text string, err error) {
	i, start, end := 0, 0, 0
	for {
		for i < len(line) && isRuleBlank(line[i]) {
			i++
		}
		if i == len(line) || line[i] == '#' {
			return words, line[start:end], nil
		}
		if len(words) == 0 {
			start = i
		}
		var b strings.Builder
		w := ruleWord{}
		for i < len(line) && !isRuleBlank(line[i]) {
			if line[i] != '"' {
				b.WriteByte(line[i])
				i++
				continue
			}
			w.quoted = true
			i++
			closed := false
			for i < len(line) {
				c := line[i]
				if c == '"' {
					i++
					closed = true
					break
				}
				if c == '\\' {
					if i+1 == len(line) {
						break
					}
					next := line[i+1]
					if next != '"' && next != '\\' {
						r, _ := utf8.DecodeRuneInString(line[i+1:])
						return nil, "", fmt.Errorf(`backslash before %q inside quotes: only \" and \\ are escapes`, r)
					}
					b.WriteByte(next)
					i += 2
					continue
				}
				b.WriteByte(c)
				i++
			}
			if !closed {
				return nil, "", errors.New("unterminated quote")
			}
		}
		w.text = b.String()
		words = append(words, w)
		end = i
	}
}

// parseRule parses one line. ok is false for a blank or comment line.
func parseRule(line string) (rule Rule, ok bool, err error) {
	words, text, err := splitRuleLine(line)
	if err != nil || len(words) == 0 {
		return Rule{}, false, err
	}
	r := Rule{Text: text}
	if r.Action, err = parseAction(words[0].text); err != nil {
		return Rule{}, false, err
	}
	if len(words) < 2 {
		return Rule{}, false, errors.New("missing scope")
	}
	if err := r.parseScope(words[1].text); err != nil {
		return Rule{}, false, err
	}
	if len(r.env) > 0 && r.Action != ActionAllow {
		return Rule{}, false, fmt.Errorf("qualifier \"env\" is only for allow rules: %s rules match whatever the env", r.Action)
	}
	if (r.memory > 0 || r.tasks > 0) && r.Action != ActionAllow {
		return Rule{}, false, fmt.Errorf("qualifiers \"memory\" and \"tasks\" are only for allow rules: they limit the run a rule allows")
	}
	if err := r.parsePattern(words[2:]); err != nil {
		return Rule{}, false, err
	}
	return r, true, nil
}

// parseAction parses a rule's first word.
func parseAction(word string) (Action, error) {
	switch word {
	case "allow":
		return ActionAllow, nil
	case "deny":
		return ActionDeny, nil
	case "ask":
		return ActionAsk, nil
	}
	return 0, fmt.Errorf("unknown action %q", word)
}

// parsePattern parses the words after the scope into r's pattern.
func (r *Rule) parsePattern(pats []ruleWord) error {
	for i, w := range pats {
		if w.text == restWord && !w.quoted {
			if i != len(pats)-1 {
				return errors.New(`"..." is allowed only as the last pattern`)
			}
			r.rest = true
			break
		}
		ph, isPlace, err := parsePlaceholder(i, w.text)
		if err != nil {
			return err
		}
		if isPlace {
			if r.places == nil {
				r.places = make([]placeholder, i, len(pats))
			}
		} else if err := checkGlob(w.text); err != nil {
			return fmt.Errorf("bad glob %q: %w", w.text, err)
		}
		if r.places != nil {
			r.places = append(r.places, ph)
		}
		r.words = append(r.words, w.text)
	}
	return nil
}

// parseScope parses SCOPE[,NAME=GLOB...] into r; env=KEY[=VALUE] may repeat.
func (r *Rule) parseScope(word string) error {
	scope, quals, hasQuals := strings.Cut(word, ",")
	if err := r.parseScopeName(scope, hasQuals); err != nil {
		return err
	}
	if !hasQuals {
		return nil
	}
	for q := range strings.SplitSeq(quals, ",") {
		if err := r.parseQualifier(word, q); err != nil {
			return err
		}
	}
	return nil
}

// parseScopeName sets r's scope from its name, the scope word up to its
// first comma; hasQuals says whether qualifiers follow.
func (r *Rule) parseScopeName(scope string, hasQuals bool) error {
	switch scope {
	case "privileged":
		r.scope = scopePrivileged
	case "unprivileged":
		r.scope = scopeUnprivileged
	case "any":
		r.scope = scopeAny
	case "":
		if hasQuals {
			return errors.New("missing scope before qualifiers")
		}
		return errors.New("missing scope")
	default:
		if strings.HasPrefix(scope, "runas=") || strings.HasPrefix(scope, "rungroup=") {
			return fmt.Errorf("unknown scope %q: write privileged,%s", scope, scope)
		}
		return fmt.Errorf("unknown scope %q", scope)
	}
	return nil
}

// parseQualifier parses the qualifier q, one of those of the scope word
// word, into r.
func (r *Rule) parseQualifier(word, q string) error {
	if q == "" {
		return fmt.Errorf("empty qualifier in %q", word)
	}
	key, glob, found := strings.Cut(q, "=")
	if !found {
		return fmt.Errorf("malformed qualifier %q: want user=GLOB, session=GLOB, host=GLOB, runas=GLOB, rungroup=GLOB, cwd=GLOB, stdin=none|sha256:HEX, env=KEY[=VALUE], memory=SIZE or tasks=N", q)
	}
	switch key {
	case "stdin":
		return r.parseStdin(glob)
	case "env":
		return r.parseEnv(glob)
	case "memory", "tasks":
		return r.parseLimit(key, glob)
	}
	dst, err := r.globQualifier(key)
	if err != nil {
		return err
	}
	if glob == "" {
		return fmt.Errorf("empty value for qualifier %q", key)
	}
	if *dst != "" {
		return fmt.Errorf("duplicate qualifier %q", key)
	}
	if err := checkGlob(glob); err != nil {
		return fmt.Errorf("bad glob %q for qualifier %q: %w", glob, key, err)
	}
	*dst = glob
	return nil
}

// globQualifier returns where r keeps the glob of the qualifier key, one
// of those whose value is a glob (user, session, host, runas, rungroup,
// cwd), or why key is none of them.
func (r *Rule) globQualifier(key string) (*string, error) {
	switch key {
	case "user":
		return &r.user, nil
	case "session":
		return &r.session, nil
	case "host":
		return &r.host, nil
	case "runas", "rungroup":
		if r.scope != scopePrivileged {
			return nil, fmt.Errorf("qualifier %q needs scope privileged: only a privileged request names an account to run as", key)
		}
		if key == "rungroup" {
			return &r.rungroup, nil
		}
		return &r.runas, nil
	case "cwd":
		return &r.cwd, nil
	}
	return nil, fmt.Errorf("unknown qualifier %q: want user, session, host, runas, rungroup, cwd, stdin, env, memory or tasks", key)
}

// parseStdin sets the qualifier stdin=none or stdin=sha256:HEX.
func (r *Rule) parseStdin(text string) error {
	if r.stdin != "" {
		return errors.New(`duplicate qualifier "stdin"`)
	}
	if text == "none" {
		r.stdin = text
		return nil
	}
	hex, ok := strings.CutPrefix(text, "sha256:")
	if !ok || len(hex) != 64 || strings.Trim(hex, "0123456789abcdef") != "" {
		return fmt.Errorf(`bad value %q for qualifier "stdin": want none, or sha256: and 64 lowercase hex digits`, text)
	}
	r.stdin = hex
	return nil
}

// parseLimit sets the qualifier memory=SIZE (bytes, or with K, M or G)
// or tasks=N.
func (r *Rule) parseLimit(key, text string) error {
	dst := &r.memory
	if key == "tasks" {
		dst = &r.tasks
	}
	if *dst != 0 {
		return fmt.Errorf("duplicate qualifier %q", key)
	}
	num, mult := text, int64(1)
	if key == "memory" && text != "" {
		switch text[len(text)-1] {
		case 'K', 'k':
			mult = 1 << 10
		case 'M', 'm':
			mult = 1 << 20
		case 'G', 'g':
			mult = 1 << 30
		}
		if mult > 1 {
			num = text[:len(text)-1]
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		if key == "memory" {
			return fmt.Errorf("bad value %q for qualifier \"memory\": want a positive size in bytes, or with K, M or G", text)
		}
		return fmt.Errorf("bad value %q for qualifier \"tasks\": want a positive number", text)
	}
	*dst = n * mult
	return nil
}

// Limits is the limits an allow rule's memory= and tasks= qualifiers set
// on the run it allows: memory in bytes and tasks, 0 where not given.
func (r *Rule) Limits() (memory, tasks int64) { return r.memory, r.tasks }

// parseEnv adds the qualifier env=text: KEY or KEY=VALUE, each a glob.
func (r *Rule) parseEnv(text string) error {
	if text == "" {
		return errors.New(`empty value for qualifier "env"`)
	}
	key, value, hasValue := strings.Cut(text, "=")
	if key == "" {
		return fmt.Errorf("empty key in qualifier \"env=%s\"", text)
	}
	for _, g := range []string{key, value} {
		// A brace here is not a placeholder: say so rather than match
		// the text "{a|b}" and nothing else.
		if firstBrace(g) >= 0 {
			return fmt.Errorf(`"{" in qualifier "env=%s": placeholders are for arguments; repeat env=KEY=VALUE for each value, or write \{ for a literal {`, text)
		}
		if err := checkGlob(g); err != nil {
			return fmt.Errorf("bad glob %q for qualifier \"env\": %w", g, err)
		}
	}
	r.env = append(r.env, envAdmit{key: key, value: value, hasValue: hasValue})
	return nil
}

// admitsEnv reports whether r's env= qualifiers admit every pair of env.
func (r *Rule) admitsEnv(env map[string]string) bool {
	for k, v := range env {
		if !slices.ContainsFunc(r.env, func(e envAdmit) bool { return e.admits(k, v) }) {
			return false
		}
	}
	return true
}

// checkGlob returns path.ErrBadPattern when glob is malformed. path.Match
// checks the whole pattern even once the name has failed to match.
func checkGlob(glob string) error {
	_, err := path.Match(glob, "")
	return err
}

// globMatch reports whether name matches glob, which checkGlob has passed.
func globMatch(glob, name string) bool {
	ok, err := path.Match(glob, name)
	return ok && err == nil
}

// wordMatch matches a pattern word against a command or argument. On top
// of globMatch, a word that is not plain text (it holds *, ?, [ or \)
// never matches a word that is not a clean path: one with a "." or ".."
// component ("..", "./x", "/srv/pub/../etc") or an empty one ("a//b"). So
// /srv/pub/* cannot reach /srv/pub/.. or climb out of /srv/pub; plain
// text matches only itself.
func wordMatch(glob, word string) bool {
	if !globMatch(glob, word) {
		return false
	}
	return !strings.ContainsAny(glob, `*?[\`) || cleanPath(word)
}

// cleanPath reports whether no "/"-separated component of w is "." or
// "..", and no "/" follows another.
func cleanPath(w string) bool {
	if strings.Contains(w, "//") {
		return false
	}
	for c := range strings.SplitSeq(w, "/") {
		if c == "." || c == ".." {
			return false
		}
	}
	return true
}

// Subject is what rules are matched against: a request after its
// executables were resolved.
type Subject struct {
	Privileged bool
	User       string     // requester's user name
	Session    string     // the request's session, "" if none
	Host       string     // the request's host, "" if none
	Stages     [][]string // argv per stage, as requested
	Paths      []string   // resolved absolute executable per stage
	// Env is the request's env. An allow rule matches only when its env=
	// qualifiers admit every key (with its value).
	Env map[string]string
	// RunAs is the account a privileged request names to run as
	// (run_as), by its user name; "" (or "root") for a run as root. An
	// allow rule matches a request naming another account only with a
	// runas= qualifier that matches it.
	RunAs string
	// RunGroup is the group a privileged request names (run_as_group),
	// by its name; "" for none. An allow rule matches a request naming
	// one only with a rungroup= qualifier that matches it.
	RunGroup string
	// Cwd is the request's working directory (its real path), for cwd=.
	Cwd string
	// StdinSHA256 is the hex SHA-256 of the request's stdin, "" when it
	// has none (or an empty one), for stdin=.
	StdinSHA256 string
}

// StdinSHA256 is the hex SHA-256 of a request's stdin, as
// Subject.StdinSHA256 and the stdin= qualifier hold it.
func StdinSHA256(stdin []byte) string {
	sum := sha256.Sum256(stdin)
	return hex.EncodeToString(sum[:])
}

// Match is a policy's verdict on a request.
type Match struct {
	Action Action
	// Rule is the rule that decided, a pointer into Policy.Rules: of the
	// rules of the deciding action that match the stage, the first in file
	// order. For ActionDeny it is the rule of the first stage denied; for
	// ActionAllow, the rule that allowed the first stage; for ActionAsk,
	// the rule of the first stage asked about, or nil when no rule matched
	// that stage. It is never nil for ActionDeny and ActionAllow.
	Rule *Rule
	// Memory and Tasks are, for ActionAllow, the lowest memory= and
	// tasks= among the rules that match the stages (0: none set one):
	// each allow rule that matches limits the whole run.
	Memory, Tasks int64
}

// Evaluate decides about the request s. Each stage gets the action of the
// strictest rule whose scope, qualifiers and pattern match it, wherever it
// sits among the policy's files and lines: deny over ask over allow, and
// ask when no rule matches. The request is denied if any stage is denied,
// else asked about if any stage is asked about, else allowed. A request
// with no stages is asked about. See [Match] for which rule is reported.
func (p *Policy) Evaluate(s Subject) Match {
	if p == nil || len(s.Stages) == 0 {
		return Match{Action: ActionAsk}
	}
	var (
		asked   bool
		askRule *Rule
		allow   = Match{Action: ActionAllow}
	)
	for i, argv := range s.Stages {
		d := p.decideStage(&s, argv, s.path(i))
		switch d.action {
		case ActionDeny:
			return Match{Action: ActionDeny, Rule: d.rule}
		case ActionAllow:
			if i == 0 {
				allow.Rule = d.rule
			}
			allow.Memory, allow.Tasks = lower(allow.Memory, d.memory), lower(allow.Tasks, d.tasks)
		default:
			if !asked {
				asked, askRule = true, d.rule
			}
		}
	}
	if asked {
		return Match{Action: ActionAsk, Rule: askRule}
	}
	return allow
}

// path is the resolved executable of stage i, "" when not known.
func (s *Subject) path(i int) string {
	if i < len(s.Paths) {
		return s.Paths[i]
	}
	return ""
}

// lower is the lower of two limits, 0 meaning none.
func lower(a, b int64) int64 {
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

// stageDecision is what the rules decide about one stage.
type stageDecision struct {
	action Action
	// rule is the first rule, in file order, of the strictest action
	// among those matching the stage; nil when none matched.
	rule *Rule
	// memory and tasks are the lowest limits among the matching allow
	// rules, for an allowed stage.
	memory, tasks int64
}

// decideStage matches every rule against one stage of s: the strictest
// action among the matching rules decides (deny over ask over allow), so
// no rule's place in the files can make it override a stricter one.
func (p *Policy) decideStage(s *Subject, argv []string, resolved string) stageDecision {
	var ask, allow *Rule
	var memory, tasks int64
	for i := range p.Rules {
		r := &p.Rules[i]
		if !r.matches(s, argv, resolved) {
			continue
		}
		switch r.Action {
		case ActionDeny:
			// Nothing is stricter: the first deny decides.
			return stageDecision{action: ActionDeny, rule: r}
		case ActionAsk:
			if ask == nil {
				ask = r
			}
		case ActionAllow:
			if allow == nil {
				allow = r
			}
			memory, tasks = lower(memory, r.memory), lower(tasks, r.tasks)
		}
	}
	switch {
	case ask != nil:
		return stageDecision{action: ActionAsk, rule: ask}
	case allow != nil:
		return stageDecision{action: ActionAllow, rule: allow, memory: memory, tasks: tasks}
	}
	return stageDecision{action: ActionAsk}
}

// matches reports whether r matches the stage argv (resolved to the
// executable resolved) of s.
func (r *Rule) matches(s *Subject, argv []string, resolved string) bool {
	return r.whyNot(s, argv, resolved, false) == ""
}

// AllowsAllPrivileged returns the rules that allow every privileged
// command, for the daemon's start-up warning: allow rules of scope
// privileged or any whose pattern is empty, "..." alone, or a word made of
// "*" only followed by "...". Qualifiers do not count: a rule that lets one
// user run anything as root is still reported. The check is syntactic and
// deliberately narrow; it ignores rules before the one reported.
func (p *Policy) AllowsAllPrivileged() []*Rule {
	if p == nil {
		return nil
	}
	var all []*Rule
	for i := range p.Rules {
		r := &p.Rules[i]
		if r.Action != ActionAllow || r.scope != scopePrivileged && r.scope != scopeAny {
			continue
		}
		switch {
		case len(r.words) == 0,
			len(r.words) == 1 && r.rest && r.words[0] != "" && strings.Trim(r.words[0], "*") == "":
			all = append(all, r)
		}
	}
	return all
}
