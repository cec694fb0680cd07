package wire

import (
	"fmt"
	"regexp"
	"strings"
)

// What each allowlisted env key may hold. Root programs read these values:
// debconf evaluates DEBIAN_FRONTEND as Perl, gettext and glibc take a
// locale or zone name with a "/" or ".." as a path to load, and a proxy
// variable sends root's traffic wherever it names. So an allowed key is not
// enough: its value must be of the kind the key is for, and keys whose
// value is a command line (PAGER, SYSTEMD_PAGER) are not on the list.

// envValue is the rule for the values of one allowlisted key (or of the
// keys with one prefix, written with a trailing '*').
type envValue struct {
	key  string
	what string // completes "env "KEY" must be …"
	ok   func(string) bool
}

var (
	// A locale name: language[_territory][.codeset][@modifier], or C or
	// POSIX; never a path.
	localeName = regexp.MustCompile(`^[A-Za-z]+(_[A-Za-z0-9]+)?(\.[A-Za-z0-9-]+)?(@[A-Za-z0-9_-]+)?$`)
	// A terminfo name: no '/', so it cannot leave the terminfo tree.
	termName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.+-]*$`)
	// Characters of a zone name (Europe/Paris) or a POSIX TZ rule
	// (CET-1CEST,M3.5.0,M10.5.0/3, <+03>-3).
	tzChars = regexp.MustCompile(`^:?[A-Za-z0-9_+,.:<>/-]+$`)
	// A proxy URL: scheme, optional user[:password]@, host, optional port,
	// optional trailing '/'.
	proxyURL = regexp.MustCompile(`^(http|https|socks5|socks5h)://([A-Za-z0-9._~%+-]+(:[A-Za-z0-9._~%+-]*)?@)?([A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?/?$`)
	// One entry of no_proxy: a host, .domain, address, CIDR or *, with an
	// optional port.
	noProxyEntry = regexp.MustCompile(`^[A-Za-z0-9.*:\[\]/_-]*$`)
	screenSize   = regexp.MustCompile(`^[1-9][0-9]{0,4}$`)
	noColor      = regexp.MustCompile(`^[A-Za-z0-9]*$`)
)

func isLocale(v string) bool { return v == "" || len(v) <= 128 && localeName.MatchString(v) }

func oneOf(vals ...string) func(string) bool {
	return func(v string) bool {
		for _, w := range vals {
			if v == w {
				return true
			}
		}
		return false
	}
}

func isLocaleList(v string) bool {
	if len(v) > 512 {
		return false
	}
	for l := range strings.SplitSeq(v, ":") {
		if !isLocale(l) {
			return false
		}
	}
	return true
}

func isTZ(v string) bool {
	if len(v) > 128 || !tzChars.MatchString(v) {
		return false
	}
	// A zone file name is looked up under /usr/share/zoneinfo: it must
	// not be absolute nor climb out with "..", nor name a hidden file.
	for c := range strings.SplitSeq(strings.TrimPrefix(v, ":"), "/") {
		if c == "" || c[0] == '.' {
			return false
		}
	}
	return true
}

func isNoProxy(v string) bool {
	if len(v) > 2048 {
		return false
	}
	for e := range strings.SplitSeq(v, ",") {
		if !noProxyEntry.MatchString(strings.TrimSpace(e)) {
			return false
		}
	}
	return true
}

var (
	debconfFrontends = []string{"noninteractive", "readline", "teletype", "text", "dialog", "editor"}
	boolWords        = []string{"0", "1", "yes", "no", "true", "false", "on", "off"}
)

const proxyWhat = `a proxy URL "http://host[:port]" (http, https, socks5 or socks5h; optional user[:password]@; nothing after the port but "/")`

// envValues is the allowlist: defaultEnvAllow holds exactly these keys.
var envValues = []envValue{
	{"LANG", `a locale name such as "C.UTF-8" or "en_US.UTF-8" (language[_territory][.codeset][@modifier]; no "/")`, isLocale},
	{"LANGUAGE", `a ":"-separated list of locale names such as "de_DE:en" (no "/")`, isLocaleList},
	{"LC_*", `a locale name such as "C.UTF-8" or "en_US.UTF-8" (language[_territory][.codeset][@modifier]; no "/")`, isLocale},
	{"TZ", `a zone name such as "UTC" or "Europe/Paris", or a POSIX TZ rule (no leading "/", no "." or ".." part)`, isTZ},
	{"TERM", `a terminal type such as "xterm-256color" (letters, digits, "_.+-"; no "/")`, func(v string) bool { return len(v) <= 64 && termName.MatchString(v) }},
	{"COLUMNS", `a number from 1 to 99999`, screenSize.MatchString},
	{"LINES", `a number from 1 to 99999`, screenSize.MatchString},
	{"NO_COLOR", `empty or letters and digits, such as "1"`, func(v string) bool { return len(v) <= 16 && noColor.MatchString(v) }},
	{"DEBIAN_FRONTEND", `one of "` + strings.Join(debconfFrontends, `", "`) + `"`, oneOf(debconfFrontends...)},
	{"DEBCONF_NONINTERACTIVE_SEEN", `"true" or "false"`, oneOf("true", "false")},
	{"APT_LISTCHANGES_FRONTEND", `one of "none", "text", "mail"`, oneOf("none", "text", "mail")},
	{"SYSTEMD_COLORS", `one of "` + strings.Join(boolWords, `", "`) + `", "16", "256", "24bit"`, oneOf(append(boolWords, "16", "256", "24bit")...)},
	{"http_proxy", proxyWhat, func(v string) bool { return len(v) <= 512 && proxyURL.MatchString(v) }},
	{"https_proxy", proxyWhat, func(v string) bool { return len(v) <= 512 && proxyURL.MatchString(v) }},
	{"HTTP_PROXY", proxyWhat, func(v string) bool { return len(v) <= 512 && proxyURL.MatchString(v) }},
	{"HTTPS_PROXY", proxyWhat, func(v string) bool { return len(v) <= 512 && proxyURL.MatchString(v) }},
	{"no_proxy", `a ","-separated list of hosts, .domains, addresses or "*"`, isNoProxy},
	{"NO_PROXY", `a ","-separated list of hosts, .domains, addresses or "*"`, isNoProxy},
}

// envValueRule returns the value rule for key, or nil when the key has
// none: such a key is refused whatever an [EnvPolicy] says.
func envValueRule(key string) *envValue {
	for i := range envValues {
		p := envValues[i].key
		if prefix, ok := strings.CutSuffix(p, "*"); ok && strings.HasPrefix(key, prefix) || p == key {
			return &envValues[i]
		}
	}
	return nil
}

// checkEnvValue checks the value of an allowed env key against what the
// key may hold.
func checkEnvValue(r *envValue, key, value string) error {
	if r.ok(value) {
		return nil
	}
	return envValueError(key, r.what)
}

// envValueError reports a value its key may not hold.
func envValueError(key, what string) error {
	return coded(CodeEnvValue, fmt.Sprintf("env %q must be %s", key, what))
}
