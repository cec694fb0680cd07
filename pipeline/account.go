package pipeline

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
)

// passwdFile is where LookupAccount reads login shells from.
const passwdFile = "/etc/passwd"

// defaultShell is an account's shell when its passwd entry names none.
const defaultShell = "/bin/sh"

// Account is a run-as user's passwd entry and groups.
type Account struct {
	Name   string   // login name
	UID    uint32   // user id
	GID    uint32   // primary group id
	Groups []uint32 // supplementary groups
	Home   string   // home directory
	Shell  string   // login shell
}

// LookupAccount reads the passwd entry and supplementary group list of uid
// through os/user. The login shell, which os/user does not report, comes
// from the user's line in /etc/passwd; it is "/bin/sh" when that field is
// empty or the user has no line there (an account from another NSS source).
// The error says which step failed; for an unknown uid it wraps
// [user.UnknownUserIdError].
func LookupAccount(uid uint32) (Account, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return Account{}, fmt.Errorf("lookup account %d: %w", uid, err)
	}
	return accountOf(u)
}

// LookupAccountName is [LookupAccount] for the user named name, as
// initgroups(3) sees it: its passwd entry, and the groups the group
// database lists it in besides its primary one. For an unknown name the
// error wraps [user.UnknownUserError].
func LookupAccountName(name string) (Account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return Account{}, fmt.Errorf("lookup account %q: %w", name, err)
	}
	return accountOf(u)
}

// accountOf completes u's Account: its groups and login shell.
func accountOf(u *user.User) (Account, error) {
	id := u.Uid
	uid, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return Account{}, fmt.Errorf("lookup account %q: uid %q: %w", u.Username, id, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return Account{}, fmt.Errorf("lookup account %s: gid %q: %w", id, u.Gid, err)
	}
	ids, err := u.GroupIds()
	if err != nil {
		return Account{}, fmt.Errorf("lookup account %s: groups: %w", id, err)
	}
	groups := make([]uint32, 0, len(ids))
	for _, s := range ids {
		g, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return Account{}, fmt.Errorf("lookup account %s: group %q: %w", id, s, err)
		}
		if !slices.Contains(groups, uint32(g)) {
			groups = append(groups, uint32(g))
		}
	}
	shell, err := loginShell(passwdFile, u.Username, id)
	if err != nil {
		return Account{}, fmt.Errorf("lookup account %s: %w", id, err)
	}
	return Account{
		Name:   u.Username,
		UID:    uint32(uid),
		GID:    uint32(gid),
		Groups: groups,
		Home:   u.HomeDir,
		Shell:  shell,
	}, nil
}

// loginShell returns field 7 of the first line of the passwd file that
// names user name with uid id, or defaultShell.
func loginShell(file, name, id string) (string, error) {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return defaultShell, nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	return parseLoginShell(f, name, id)
}

// parseLoginShell is loginShell reading passwd lines from r.
func parseLoginShell(r io.Reader, name, id string) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) == 7 && f[0] == name && f[2] == id {
			if f[6] == "" {
				return defaultShell, nil
			}
			return f[6], nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("read passwd: %w", err)
	}
	return defaultShell, nil
}

// Env builds a run's environment from nothing: PATH=[SearchPath], then
// HOME, USER, LOGNAME and SHELL from acct, then the pairs of extra in key
// order. extra is expected to be checked by the caller already; a key in it
// that names one of the first five, or [RunEnvKey], is dropped, so that no
// allowlist can move the search path or the run's identity. The result is
// the same for the same arguments, ready for [Cmd].Env.
func Env(acct Account, extra map[string]string) []string {
	env := []string{
		"PATH=" + SearchPath,
		"HOME=" + acct.Home,
		"USER=" + acct.Name,
		"LOGNAME=" + acct.Name,
		"SHELL=" + acct.Shell,
	}
	for _, k := range slices.Sorted(maps.Keys(extra)) {
		switch k {
		case "PATH", "HOME", "USER", "LOGNAME", "SHELL", RunEnvKey:
			continue
		}
		env = append(env, k+"="+extra[k])
	}
	return env
}
