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
	"sync"
	"time"

	"golang.org/x/sys/unix"
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
	return EnvIn(SearchPath, acct, extra)
}

// EnvIn is [Env] with PATH=search: a part of [SearchPath], as
// [SafeSearchPath] leaves.
func EnvIn(search string, acct Account, extra map[string]string) []string {
	env := []string{
		"PATH=" + search,
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

// accountTTL is how long [CachedAccount] trusts an entry whose files have
// not changed: accounts from a source other than the files (LDAP, sssd)
// change without touching them.
const accountTTL = 5 * time.Second

// accountFiles are the files whose change drops every cached account at
// once: what the files source of NSS reads, and NSS's own configuration.
var accountFiles = [...]string{passwdFile, "/etc/group", "/etc/nsswitch.conf"}

// accountStamp identifies the contents of accountFiles as stat(2) sees
// them: a file replaced (a new inode, as useradd and vipw leave it),
// rewritten in place (size, mtime and ctime), or made or removed changes
// it.
type accountStamp [len(accountFiles)]struct {
	dev, ino   uint64
	size       int64
	mtime, ctm unix.Timespec
	missing    bool
}

func stampAccounts() accountStamp {
	var s accountStamp
	for i, f := range accountFiles {
		var st unix.Stat_t
		if err := unix.Stat(f, &st); err != nil {
			s[i].missing = true
			continue
		}
		s[i].dev, s[i].ino, s[i].size, s[i].mtime, s[i].ctm = st.Dev, st.Ino, st.Size, st.Mtim, st.Ctim
	}
	return s
}

// accountCache holds the accounts CachedAccount looked up, by uid.
var accountCache struct {
	mu    sync.Mutex
	stamp accountStamp
	byUID map[uint32]cachedAccount
}

type cachedAccount struct {
	acct Account
	at   time.Time
}

// CachedAccount is [LookupAccount], answered from a cache while none of
// /etc/passwd, /etc/group and /etc/nsswitch.conf has changed (a stat of
// each per call) and the entry is younger than 5 seconds. A request's
// account is looked up once per request; most requests name the same few
// accounts, and a lookup through NSS costs more than the rest of planning
// a run. Only found accounts are kept, by uid: an account named by a
// request (run_as, [LookupAccountName]) is looked up each time.
func CachedAccount(uid uint32) (Account, error) {
	stamp := stampAccounts()
	now := time.Now()
	c := &accountCache
	c.mu.Lock()
	if c.stamp != stamp || c.byUID == nil {
		c.stamp, c.byUID = stamp, make(map[uint32]cachedAccount)
	}
	e, ok := c.byUID[uid]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < accountTTL { // monotonic: never negative
		a := e.acct
		a.Groups = slices.Clone(a.Groups)
		return a, nil
	}
	a, err := LookupAccount(uid)
	if err != nil {
		return a, err
	}
	c.mu.Lock()
	// Kept only if the files did not change while it was looked up.
	if c.stamp == stamp && stampAccounts() == stamp {
		e := cachedAccount{acct: a, at: now}
		e.acct.Groups = slices.Clone(a.Groups)
		c.byUID[uid] = e
	}
	c.mu.Unlock()
	return a, nil
}
