package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/audit"
	"github.com/rootgate/rootgate/internal/termsafe"
	"github.com/rootgate/rootgate/policy"
	"golang.org/x/sys/unix"
)

// Saving a policy rule a person confirmed at the prompt (docs/policy.md,
// "Saving a rule from the prompt").

// maxDropIn caps the drop-in file rules are appended to, as read back.
const maxDropIn = 4 << 20

// ruleFile is where a rule saved from the prompt goes, or "" when rules
// are not saved.
func (s *Server) ruleFile() string {
	if s.cfg.PolicyFile == "" || s.cfg.LoadPolicy == nil {
		return ""
	}
	return filepath.Join(policy.Dir(s.cfg.PolicyFile), approval.RuleDropIn)
}

// ruleSelfAdmits refuses a rule that would let a uid that can control
// the approver who saved it (d.Member's controllers, root aside) send the
// request shown and have it run without asking: a request from root is
// put to every approver, and an agent typing into one must not turn its
// answer into a rule for itself. --unsafe-self-approval allows it.
func (s *Server) ruleSelfAdmits(p *runPlan, d *approval.Decision, r *policy.Rule) error {
	if s.cfg.Broker != nil && s.cfg.Broker.UnsafeSelfApproval {
		return nil
	}
	for _, u := range d.Member.Controllers {
		if name := userNameOf(u); u != 0 && r.WhyNot(p.subject(name)) == "" {
			return fmt.Errorf("the rule would let uid %d (%s), who can control this approver's terminal or session, "+
				"run this without asking: add user= naming the requester", u, termsafe.Sanitize(name))
		}
	}
	return nil
}

// savedRule is a rule written to the policy.
type savedRule struct {
	File string
	Line int
	Text string
}

// saveRule saves the rule d carries for p's request, which d approved
// on prompt:
// it checks the rule again (never taking the approver's word), appends it
// with a comment to the drop-in file (atomically), reloads the policy and
// checks that the policy now allows the request. When it does not (a rule
// earlier in the order decides the request first, or the policy does not
// reload), the file is put back as it was and the policy reloaded again.
// The request stays approved either way: the person approved it. The
// outcome is recorded (rule_saved), logged, and told to the approver. It
// returns the rule saved, or nil.
func (s *Server) saveRule(p *runPlan, prompt *approval.Prompt, d *approval.Decision) *savedRule {
	log := s.cfg.Log.With("request_id", p.req.ID)
	approverUID := d.Member.UID
	rec := &audit.RuleSaved{Text: d.Rule, ApproverUID: approverUID, Approver: d.Member.Name, RequesterUID: p.peer.UID}
	tell := func(line string) {
		if d.After != nil {
			d.After.Outcome(p.req.ID, line)
		}
	}
	fail := func(err error) *savedRule {
		rec.Error = err.Error()
		log.Warn("rule not saved", "rule", d.Rule, "err", err)
		s.ruleEvent(p.req.ID, rec)
		tell("approved once; rule NOT saved: " + termsafe.Sanitize(err.Error()))
		return nil
	}
	file := s.ruleFile()
	rec.File = file
	if file == "" {
		return fail(errors.New("this daemon has no policy file to save a rule in"))
	}
	r, err := approval.CheckRule(prompt, d.Rule)
	if err != nil {
		return fail(err)
	}
	rec.Text = r.Text
	// Neither check needs the file: refused before anything is written.
	if err := s.ruleSelfAdmits(p, d, r); err != nil {
		return fail(err)
	}
	if err := p.othersMayChange(); err != nil {
		// As evaluate: no allow rule decides this request of this user.
		return fail(fmt.Errorf("no allow rule decides this request: %w", err))
	}
	s.saving.Lock()
	defer s.saving.Unlock()
	dir := filepath.Dir(file)
	dfd, err := openDropInDir(dir)
	if err != nil {
		return fail(err)
	}
	defer unix.Close(dfd)
	name := filepath.Base(file)
	old, existed, err := readDropIn(dfd, file)
	if err != nil {
		return fail(err)
	}
	// The same rule once: each request of a group one answer decided
	// (and a person saving a rule already there) would append it again,
	// and taking out the one line the person is told of would leave the
	// others in force.
	for i, l := range strings.Split(string(old), "\n") {
		if strings.TrimSpace(l) == r.Text {
			log.Info("rule already saved", "file", file, "line", i+1, "rule", r.Text)
			tell(fmt.Sprintf("approved; the rule is already in %s line %d: %s", termsafe.Quote(file), i+1, termsafe.Sanitize(r.Text)))
			return &savedRule{File: file, Line: i + 1, Text: r.Text}
		}
	}
	var b strings.Builder
	b.Write(old)
	if len(old) > 0 && !strings.HasSuffix(string(old), "\n") {
		b.WriteByte('\n')
	}
	if len(old) > 0 {
		b.WriteByte('\n')
	}
	b.WriteString(ruleComment(p, prompt, d, s.cfg.Now()))
	line := strings.Count(b.String(), "\n") + 1
	b.WriteString(r.Text + "\n")
	// What is written must read back as the policy it is meant to be: a
	// comment line holds requester text, escaped.
	if _, err := policy.Parse(file, strings.NewReader(b.String())); err != nil {
		return fail(fmt.Errorf("the file would not parse: %w", err))
	}
	if err := writeDropIn(dfd, name, []byte(b.String())); err != nil {
		return fail(err)
	}
	rec.Line = line
	if why := s.ruleInForce(p, prompt); why != "" {
		// Take it out again: a rule on disk that does nothing misleads.
		if err := s.takeRuleOut(dfd, file, old, existed, log); err != nil {
			why += fmt.Sprintf("; taking it out of %s failed: %v", file, err)
		}
		rec.Line = 0
		return fail(errors.New(why))
	}
	rec.OK = true
	log.Info("rule saved", "file", file, "line", line, "rule", r.Text, "by", d.Member.Name)
	s.ruleEvent(p.req.ID, rec)
	tell(fmt.Sprintf("approved; rule saved to %s line %d: %s", termsafe.Quote(file), line, termsafe.Sanitize(r.Text)))
	return &savedRule{File: file, Line: line, Text: r.Text}
}

// ruleInForce reloads the policy with a rule just saved for p's request,
// shown on prompt, and says why the policy does not allow the request
// now; "" when it does.
func (s *Server) ruleInForce(p *runPlan, prompt *approval.Prompt) (why string) {
	if err := s.ReloadPolicy(); err != nil {
		return "the policy does not reload with it: " + err.Error()
	}
	m := s.policy.Load().Evaluate(p.subject(prompt.Requester.User))
	switch {
	case m.Action == policy.ActionAllow:
		return ""
	case m.Rule != nil:
		return fmt.Sprintf("a stricter rule decides this request (%s:%d: %s): the saved rule would never be used; "+
			"edit or remove that rule", m.Rule.File, m.Rule.Line, m.Rule.Text)
	}
	return "the policy still does not allow this request"
}

// takeRuleOut puts the drop-in file, in the directory dfd, back as it was
// before a rule was saved in it (old, or none when it did not exist) and
// reloads the policy; it returns the error of putting it back.
func (s *Server) takeRuleOut(dfd int, file string, old []byte, existed bool, log *slog.Logger) error {
	name := filepath.Base(file)
	var err error
	if existed {
		err = writeDropIn(dfd, name, old)
	} else {
		err = unix.Unlinkat(dfd, name, 0)
		if err == nil {
			err = unix.Fsync(dfd)
		}
	}
	if err != nil {
		log.Error("cannot take a saved rule out again", "file", file, "err", err)
	}
	if err := s.ReloadPolicy(); err != nil {
		log.Error("policy reload after taking a rule out failed", "err", err)
	}
	return err
}

// ruleComment is the comment above a saved rule: who saved it, when, and
// from which request, shown on prompt. Requester text in it is escaped, and the command
// cut as the status cuts it: the file has a size limit, and a request's
// arguments could otherwise take it all.
func ruleComment(p *runPlan, prompt *approval.Prompt, d *approval.Decision, now time.Time) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# saved from the prompt by %s at %s\n", termsafe.Sanitize(approverText(d.Member.Name, d.Member.UID)), now.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "# request %s from uid %d (%s): %s\n", termsafe.Quote(p.req.ID), p.peer.UID, termsafe.Sanitize(prompt.Requester.User), approval.QuoteArgv(clipPipeline([][]string{prompt.Stages[0].Argv})[0]))
	return b.String()
}

// openDropInDir opens the policy's drop-in directory, making it (root's,
// mode 0755) when it is missing. It must be a directory, not a symlink,
// owned by root and writable by no group or other, as the policy loader
// requires, and the path to it root's alone (checkParents).
func openDropInDir(dir string) (int, error) {
	// A parent others may write could have the path lead elsewhere.
	if err := checkParents(dir); err != nil {
		return -1, fmt.Errorf("policy drop-in directory %w", err) // "DIR: PARENT is owned by …"
	}
	if err := unix.Mkdir(dir, 0o755); err == nil {
		if err := os.Chmod(dir, 0o755); err != nil { // past the umask
			return -1, fmt.Errorf("policy drop-in directory %s: %w", dir, err)
		}
	} else if !errors.Is(err, unix.EEXIST) {
		return -1, fmt.Errorf("cannot make the policy drop-in directory %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("policy drop-in directory %s: not a directory or a symlink: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("policy drop-in directory %s: %w", dir, err)
	}
	switch {
	case st.Uid != 0:
		unix.Close(fd)
		return -1, fmt.Errorf("policy drop-in directory %s is owned by uid %d, not root", dir, st.Uid)
	case st.Mode&0o022 != 0:
		unix.Close(fd)
		return -1, fmt.Errorf("policy drop-in directory %s is writable by group or others (mode %04o)", dir, st.Mode&0o7777)
	}
	return fd, nil
}

// readDropIn reads the drop-in file in the directory dfd; existed is
// false when there is none. It must be a regular file (not a symlink)
// owned by root and writable by no group or other.
func readDropIn(dfd int, file string) (data []byte, existed bool, err error) {
	fd, err := unix.Openat(dfd, filepath.Base(file), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("cannot open %s: %w", file, err)
	}
	f := os.NewFile(uintptr(fd), file)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, fmt.Errorf("%s: %w", file, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return nil, false, fmt.Errorf("%s is not a regular file", file)
	case st.Uid != 0:
		return nil, false, fmt.Errorf("%s is owned by uid %d, not root", file, st.Uid)
	case st.Mode&0o022 != 0:
		return nil, false, fmt.Errorf("%s is writable by group or others (mode %04o)", file, st.Mode&0o7777)
	}
	data, err = io.ReadAll(io.LimitReader(f, maxDropIn+1))
	if err != nil {
		return nil, false, fmt.Errorf("cannot read %s: %w", file, err)
	}
	if len(data) > maxDropIn {
		return nil, false, fmt.Errorf("%s is over %d bytes", file, maxDropIn)
	}
	return data, true, nil
}

// writeDropIn replaces the file name in the directory dfd with data,
// atomically: a new file (made with O_EXCL, never through a symlink),
// root's and mode 0644, synced, renamed over it, and the directory
// synced. Its name starts with "." while it is written, so a reload
// meanwhile skips it.
func writeDropIn(dfd int, name string, data []byte) error {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + name + "." + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
	if err != nil {
		return fmt.Errorf("cannot write the policy drop-in: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	err = unix.Fchown(fd, 0, 0)
	if err == nil {
		err = unix.Fchmod(fd, 0o644)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, name)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("cannot write the policy drop-in %s: %w", name, err)
	}
	return unix.Fsync(dfd)
}

// ruleEvent records a rule_saved record for request id.
func (s *Server) ruleEvent(id string, r *audit.RuleSaved) {
	if s.cfg.Audit == nil {
		return
	}
	if err := s.cfg.Audit.Append(&audit.Record{Kind: audit.KindRuleSaved, ID: id, Rule: r}); err != nil {
		s.cfg.Log.Error("cannot write audit record", "event", string(audit.KindRuleSaved), "err", err)
	}
}
