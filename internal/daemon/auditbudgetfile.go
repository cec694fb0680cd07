package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The per-uid limits of what requests add to the audit log (the hourly
// budget, auditbudget.go, and the minute of rejected records,
// rejectlimit.go) outlive the daemon: a socket-activated daemon exits when
// idle (--idle-exit) and the next connection starts a new one, which
// would otherwise give every uid a fresh hour, so that the hourly bound
// held per daemon run only. They are kept in budgetFile in the runtime
// directory (tmpfs /run under systemd, root's alone: openReplay checked
// it), written whole and renamed into place, so a reader never sees
// part of one: when the daemon stops (idle exit, SIGTERM: Server.Close)
// and whenever a uid's records pass another 1/auditBudgetSaves of its
// budget, so that a daemon that dies without stopping (a crash, SIGKILL,
// neither of which a requester causes at will) forgets less than that
// much of any uid's hour. A new daemon takes up the hours and minutes
// not yet over.
//
// The file is only trusted as the daemon writes it: a regular file of
// the daemon's uid, with one link, that no one else may read or write,
// read without following a symlink, holding nothing but well-formed
// lines. Anything else at its path is not read, and is replaced at the
// next save; the daemon warns and serves, every uid starting afresh. That
// differs from the replay file, read by the same rule (readDaemonFile),
// which the daemon does not start without (a file at its path that is
// not the daemon's, or that it cannot read, stops it): forgetting the
// replay window could let a request that ran run again, while forgetting
// the budgets gives each uid at most one hour's budget more, which is
// not worth refusing every requester, root included.

// budgetFile is the limits' file inside the runtime directory.
const budgetFile = "auditbudget"

// budgetFileHeader is the file's first line; each further line is a
// uid's hour, "hour UID START USED FULL TOLD" (START in Unix nanoseconds,
// USED and FULL in bytes, TOLD 0 or 1), or a uid's minute of rejected
// records, "minute UID START N".
const budgetFileHeader = "rootgate audit budget 1\n"

// maxBudgetFile bounds the file read at start: a line per uid active in
// the last hour, about 60 bytes each.
const maxBudgetFile = 4 << 20

// limitState is what the file holds.
type limitState struct {
	hours   map[int]uidBudget
	minutes map[int]rejectMinute
}

// formatLimits returns st as the file holds it, uids in order.
func formatLimits(st limitState) []byte {
	var b strings.Builder
	b.WriteString(budgetFileHeader)
	for _, uid := range slices.Sorted(maps.Keys(st.hours)) {
		u := st.hours[uid]
		told := 0
		if u.told {
			told = 1
		}
		fmt.Fprintf(&b, "hour %d %d %d %d %d\n", uid, u.start.UnixNano(), u.used, u.full, told)
	}
	for _, uid := range slices.Sorted(maps.Keys(st.minutes)) {
		m := st.minutes[uid]
		fmt.Fprintf(&b, "minute %d %d %d\n", uid, m.start.UnixNano(), m.n)
	}
	return []byte(b.String())
}

// parseLimits reads the file's content. Any line that is not one the
// daemon writes makes the whole file an error: a file the daemon did not
// write whole is not trusted in part. Hours and minutes over at now, or
// that begin after now (the clock went back), are left out.
func parseLimits(data []byte, now time.Time) (limitState, error) {
	st := limitState{hours: map[int]uidBudget{}, minutes: map[int]rejectMinute{}}
	rest, ok := strings.CutPrefix(string(data), budgetFileHeader)
	if !ok {
		return st, errors.New("not a file of rootgated's audit budgets")
	}
	seen := map[string]bool{} // "hour UID" and "minute UID"
	n := 1
	for line := range strings.Lines(rest) {
		n++
		if err := st.parseLine(line, seen, now); err != nil {
			return st, fmt.Errorf("line %d: %w", n, err)
		}
	}
	return st, nil
}

// parseLine adds a line of the file, newline included, to st; seen holds
// the lines' kinds and uids so far.
func (st limitState) parseLine(line string, seen map[string]bool, now time.Time) error {
	f, ok := strings.CutSuffix(line, "\n")
	if !ok {
		return errors.New("cut short")
	}
	fields := strings.Split(f, " ")
	nums, err := parseNumbers(fields[1:])
	if err != nil {
		return err
	}
	if len(nums) < 2 || nums[0] == 0 || nums[0] > 1<<32-1 {
		return errors.New("no uid other than root and time")
	}
	uid, start := int(nums[0]), time.Unix(0, nums[1])
	key := fields[0] + " " + fields[1]
	if seen[key] {
		return fmt.Errorf("uid %d's %s again", uid, fields[0])
	}
	seen[key] = true
	switch {
	case fields[0] == "hour" && len(nums) == 5 && nums[3] <= nums[2] && nums[4] <= 1:
		if openAt(now, start, auditBudgetWindow) {
			st.hours[uid] = uidBudget{start: start, used: nums[2], full: nums[3], told: nums[4] == 1}
		}
	case fields[0] == "minute" && len(nums) == 3 && nums[2] <= 1<<31-1:
		if openAt(now, start, time.Minute) {
			st.minutes[uid] = rejectMinute{start: start, n: int(nums[2])}
		}
	default:
		return errors.New("not a line the daemon writes")
	}
	return nil
}

// openAt reports whether a span of length long that began at start is
// still open at now: not over, and not begun after now (the clock went
// back).
func openAt(now, start time.Time, long time.Duration) bool {
	return !now.Before(start) && now.Sub(start) < long
}

// parseNumbers reads each of fields as a number the daemon writes: a
// non-negative decimal in its shortest form.
func parseNumbers(fields []string) ([]int64, error) {
	nums := make([]int64, len(fields))
	for i, s := range fields {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil || v < 0 || strconv.FormatInt(v, 10) != s {
			return nil, fmt.Errorf("%q is not a number the daemon writes", s)
		}
		nums[i] = v
	}
	return nums, nil
}

// readLimits reads the file at path, if the daemon wrote it (see the top
// of this file); an error wrapping fs.ErrNotExist when there is none.
func readLimits(path string, now time.Time) (limitState, error) {
	data, err := readDaemonFile(path, maxBudgetFile)
	if err != nil {
		return limitState{}, err
	}
	return parseLimits(data, now)
}

// loadLimits takes up the limits the daemon before this one kept. A file
// that is not the daemon's is not used: the daemon warns and goes on.
func (s *Server) loadLimits() {
	path := filepath.Join(s.cfg.RuntimeDir, budgetFile)
	st, err := readLimits(path, s.cfg.Now())
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		s.cfg.Log.Warn("the audit budget file is not used, and is replaced at the next save: every uid's hourly budget of the audit log, and minute of rejected records, start afresh",
			"file", path, "err", err)
		return
	}
	s.auditBudget.restore(st.hours)
	s.reject.restore(st.minutes)
	s.cfg.Log.Info("audit budgets taken up from the daemon before", "file", path, "hours", len(st.hours), "minutes", len(st.minutes))
}

// saveLimits writes the limits of the hours and minutes still open to
// the file, whole, in place of what was there. A failure is logged: the
// limits still hold in this daemon, and the file keeps what it had.
func (s *Server) saveLimits() {
	s.savingLimits.Lock()
	defer s.savingLimits.Unlock()
	now := s.cfg.Now()
	data := formatLimits(limitState{hours: s.auditBudget.snapshot(now), minutes: s.reject.minutes(now)})
	path := filepath.Join(s.cfg.RuntimeDir, budgetFile)
	tmp := path + ".tmp"
	err := writeNew(tmp, data)
	if err == nil {
		if err = os.Rename(tmp, path); err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		s.cfg.Log.Warn("cannot save the audit budgets; a daemon started after this one may give uids a fresh hour", "file", path, "err", err)
	}
}
