package daemon_test

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/wire"
)

// budgetArgs give a test daemon a budget a loop of allowed runs spends
// in a few dozen runs.
var budgetArgs = []string{"--audit-uid-budget", "64K"}

// budgetPolicy allows the runs the loop sends.
const budgetPolicy = "allow any true ...\n"

// spendBudget has uid run `true` with a 200-byte argument (loopAllowed)
// on sock until its hourly budget is spent, and returns the busy answer's
// message that refuses it.
func spendBudget(t *testing.T, sock string, uid, gid uint32, prefix string) string {
	t.Helper()
	out, err := floodAs(uid, gid, loopAllowed, sock, 300, prefix, strings.Repeat("x", 200)).Output()
	if err != nil {
		t.Fatalf("loop: %v\n%s", err, out)
	}
	answers := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	last := answers[len(answers)-1]
	if !strings.Contains(last, `"code":"busy"`) || !budgetSpent(uid).MatchString(last) {
		t.Fatalf("after %d runs of uid %d, answered %s, want its budget spent", len(answers)-1, uid, last)
	}
	return budgetSpent(uid).FindStringSubmatch(last)[0]
}

// budgetSpent matches the message that refuses uid once its budget of
// 64K is spent.
func budgetSpent(uid uint32) *regexp.Regexp {
	return regexp.MustCompile(`server busy: the requests of uid ` + strconv.Itoa(int(uid)) + ` added their hourly budget of 65536 bytes to the audit log; more are refused until \S+Z`)
}

// budgetWarning is the start of the warning logged once per uid and
// hour when its budget is spent.
const budgetWarning = `msg="a uid's requests took their hourly budget of the audit log`

// afterRestart checks a daemon started after the one uid a spent its
// budget on: a is refused with the same message, until the same time,
// and b and root are served. It then stops the daemon and, when warned
// is set (the daemon before stopped cleanly, having warned), requires
// that it did not warn again within the hour.
func afterRestart(t *testing.T, d *daemonProc, a, b userAccount, spent string, warned bool) {
	t.Helper()
	r := sendAs(t, d.Sock, a.uid, a.gid, []uint32{}, request(map[string]any{"pipeline": [][]string{{"true"}}}))
	if r.Code != wire.CodeBusy || r.Message != spent {
		t.Fatalf("after a restart, %s answered %s, want error %q", a.name, strings.TrimSpace(r.raw), spent)
	}
	wantOK(t, sendAs(t, d.Sock, b.uid, b.gid, []uint32{}, request(map[string]any{"pipeline": [][]string{{"true"}}})))
	wantOK(t, d.send(map[string]any{"pipeline": [][]string{{"true"}}}))
	d.Terminate() // all its log written
	if warned && strings.Contains(d.Stderr.String(), budgetWarning) {
		t.Errorf("warned again within the hour after a restart:\n%s", d.Stderr)
	}
}

// TestAuditBudgetSurvivesRestart (issue 27's budget): the hourly budget
// of the audit log was kept in memory only, so a requester that spent it
// and stayed silent for --idle-exit had a socket-activated daemon exit,
// and the next connection's daemon gave it a fresh hour: the bound held
// per daemon run, not per hour. The budgets are kept in the runtime
// directory: when the daemon exits (idle, SIGTERM) and as they grow, so a
// daemon killed outright keeps them too. The uid (bkeepa) is still
// refused by the next daemon, until the same time; another (bkeepb) and
// root are served.
func TestAuditBudgetSurvivesRestart(t *testing.T) {
	t.Parallel()
	a := addAccount(t, "bkeepa", "-M", "-s", "/usr/sbin/nologin")
	b := addAccount(t, "bkeepb", "-M", "-s", "/usr/sbin/nologin")
	for _, stop := range []string{"SIGTERM", "SIGKILL"} {
		t.Run(stop, func(t *testing.T) {
			t.Parallel()
			o := opts{Dir: shortDir(t), Policy: budgetPolicy, Args: budgetArgs}
			d := startDaemon(t, o)
			openToAll(t, d)
			spent := spendBudget(t, d.Sock, a.uid, a.gid, "bkeep-"+stop)
			if stop == "SIGTERM" {
				d.waitLog("level=WARN", budgetWarning)
				d.Stop()
			} else {
				_ = d.Cmd.Process.Kill()
				<-d.Done()
			}
			d2 := startDaemon(t, o)
			openToAll(t, d2)
			afterRestart(t, d2, a, b, spent, stop == "SIGTERM")
		})
	}
	t.Run("idle exit", func(t *testing.T) {
		t.Parallel()
		// --max-skew 5s (loopAllowed's times are whole seconds): the
		// daemon exits 10 s (the replay window) after the last request.
		args := append([]string{"--idle-exit", "1s", "--max-skew", "5s"}, budgetArgs...)
		d := startActivated(t, budgetPolicy, []string{"requests"}, args...)
		openToAll(t, d)
		spent := spendBudget(t, d.Sock, a.uid, a.gid, "bkeep-idle")
		if code := d.exited(60 * time.Second); code != 0 || !strings.Contains(d.Stderr.String(), `msg="idle; exiting"`) || !strings.Contains(d.Stderr.String(), budgetWarning) {
			t.Fatalf("exit code %d, want an idle exit after the budget's warning\n%s", code, d.Stderr)
		}
		// The next daemon, on the same runtime directory and log, as
		// systemd starts it for the next connection.
		d2 := startActivated(t, budgetPolicy, []string{"requests"}, append(args,
			"--runtime-dir", filepath.Join(d.Dir, "run"), "--audit", auditPath(d.Dir))...)
		openToAll(t, d2)
		afterRestart(t, d2, a, b, spent, true)
	})
}

// TestAuditBudgetFileNotTrusted: the runtime directory's audit budget
// file is only read as the daemon writes it. A file that says uid bkeepc
// spent its budget is trusted when it is the daemon's (root's, 0600,
// well-formed: bkeepc is refused), and not when it is a symlink, a
// FIFO, another uid's file, a file others may write, or has a line the
// daemon does not write: the daemon warns, serves, bkeepc included, and
// replaces it at its stop with a file of its own, writing nothing
// through a symlink.
func TestAuditBudgetFileNotTrusted(t *testing.T) {
	t.Parallel()
	c := addAccount(t, "bkeepc", "-M", "-s", "/usr/sbin/nologin")
	start := time.Now().Add(-time.Minute)
	forged := fmt.Sprintf("rootgate audit budget 1\nhour %d %d %d 0 1\n", c.uid, start.UnixNano(), 1<<20)
	spent := wire.AuditBudgetError(int(c.uid), 64<<10, start.Add(time.Hour)).Error()
	write := func(t *testing.T, path, text string, mode os.FileMode) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		make func(t *testing.T, path string) // puts the file at path
		why  string                          // in the warning; "" if trusted
	}{
		{"the daemon's", func(t *testing.T, path string) { write(t, path, forged, 0o600) }, ""},
		{"symlink", func(t *testing.T, path string) {
			target := filepath.Join(filepath.Dir(path), "elsewhere")
			write(t, target, forged, 0o600)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}, "it is a symlink"},
		{"FIFO", func(t *testing.T, path string) {
			if err := syscall.Mkfifo(path, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "it is not a regular file"},
		{"another uid's", func(t *testing.T, path string) {
			write(t, path, forged, 0o600)
			if err := os.Chown(path, int(c.uid), int(c.gid)); err != nil {
				t.Fatal(err)
			}
		}, fmt.Sprintf("it is owned by uid %d", c.uid)},
		{"others may write", func(t *testing.T, path string) { write(t, path, forged, 0o622) }, "its mode 0622"},
		{"a line not the daemon's", func(t *testing.T, path string) { write(t, path, forged+"hour x\n", 0o600) }, "line 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := shortDir(t)
			run := filepath.Join(dir, "run")
			if err := os.Mkdir(run, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(run, "auditbudget")
			tc.make(t, path)
			d := startDaemon(t, opts{Dir: dir, Policy: budgetPolicy, Args: budgetArgs})
			openToAll(t, d)
			r := sendAs(t, d.Sock, c.uid, c.gid, []uint32{}, request(map[string]any{"pipeline": [][]string{{"true"}}}))
			if tc.why == "" {
				if r.Code != wire.CodeBusy || r.Message != spent {
					t.Fatalf("with the daemon's own file, %s answered %s, want error %q", c.name, strings.TrimSpace(r.raw), spent)
				}
				d.Stop()
				return
			}
			if r.Status != wire.StatusOK {
				t.Fatalf("%s answered %s: the file was trusted", c.name, strings.TrimSpace(r.raw))
			}
			d.waitLog("level=WARN", `msg="the audit budget file is not used`)
			if log := d.Stderr.String(); !strings.Contains(log, tc.why) {
				t.Errorf("the warning does not say %q:\n%s", tc.why, log)
			}
			d.Stop()
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if st := fi.Sys().(*syscall.Stat_t); !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || st.Uid != 0 {
				t.Errorf("after the daemon stopped, the file is %s, uid %d", fi.Mode(), st.Uid)
			}
			if b, err := os.ReadFile(filepath.Join(run, "elsewhere")); err == nil && string(b) != forged {
				t.Errorf("the daemon wrote through the symlink: %q", b)
			}
		})
	}
}

// TestRejectMinuteSurvivesRestart: the minute of a uid's rejected
// records (--audit-reject-rate) is kept across a restart like the hourly
// budget: a uid (bkeepd) that had its rate of rejected records written
// does not get a fresh minute from the next daemon; its next refused
// request within the minute is counted in a dropped record instead.
func TestRejectMinuteSurvivesRestart(t *testing.T) {
	t.Parallel()
	u := addAccount(t, "bkeepd", "-M", "-s", "/usr/sbin/nologin")
	const rate = 3
	o := opts{Dir: shortDir(t), Args: []string{"--audit-reject-rate", strconv.Itoa(rate)}}
	stale := func(id string) string { return request(map[string]any{"id": id, "time": "2000-01-01T00:00:00Z"}) }
	d := startDaemon(t, o)
	openToAll(t, d)
	began := time.Now()
	for i := range rate {
		id := fmt.Sprintf("bkeepd-%d", i)
		if r := sendAs(t, d.Sock, u.uid, u.gid, []uint32{}, stale(id)); r.Status != wire.StatusError {
			t.Fatalf("%s: %s", id, r.raw)
		}
		waitTrail(t, d.Dir, id, "rejected")
	}
	d.Stop()
	d2 := startDaemon(t, o)
	openToAll(t, d2)
	if r := sendAs(t, d2.Sock, u.uid, u.gid, []uint32{}, stale("bkeepd-after")); r.Status != wire.StatusError {
		t.Fatalf("bkeepd-after: %s", r.raw)
	}
	if time.Since(began) >= time.Minute {
		t.Fatalf("the restart took %s, past the minute this test needs", time.Since(began))
	}
	d2.Stop() // writes the dropped record
	var rejected []string
	dropped := 0
	for _, rec := range records(t, d.Dir) {
		switch {
		case rec.Kind == audit.KindRejected && rec.Peer.UID == int(u.uid):
			rejected = append(rejected, rec.ID)
		case rec.Kind == audit.KindDropped && rec.Peer.UID == int(u.uid):
			dropped += rec.Dropped.Count
		}
	}
	if len(rejected) != rate || dropped != 1 {
		t.Errorf("rejected records %q and %d counted in dropped records, want the first %d and 1", rejected, dropped, rate)
	}
}
