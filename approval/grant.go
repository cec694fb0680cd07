package approval

import (
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

// runsAnything names the programs that run whatever their arguments say:
// shells and language interpreters (by name, or by a name prefix ending
// in '*'), and command runners, which run their arguments as a command.
// A grant for a request with such a stage allows every command its
// arguments spell, so it needs a second confirmation ([RunsAnything]).
// This is the one list of them. It goes by name: an interpreter copied
// under another name is not caught (docs/threat-model.md).
var runsAnything = []string{
	// shells
	"sh", "bash", "dash", "zsh", "fish", "ksh", "mksh", "ash", "csh", "tcsh", "busybox", "rbash",
	// interpreters
	"python*", "perl*", "ruby*", "node", "nodejs", "deno", "bun", "php*", "lua*", "tclsh*", "wish*",
	"awk", "gawk", "mawk", "nawk", "sed", "gdb", "expect",
	// command runners
	"env", "sudo", "su", "doas", "runuser", "setpriv", "nsenter", "chroot", "unshare", "xargs",
	"nohup", "nice", "ionice", "timeout", "stdbuf", "setsid", "flock", "watch", "time",
	"systemd-run", "strace", "ltrace", "script", "ssh", "parallel", "make",
	"taskset", "chrt", "prlimit", "numactl", "pkexec", "sg", "capsh", "firejail", "bwrap",
	"ld-linux*", "ld.so", "ld64.so*", "dbus-run-session", "xvfb-run",
}

// findRuns are the find actions that run a command.
var findRuns = []string{"-exec", "-execdir", "-ok", "-okdir"}

// interpreterName reports whether base is in runsAnything.
func interpreterName(base string) bool {
	for _, n := range runsAnything {
		if pre, ok := strings.CutSuffix(n, "*"); ok {
			if strings.HasPrefix(base, pre) {
				return true
			}
		} else if base == n {
			return true
		}
	}
	return false
}

// RunsAnything lists, one line per stage, why a grant for p would allow
// more than the one command shown: a stage whose program (as written, as
// resolved or as the file that runs) is a shell, an interpreter or a
// command runner, or a find that runs commands. Empty when no stage is.
func RunsAnything(p *Prompt) []string {
	var why []string
	for i, st := range p.Stages {
		for _, n := range stageNames(st) {
			if n != "." && n != "" && interpreterName(n) {
				why = append(why, fmt.Sprintf("stage [%d] runs %s, which runs whatever its arguments or input say", i+1, termsafe.Quote(n)))
				break
			}
			if n == "find" && len(st.Argv) > 1 && slices.ContainsFunc(st.Argv[1:], func(a string) bool { return slices.Contains(findRuns, a) }) {
				why = append(why, fmt.Sprintf("stage [%d] is find with an action that runs a command (-exec, -execdir, -ok or -okdir)", i+1))
				break
			}
		}
	}
	return why
}

// stageNames are the names a stage's program goes by: as resolved, as
// the file that runs, and as written.
func stageNames(st Stage) []string {
	names := []string{filepath.Base(st.Path), filepath.Base(st.Target)}
	if len(st.Argv) > 0 {
		names = append(names, filepath.Base(st.Argv[0]))
	}
	return names
}

// Grantable reports why no standing grant can be made for p, or "".
// A request that forwards an SSH agent is always put to a person, whose
// agent it borrows.
func Grantable(p *Prompt) string {
	if p.ForwardAgent {
		return "a request that forwards an SSH agent is always put to a person"
	}
	return ""
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
