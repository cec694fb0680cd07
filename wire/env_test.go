package wire

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestEnvValues: each allowlisted key takes the values it is for and
// refuses the ones root programs would read as code or as a path.
func TestEnvValues(t *testing.T) {
	good := map[string][]string{
		"LANG":                        {"", "C", "POSIX", "C.UTF-8", "en_US.UTF-8", "de_DE.ISO-8859-1", "sr_RS@latin", "ca_ES.UTF-8@valencia"},
		"LC_ALL":                      {"C", "fr_FR.UTF-8"},
		"LC_MESSAGES":                 {"pt_BR"},
		"LANGUAGE":                    {"", "de_DE:en", "fr", "en_GB:en:de"},
		"TZ":                          {"UTC", "Europe/Paris", ":Europe/Paris", "America/Argentina/Buenos_Aires", "Etc/GMT+3", "CET-1CEST,M3.5.0,M10.5.0/3", "<+03>-3", "UTC0"},
		"TERM":                        {"xterm-256color", "screen.xterm-256color", "tmux-256color", "vt100", "rxvt-unicode"},
		"COLUMNS":                     {"80", "1", "99999"},
		"LINES":                       {"24"},
		"NO_COLOR":                    {"", "1", "true"},
		"DEBIAN_FRONTEND":             {"noninteractive", "readline", "teletype", "text", "dialog", "editor"},
		"DEBCONF_NONINTERACTIVE_SEEN": {"true", "false"},
		"APT_LISTCHANGES_FRONTEND":    {"none", "text", "mail"},
		"SYSTEMD_COLORS":              {"0", "1", "false", "256", "24bit"},
		"http_proxy":                  {"http://proxy:3128", "http://proxy.example.com:3128/", "http://[::1]:8080", "http://user:pw@10.0.0.1:3128", "socks5h://localhost:1080"},
		"HTTPS_PROXY":                 {"https://proxy"},
		"no_proxy":                    {"localhost,127.0.0.1,.example.com", "*", "10.0.0.0/8, ::1", ""},
		"NO_PROXY":                    {"[::1]:8080"},
	}
	bad := map[string][]string{
		"LANG":                        {"../../tmp/x", "/tmp/x", "..", ".", "C/..", "en_US.UTF-8/../../x", "a b", strings.Repeat("d", 129)},
		"LC_CTYPE":                    {"../../../tmp/x"},
		"LANGUAGE":                    {"../../tmp/x", "de:../../tmp/x", "en:/tmp"},
		"TZ":                          {"/tmp/zone", ":/tmp/zone", "../../../tmp/zone", "Europe/../../tmp/x", "Europe/.hidden", "Europe//Paris", "a b", "$(id)"},
		"TERM":                        {"../../tmp/x", "x/y", ".hidden", "", "xterm;id", strings.Repeat("x", 65)},
		"COLUMNS":                     {"0", "-1", "080", "1e3", "100000", ""},
		"NO_COLOR":                    {"1;id", "x y"},
		"DEBIAN_FRONTEND":             {"Noninteractive", "web", "passthrough", "gnome", "Noninteractive; system('id')", "Readline;print`id`", ""},
		"DEBCONF_NONINTERACTIVE_SEEN": {"yes", ""},
		"APT_LISTCHANGES_FRONTEND":    {"browser", "pager", "xterm-browser", ""},
		"SYSTEMD_COLORS":              {"maybe"},
		"http_proxy":                  {"", "proxy:3128", "ftp://x", "http://x/path", "http://x:3128/?q", "http://a b", "http://x:123456"},
		"no_proxy":                    {"a;b", "a b"},
	}
	for k, vs := range good {
		for _, v := range vs {
			if err := EnvPolicy(defaultEnvAllow).Check(map[string]string{k: v}); err != nil {
				t.Errorf("%s=%q refused: %v", k, v, err)
			}
		}
	}
	for k, vs := range bad {
		for _, v := range vs {
			err := EnvPolicy(defaultEnvAllow).Check(map[string]string{k: v})
			if err == nil || !strings.HasPrefix(err.Error(), `env "`+k+`" must be `) {
				t.Errorf("%s=%q: got %v, want it refused", k, v, err)
			}
		}
	}
	// Every key on the default allowlist has a value rule, and every
	// rule is for a key on it.
	var keys []string
	for _, r := range envValues {
		keys = append(keys, r.key)
	}
	if !slices.Equal(slices.Sorted(slices.Values(keys)), slices.Sorted(slices.Values(defaultEnvAllow))) {
		t.Errorf("value rules for %v, allowlist %v", keys, defaultEnvAllow)
	}
	// Keys whose value is a command line are not on it.
	for _, k := range []string{"PAGER", "SYSTEMD_PAGER", "EDITOR", "VISUAL"} {
		if err := EnvPolicy(defaultEnvAllow).Check(map[string]string{k: "cat"}); err == nil {
			t.Errorf("%s=cat allowed", k)
		}
	}
}

// TestDocsQuoteEnvValueErrors: docs/protocol.md quotes the error for each
// key's values as the code makes it.
func TestDocsQuoteEnvValueErrors(t *testing.T) {
	b, err := os.ReadFile("../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range envValues {
		msg := envValueError(strings.Replace(r.key, "*", "ALL", 1), r.what).Error()
		if !strings.Contains(string(b), "`"+msg+"`") {
			t.Errorf("docs/protocol.md does not quote %s", msg)
		}
	}
}
