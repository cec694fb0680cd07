package approval

import (
	_ "embed"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rootgate/rootgate/internal/termsafe"
)

// MaxGrant is the longest standing grant a person may give.
const MaxGrant = 8 * time.Hour

// DefaultGrantDurations are the grant lengths a prompt offers by default.
var DefaultGrantDurations = []time.Duration{15 * time.Minute, time.Hour}

// runsAnythingText is the list of the programs that run whatever their
// arguments, their input, the files they are given or their directory
// say, in groups, each with why (runsanything.txt, which says its
// format). A grant for a request with such a stage allows every command
// its arguments spell, so it needs a second confirmation
// ([RunsAnything]); so does any rule for one ([RuleRunsAnything]). This
// is the one list of them, kept as data. It goes by each name a stage's
// program goes by: as written, as resolved, and the real file that runs
// (links and alternatives followed); and by what that file is, which the
// daemon finds and says in [Stage.Is]: the same file as a listed program
// on the machine (a hard link), or a copy of one (the same size and
// SHA-256), such as a root copy of python3 named mytool or a busybox
// copied under another name. A script goes by its #! interpreters
// ([Stage.Interpreters]) likewise. A program changed by a byte is
// another file, and not caught (docs/threat-model.md).
//
//go:embed runsanything.txt
var runsAnythingText string

// runsAnythingGroup is one group of runsanything.txt.
type runsAnythingGroup struct {
	why   string
	names []string // a name ending in '*' is a prefix
}

// runsAnything is runsAnythingText parsed.
var runsAnything = mustParseRunsAnything(runsAnythingText)

// parseRunsAnything reads the format of runsanything.txt.
func parseRunsAnything(text string) ([]runsAnythingGroup, error) {
	var groups []runsAnythingGroup
	n := 0
	for line := range strings.Lines(text) {
		n++
		line, _, _ = strings.Cut(line, "#")
		line = strings.TrimSpace(line)
		if why, ok := strings.CutPrefix(line, "why:"); ok {
			why = strings.TrimSpace(why)
			if why == "" {
				return nil, fmt.Errorf("line %d: empty why", n)
			}
			groups = append(groups, runsAnythingGroup{why: why})
			continue
		}
		for _, name := range strings.Fields(line) {
			if len(groups) == 0 {
				return nil, fmt.Errorf("line %d: name %q before the first why", n, name)
			}
			if pre, _ := strings.CutSuffix(name, "*"); pre == "" || strings.ContainsAny(pre, "*/") {
				return nil, fmt.Errorf("line %d: bad name %q", n, name)
			}
			g := &groups[len(groups)-1]
			g.names = append(g.names, name)
		}
	}
	for _, g := range groups {
		if len(g.names) == 0 {
			return nil, fmt.Errorf("group %q has no names", g.why)
		}
	}
	return groups, nil
}

func mustParseRunsAnything(text string) []runsAnythingGroup {
	g, err := parseRunsAnything(text)
	if err != nil {
		panic("approval: runsanything.txt: " + err.Error())
	}
	return g
}

// runsWith names the programs that run a command given one of the options
// listed (find's actions, tar's --to-command, apt-get's -o with a hook,
// dpkg's --pre-invoke): a request with one runs anything, and so may a
// rule that admits other arguments than the request's, though the
// request had none. A short option ("-I") is also found with its value
// attached ("-Igzip") or among others ("-xIf", and tar's first word
// without a dash, "xIf"), a long one ("--rsh") with "=value" and
// abbreviated as getopt_long takes it ("--rs=", "--to-com"); an entry
// "*.deb" is an argument that ends so (a package file whose scripts
// apt runs), and "*/*" any argument with a "/" (apt takes one as a local
// file or directory to install from: ./x.ddeb, ./x.changes, ./dir/). find's actions and ip's exec are whole words. Every
// argument is looked at, after "--" too: it may be an option's value.
var runsWith = map[string][]string{
	"find":    {"-exec", "-execdir", "-ok", "-okdir"},
	"ip":      {"exec"},
	"tar":     {"--to-command", "--checkpoint-action", "--use-compress-program", "--rsh-command", "--info-script", "--new-volume-script", "-I", "-F"},
	"rsync":   {"--rsh", "--rsync-path", "--daemon", "--config", "-e"},
	"zip":     {"--unzip-command", "-TT"},
	"sort":    {"--compress-program"},
	"man":     {"--pager", "--html", "--config-file", "-P", "-H", "-C"},
	"apt-get": aptRunsWith,
	"apt":     aptRunsWith,
	"dpkg":    {"--install", "--unpack", "--configure", "--pre-invoke", "--post-invoke", "--admindir", "--instdir", "--root", "-i"},
	"scp":     {"-S", "-o", "-F"},
}

// aptRunsWith are apt's and apt-get's: a hook in an option or a config
// file, and every argument apt installs from a local file or directory,
// running its maintainer scripts: a package, a debug package, a
// .changes or .dsc file (apt 2.6 reads all of them), a directory ("."
// among them), any path.
var aptRunsWith = []string{"--option", "--config-file", "-o", "-c", "*.deb", "*.ddeb", "*.udeb", "*.changes", "*.dsc", "*/*", ".", ".."}

// wordOptions are the programs of runsWith whose options are whole words.
var wordOptions = []string{"find", "ip"}

// runnerOptions returns the name, and the options of runsWith, that a
// stage's names have in runsWith; "" when none.
func runnerOptions(st Stage) (name string, opts []string) {
	for _, n := range stageNames(st) {
		if opts, ok := runsWith[n]; ok {
			return n, opts
		}
	}
	return "", nil
}

// hasRunnerOption reports whether args, the arguments of the program
// name, hold one of opts, as runsWith says they are found.
func hasRunnerOption(name string, args, opts []string) bool {
	words := slices.Contains(wordOptions, name)
	for i, a := range args {
		for _, o := range opts {
			switch {
			case a == o:
				return true
			case words, o == "." || o == "..":
				// Whole words only.
			case o == "*/*":
				if strings.Contains(a, "/") {
					return true
				}
			case strings.HasPrefix(o, "*"):
				if strings.HasSuffix(a, o[1:]) {
					return true
				}
			case strings.HasPrefix(o, "--"):
				// Any abbreviation: getopt_long takes one that is
				// not ambiguous, and which are depends on the
				// program's other options.
				if opt, _, _ := strings.Cut(a, "="); len(opt) > 2 && strings.HasPrefix(o, opt) {
					return true
				}
			case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && strings.Contains(a[1:], o[1:]),
				name == "tar" && i == 0 && !strings.HasPrefix(a, "-") && strings.Contains(a, o[1:]):
				return true
			}
		}
	}
	return false
}

// Listed reports whether a program named name (a file's base name) is
// in runsAnything, or in runsWith: a program that runs what it reads, or
// a command one of its options says. The daemon finds the files of such
// programs on the machine by it, to know a copy of one under another
// name for what it is ([Stage.Is]).
func Listed(name string) bool {
	if _, ok := runsWith[name]; ok {
		return true
	}
	_, why := listedName([]string{name})
	return why != ""
}

// listedName returns the first of names that is in runsAnything, and why
// it runs anything; "" when none is.
func listedName(names []string) (name, why string) {
	for _, base := range names {
		if base == "." || base == "" || base == "/" {
			continue
		}
		for _, g := range runsAnything {
			for _, n := range g.names {
				if pre, ok := strings.CutSuffix(n, "*"); ok && strings.HasPrefix(base, pre) || base == n {
					return base, g.why
				}
			}
		}
	}
	return "", ""
}

// runsAnythingWhat says what a stage runs that runs anything, by each
// name its program goes by, by what its file is ([Stage.Is]) and by the
// interpreters of a script ([Stage.Interpreters]): the words that follow
// "stage [N] " in [RunsAnything]; "" when it runs none.
func runsAnythingWhat(st Stage) string {
	if name, why := listedName(stageNames(st)); name != "" {
		if st.Is != "" && name == filepath.Base(st.Is) {
			return fmt.Sprintf("runs %s, the same program as %s, which %s", termsafe.Quote(st.Path), termsafe.Quote(st.Is), why)
		}
		return fmt.Sprintf("runs %s, which %s", termsafe.Quote(name), why)
	}
	for _, ip := range st.Interpreters {
		// The kernel runs the interpreter with the script and the
		// request's arguments after it: they are the interpreter's.
		what := "is a script run by " + termsafe.Quote(ip.Path)
		names := []string{filepath.Base(ip.Path)}
		if ip.Is != "" {
			what += ", the same program as " + termsafe.Quote(ip.Is)
			names = append(names, filepath.Base(ip.Is))
		}
		if _, why := listedName(names); why != "" {
			return what + ", which " + why
		}
		// The script's arguments are that program's (after the
		// script's path): its options that run a command among them.
		for _, n := range names {
			if opts, ok := runsWith[n]; ok {
				return fmt.Sprintf("%s, which runs a command its options say (%s)", what, strings.Join(opts, ", "))
			}
		}
	}
	return ""
}

// RunsAnything lists, one line per stage, why a grant for p would allow
// more than the one command shown: a stage whose program (as written, as
// resolved, as the file that runs, or as what that file is: a link or a
// copy of one under another name) is in runsAnything, a script whose
// interpreter is, or a stage in runsWith with an option that runs a
// command. Empty when no stage is.
func RunsAnything(p *Prompt) []string {
	var why []string
	for i, st := range p.Stages {
		if what := runsAnythingWhat(st); what != "" {
			why = append(why, fmt.Sprintf("stage [%d] %s", i+1, what))
			continue
		}
		if name, opts := runnerOptions(st); name != "" && len(st.Argv) > 1 && hasRunnerOption(name, st.Argv[1:], opts) {
			why = append(why, fmt.Sprintf("stage [%d] is %s with an option that runs a command (%s)", i+1, name, strings.Join(opts, ", ")))
		}
	}
	return why
}

// stageNames are the names a stage's program goes by: as resolved, as
// the file that runs, as written, and as the listed program its file is.
func stageNames(st Stage) []string {
	names := []string{filepath.Base(st.Path), filepath.Base(st.Target)}
	if len(st.Argv) > 0 {
		names = append(names, filepath.Base(st.Argv[0]))
	}
	if st.Is != "" {
		names = append(names, filepath.Base(st.Is))
	}
	return names
}

// Grantable reports why no standing grant can be made for p, or "".
// A request that forwards an SSH agent is always put to a person, whose
// agent it borrows; one whose file could not be captured, or whose
// interpreter someone other than root may change (NoGrant, the daemon's
// words), would run whatever they put there.
func Grantable(p *Prompt) string {
	switch {
	case p.ForwardAgent:
		return "a request that forwards an SSH agent is always put to a person"
	case p.NoGrant != "":
		return p.NoGrant + ": a grant would run whatever is put there"
	case p.ApproverPower != "":
		return ApproverPowerWhy(p)
	}
	return ""
}

// ApproverPowerWhy is why neither a grant nor a rule is made for a run
// that may approve rootgate requests ([Prompt.ApproverPower]).
func ApproverPowerWhy(p *Prompt) string {
	return "the run as " + RunAsName(p) + " may approve rootgate requests, so each one is put to a person, as a request for root"
}

// RenderGrant describes, in full, the standing grant a person is about to
// give for p: what it allows, to whom, and until when, given that it would
// start at now and last d. The text is plain, like [Render].
func RenderGrant(p *Prompt, d time.Duration, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "STANDING GRANT for %s\n", DisplayDuration(d))
	fmt.Fprintf(&b, "  Approves this request now and, until %s (%s from now),\n", now.Add(d).Format("15:04:05 MST, Mon 2 Jan"), DisplayDuration(d))
	fmt.Fprintf(&b, "  runs without asking anyone every request that has exactly:\n")
	fmt.Fprintf(&b, "  %-13s%s\n", "Requester:", fmt.Sprintf("uid %d (%s), whichever process of it asks", p.Requester.UID, termsafe.Sanitize(p.Requester.User)))
	fmt.Fprintf(&b, "  %-13s%s\n", "Run as:", describeRunAs(p))
	cwd := "/"
	if p.Cwd != "" {
		cwd = termsafe.Quote(p.Cwd)
	}
	fmt.Fprintf(&b, "  %-13s%s (the same directory)\n", "Directory:", cwd)
	if len(p.Env) == 0 {
		fmt.Fprintf(&b, "  %-13s%s\n", "Environment:", "none beyond the run-as user's")
	} else {
		keys := make([]string, 0, len(p.Env))
		for k := range p.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		label := "Environment:"
		for _, k := range keys {
			fmt.Fprintf(&b, "  %-13s%s=%s\n", label, termsafe.Quote(k), termsafe.Quote(p.Env[k]))
			label = ""
		}
	}
	limit := "none"
	if p.RunTimeout > 0 {
		limit = DisplaySeconds(p.RunTimeout)
	}
	fmt.Fprintf(&b, "  %-13s%s (the same limit)\n", "Time limit:", limit)
	if len(p.Stdin) == 0 {
		fmt.Fprintf(&b, "  %-13s%s\n", "Stdin:", "none")
	} else {
		fmt.Fprintf(&b, "  %-13s%d bytes, the same bytes as this request\n", "Stdin:", len(p.Stdin))
	}
	for i, s := range p.Stages {
		fmt.Fprintf(&b, "  [%d] %s\n", i+1, QuoteArgv(s.Argv))
		fmt.Fprintf(&b, "      executable: %s, the same file (not one put in its place or changed)\n", describePath(s))
	}
	b.WriteString("Any other argument, environment, directory, time limit, executable or requester is asked again.\n")
	b.WriteString("Files the arguments name are NOT held: whoever may write them can change what a later use does.\n")
	b.WriteString("The grant is held in rootgated's memory only: `rootgate grants` lists it, `rootgate grants revoke ID` ends it.\n")
	return b.String()
}

// DisplayDuration is d for people: "15 min", "1 h", "1 h 30 min", "45 s".
func DisplayDuration(d time.Duration) string {
	d = d.Round(time.Second)
	h, m, s := int(d/time.Hour), int(d%time.Hour/time.Minute), int(d%time.Minute/time.Second)
	var parts []string
	if h > 0 {
		parts = append(parts, fmt.Sprintf("%d h", h))
	}
	if m > 0 {
		parts = append(parts, fmt.Sprintf("%d min", m))
	}
	if s > 0 || len(parts) == 0 {
		parts = append(parts, fmt.Sprintf("%d s", s))
	}
	return strings.Join(parts, " ")
}
