package terminal

import (
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"charm.land/bubbles/v2/textarea"
	tea "charm.land/bubbletea/v2"
	"charm.land/huh/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/termsafe"
)

// promptModel runs a huh form under our own Bubble Tea program. Above the
// form it shows the whole request (text, [approval.RenderWhole]) in a pager that
// fits the window, wrapped to its width; then who asks and every stage of
// the pipeline, one line each, cut to the width and saying so; then the
// form and a line saying which keys count. It adds:
//
//   - the dwell: keys count only [Dwell] after the prompt appeared; those
//     typed before are discarded, and type-ahead is flushed at its end;
//   - paging: when the request is taller than its pager, y (and moving to
//     Approve) is refused until the operator has paged to its end, with
//     ↓ j, space, PgDn (there is no key to jump to the end);
//   - room: in a window too short for the form and a pager, or narrower
//     than the layout needs (tooSmall), no key approves until it is
//     enlarged, and the key line says how large it must be;
//   - the countdown, the end of the request's context (endPromptMsg) and a
//     usable size on terminals that report 0x0.
type promptModel struct {
	form     *huh.Form
	p        *approval.Prompt
	text     string // the request, without its last newline
	deadline time.Time
	banner   bool          // the previous prompt was withdrawn: say this is another
	machine  string        // the line naming the daemon's machine, or ""
	flush    func()        // discards type-ahead
	dwell    time.Duration // how long after it is drawn keys count
	ended    bool          // the prompt's context ended before an answer

	width, height int
	minWidth      int      // the narrowest window the layout fits (layoutWidth)
	formWidth     int      // the form's widest row, at the last footer
	lines         []string // text wrapped to width
	stages        []string // who asks and each stage, cut to width
	top           int      // the first line of lines in the pager
	armed         bool     // the dwell has passed: keys count
	wantNote      bool     // denied with m: ask for a note for the requester
	seenEnd       bool     // the pager has shown the last line
	refused       bool     // y was refused for want of paging or of room
	footerLines   int      // the footer's height at the last View

	// A standing grant (g): grantStep is 0 on the request, 1 while the
	// grant is shown, 2 while the second confirmation for a request that
	// runs anything is. grant is the length confirmed.
	durations []time.Duration
	grantStep int
	grantIdx  int           // the duration shown, in durations
	grant     time.Duration // the grant confirmed, when the form completes
	grantNo   string        // why g was refused, shown in the key line
	armGen    int           // the dwell that armMsg{armGen} ends

	// A policy rule (r): ruleStep is 0 on the request, 1 while the rule
	// is edited, 2 while the checked rule is shown for confirmation, 3
	// while the second confirmation is. rule is the text confirmed, when
	// the form completes.
	ruleFile string
	ruleStep int
	edit     textarea.Model
	ruleErr  string // why the edited rule was refused, shown above it
	ruleText string // the checked rule, on steps 2 and 3
	rule     string
	ruleNo   string // why r was refused, shown in the key line
}

// endPromptMsg tells the program the prompt's context ended.
type endPromptMsg struct{}

// tickMsg refreshes the countdown.
type tickMsg struct{}

// armMsg ends the dwell numbered gen.
type armMsg struct{ gen int }

func tick() tea.Cmd {
	return tea.Tick(time.Second, func(time.Time) tea.Msg { return tickMsg{} })
}

func (m *promptModel) Init() tea.Cmd {
	m.layout(80, 24)
	return tea.Batch(m.form.Init(), tick(), tea.Tick(m.dwell, func(time.Time) tea.Msg { return armMsg{} }))
}

// show replaces the text in the pager, which must be paged to its end
// again, and starts a new dwell.
func (m *promptModel) show(text string) tea.Cmd {
	m.text = text
	m.lines = nil
	m.layout(m.width, m.height)
	m.seenEnd = false
	m.refused = false
	m.armed = false
	m.armGen++
	gen := m.armGen
	return tea.Tick(m.dwell, func(time.Time) tea.Msg { return armMsg{gen: gen} })
}

// grantText is the standing grant as step shows it.
func (m *promptModel) grantText() string {
	d := m.durations[m.grantIdx]
	text := approval.RenderGrant(m.p, d, time.Now())
	if m.grantStep == 2 {
		var b strings.Builder
		b.WriteString("!!! SECOND CONFIRMATION: this grant allows more than one command.\n")
		for _, why := range approval.RunsAnything(m.p) {
			b.WriteString("!!! " + why + ":\n")
		}
		b.WriteString("!!! with these arguments it may be harmless, but confirm only if you read them all.\n")
		text = b.String() + text
	}
	return strings.TrimSuffix(text, "\n")
}

// grantKey handles a key while a grant is shown.
func (m *promptModel) grantKey(msg tea.KeyPressMsg) (*promptModel, tea.Cmd) {
	switch msg.String() {
	case "n", "N", "esc":
		m.grantStep = 0
		cmd := m.show(strings.TrimSuffix(approval.RenderWhole(m.p), "\n"))
		m.armed, m.armGen = true, m.armGen+1 // the request was read: no new dwell
		return m, cmd
	case "d", "D":
		m.grantIdx = (m.grantIdx + 1) % len(m.durations)
		top, seen := m.top, m.seenEnd
		cmd := m.show(m.grantText())
		m.top, m.seenEnd, m.armed, m.armGen = top, seen, true, m.armGen+1
		m.scroll(0)
		return m, cmd
	case "y", "Y":
		if !m.seenEnd {
			m.refused = true
			return m, nil
		}
		if m.grantStep == 1 && len(approval.RunsAnything(m.p)) > 0 {
			m.grantStep = 2
			return m, m.show(m.grantText())
		}
		m.grant = m.durations[m.grantIdx]
		_, cmd := m.form.Update(tea.KeyPressMsg{Code: 'y', Text: "y"})
		return m, cmd
	case "ctrl+c":
		_, cmd := m.form.Update(msg) // denies, as on the request
		return m, cmd
	}
	return m, nil
}

// contPrefix is what a wrapped line's continuation lines start with: the
// requester's mark again for the requester's words, an arrow indented
// deeper than any label of the daemon's otherwise. Either way no
// continuation line can look like a line of the daemon's.
func contPrefix(line string) string {
	if strings.HasPrefix(line, approval.RequesterMark) {
		return approval.RequesterMark + "  ↳ "
	}
	return strings.Repeat(" ", len(line)-len(strings.TrimLeft(line, " "))) + "    ↳ "
}

// wrapLine cuts line into pieces of at most width cells ([termsafe.Cells]).
func wrapLine(line string, width int) []string {
	if termsafe.Cells(line) <= width {
		return []string{line}
	}
	prefix := contPrefix(line)
	w := max(width-termsafe.Cells(prefix), 8)
	var parts []string
	for line != "" {
		var part string
		part, line = termsafe.Cut(line, w)
		if len(parts) > 0 {
			part = prefix + part
		}
		parts = append(parts, part)
	}
	return parts
}

// layout wraps the request for a window of w×h cells.
func (m *promptModel) layout(w, h int) {
	if w == m.width && h == m.height && m.lines != nil {
		return
	}
	m.width, m.height = w, h
	m.lines = m.lines[:0]
	for line := range strings.SplitSeq(m.text, "\n") {
		m.lines = append(m.lines, wrapLine(line, w)...)
	}
	m.top = 0
	m.scroll(0)
	fitted := []string{"Asked by " + approval.DescribeRequester(&m.p.Requester) + ", per the kernel"}
	for i, st := range m.p.Stages {
		fitted = append(fitted, fmt.Sprintf("  [%d] %s", i+1, approval.QuoteArgv(st.Argv)))
	}
	m.stages = m.stages[:0]
	for _, l := range fitted {
		m.stages = append(m.stages, fit(l, w))
	}
	m.minWidth = layoutWidth(m.text, fitted)
}

// ownLineRunes bounds the length of the footer's own lines that fit cuts
// (the key line, the pager's status line, the banners): each is under
// 1000 characters, so fit's marker for them has at most 3 digits.
const ownLineRunes = 999

// layoutWidth is the narrowest window in which every row of a prompt for
// text (the pager's lines) and fitted (the footer's lines of the
// requester's words, which fit cuts) is drawn whole or cut saying so:
// wrapLine's continuation rows are their prefix and at least 8 cells
// more, and fit keeps at least 8 cells and its marker. Below it a row
// would be wider than the window and lose its end without a word
// (draw cuts it at the edge), so the prompt is too small.
func layoutWidth(text string, fitted []string) int {
	need := fitWidth(strings.Repeat("x", ownLineRunes))
	for line := range strings.SplitSeq(text, "\n") {
		need = max(need, min(termsafe.Cells(line), termsafe.Cells(contPrefix(line))+8))
	}
	for _, l := range fitted {
		need = max(need, fitWidth(l))
	}
	return need
}

// fitWidth is the narrowest width at which fit(s) is no wider than it.
func fitWidth(s string) int {
	return min(termsafe.Cells(s), 8+termsafe.Cells(fitMarker(utf8.RuneCountInString(s))))
}

// footer is what goes below the pager: who asks, every stage on its own
// line, the form and the key line.
func (m *promptModel) footer() []string {
	var f []string
	if m.banner {
		f = append(f, fit(withdrawnBanner, m.width))
	}
	if m.machine != "" {
		f = append(f, fit(m.machine, m.width))
	}
	if m.p.Group > 1 {
		f = append(f, fit(approval.GroupBanner(m.p.Group), m.width))
	}
	if n := len(m.lines); m.pagerHeight() < n {
		end := min(m.top+m.pagerHeight(), n)
		status := fmt.Sprintf("── lines %d-%d of %d · ↓ j space PgDn: on · ↑ k b PgUp: back", m.top+1, end, n)
		if !m.seenEnd {
			status += " · page to the end before y counts"
		}
		f = append(f, fit(status, m.width))
	}
	f = append(f, m.stages...)
	if m.ruleStep == 1 {
		f = append(f, editorRows(m.edit.View(), m.width)...)
	} else {
		form := strings.Split(strings.TrimRight(m.form.View(), "\n"), "\n")
		// The form wraps its title to the window, but not its
		// buttons' row: the window must hold the widest row.
		m.formWidth = 0
		for _, row := range form {
			m.formWidth = max(m.formWidth, ansi.StringWidth(row))
		}
		f = append(f, form...)
	}
	left := max(time.Until(m.deadline).Round(time.Second), 0)
	var keys string
	switch {
	case !m.armed:
		keys = " keys are not accepted yet: read the request"
	case m.tooSmall():
		// Wrapped, not cut: in a window this narrow, fit would leave
		// only its first words.
		for rest := m.tooSmallKeys(); rest != ""; {
			var row string
			row, rest = termsafe.Cut(rest, max(m.width, 1))
			f = append(f, row)
		}
		return append(f, " times out in "+approval.DisplaySeconds(left))
	case m.grantStep == 1 && !m.seenEnd:
		keys = " GRANT: page to the end of the grant before y counts · n or Esc back to the request"
	case m.grantStep == 1:
		keys = fmt.Sprintf(" GRANT: y approve and grant for %s · d other length (%s) · n or Esc back to the request",
			approval.DisplayDuration(m.durations[m.grantIdx]), durationList(m.durations))
	case m.grantStep == 2 && !m.seenEnd:
		keys = " SECOND CONFIRMATION: page to the end before y counts · n or Esc back to the request"
	case m.grantStep == 2:
		keys = " SECOND CONFIRMATION: y approve and grant it anyway · n or Esc back to the request"
	case m.ruleStep == 1:
		keys = " RULE: edit it · Enter check it · Esc back to the request · ctrl+c deny"
	case m.ruleStep == 2 && !m.seenEnd:
		keys = " RULE: page to the end of the rule before y counts · n or Esc back to editing"
	case m.ruleStep == 2:
		keys = " RULE: y approve and save this rule · n or Esc back to editing"
	case m.ruleStep == 3 && !m.seenEnd:
		keys = " SECOND CONFIRMATION: page to the end before y counts · n or Esc back to editing"
	case m.ruleStep == 3:
		keys = " SECOND CONFIRMATION: y approve and save the rule anyway · n or Esc back to editing"
	case m.refused && !m.seenEnd:
		keys = " y refused: page to the end first (space, PgDn) · n or Esc deny · m deny with a note"
	case !m.seenEnd:
		keys = " page to the end of the request before y counts · n or Esc deny · m deny with a note"
	case m.grantNo != "":
		keys = " y approve · n or Esc deny · m deny with a note · no grant: " + m.grantNo
	case m.ruleNo != "":
		keys = " y approve · n or Esc deny · m deny with a note · no rule: " + m.ruleNo
	case m.ruleFile != "":
		keys = " y approve · n or Esc deny · m deny with a note · g grant for a time · r save a rule · Enter takes the highlighted answer"
	default:
		keys = " y approve · n or Esc deny · m deny with a note · g grant for a time · Enter takes the highlighted answer"
	}
	f = append(f, fit(keys, m.width), " times out in "+approval.DisplaySeconds(left))
	return f
}

// fit cuts s to width cells ([termsafe.Cells]), saying how many
// characters it left out.
func fit(s string, width int) string {
	if termsafe.Cells(s) <= width {
		return s
	}
	n := utf8.RuneCountInString(s)
	kept, _ := termsafe.Cut(s, max(width-termsafe.Cells(fitMarker(n)), 8))
	return kept + fitMarker(n-utf8.RuneCountInString(kept))
}

// fitMarker is what fit ends a line with when it left out n characters.
func fitMarker(n int) string { return fmt.Sprintf(" …(+%d more)", n) }

func (m *promptModel) pagerHeight() int {
	// One line spare: a view as tall as the window scrolls it.
	return max(m.height-m.footerLines-1, 3)
}

// tooSmall reports whether the window cannot hold the footer and a pager
// of 3 lines (the top of the view would be cut off), or is narrower than
// the layout needs (minWidth: rows would be cut at its edge unsaid):
// then nothing can be approved until it is enlarged.
func (m *promptModel) tooSmall() bool {
	return m.footerLines+3+1 > m.height || m.width < m.needWidth()
}

// needWidth is the narrowest window the prompt fits: its layout's and
// its form's.
func (m *promptModel) needWidth() int { return max(m.minWidth, m.formWidth) }

// tooSmallKeys is the key line of a window too small, saying what it
// lacks.
func (m *promptModel) tooSmallKeys() string {
	var need []string
	if m.width < m.needWidth() {
		need = append(need, fmt.Sprintf("%d columns (it has %d)", m.needWidth(), m.width))
	}
	if m.footerLines+3+1 > m.height {
		need = append(need, fmt.Sprintf("%d rows (it has %d)", m.footerLines+3+1, m.height))
	}
	keys := " window too small to show the request: enlarge it to " + strings.Join(need, " and ") + " · n or Esc deny · m deny with a note"
	if m.refused {
		keys = " y refused:" + keys
	}
	return keys
}

// scroll moves the pager by d lines, within the request.
func (m *promptModel) scroll(d int) {
	m.top = max(min(m.top+d, len(m.lines)-m.pagerHeight()), 0)
}

func (m *promptModel) Update(msg tea.Msg) (*promptModel, tea.Cmd) {
	switch msg := msg.(type) {
	case endPromptMsg:
		m.ended = true
		return m, tea.Quit
	case tickMsg:
		if m.form.State != huh.StateNormal {
			return m, nil
		}
		return m, tick()
	case armMsg:
		if msg.gen != m.armGen {
			return m, nil
		}
		m.armed = true
		m.flush() // what was typed during the dwell and not yet read
		return m, nil
	case tea.WindowSizeMsg:
		// A terminal that does not know its size (a serial console, a
		// fresh pty) says 0x0, which would give the form no room at all.
		if msg.Width <= 0 {
			msg.Width = 80
		}
		if msg.Height <= 0 {
			msg.Height = 24
		}
		m.layout(msg.Width, msg.Height)
		m.refused = false // a y refused at the old size is not this one's
		if m.ruleStep == 1 {
			m.edit.SetWidth(max(msg.Width-1, 10))
			sizeEditor(&m.edit)
		}
		_, cmd := m.form.Update(msg)
		return m, cmd
	case tea.PasteMsg:
		if m.armed && m.ruleStep == 1 {
			return m.ruleEditKey(msg)
		}
		return m, nil
	case tea.KeyPressMsg:
		if !m.armed {
			return m, nil // too early to be an answer to this request
		}
		if m.ruleStep == 1 {
			return m.ruleEditKey(msg)
		}
		ph := m.pagerHeight()
		switch msg.String() {
		case "down", "j":
			m.scroll(1)
			return m, nil
		case "up", "k":
			m.scroll(-1)
			return m, nil
		case "pgdown", "space", " ", "f", "ctrl+f":
			m.scroll(ph - 1)
			return m, nil
		case "pgup", "b", "ctrl+b":
			m.scroll(-(ph - 1))
			return m, nil
		case "y", "Y", "left", "right", "h", "l", "tab", "shift+tab", "enter":
			// Enter takes the highlighted answer, which may be Approve.
			if !m.seenEnd && msg.String() != "enter" || m.tooSmall() {
				m.refused = true
				return m, nil
			}
		}
		if m.grantStep > 0 {
			return m.grantKey(msg)
		}
		if m.ruleStep > 0 {
			return m.ruleKey(msg)
		}
		switch msg.String() {
		case "r", "R":
			if !m.seenEnd || m.tooSmall() {
				m.refused = true
				return m, nil
			}
			return m, m.startRule()
		case "g", "G":
			switch {
			case !m.seenEnd || m.tooSmall():
				m.refused = true
				return m, nil
			case approval.Grantable(m.p) != "":
				m.grantNo = approval.Grantable(m.p)
				return m, nil
			case len(m.durations) == 0:
				m.grantNo = "this rootgated keeps no standing grants"
				return m, nil
			}
			m.grantStep, m.grantIdx = 1, 0
			return m, m.show(m.grantText())
		case "m", "M":
			// Deny, then ask for a note: the form takes it as n.
			m.wantNote = true
			_, cmd := m.form.Update(tea.KeyPressMsg{Code: 'n', Text: "n"})
			return m, cmd
		}
	}
	_, cmd := m.form.Update(msg)
	return m, cmd
}

func (m *promptModel) View() string {
	if m.ended || m.form.State != huh.StateNormal {
		return "" // the form leaves the screen
	}
	// The footer's height fixes the pager's, which decides whether the
	// footer has a status line: settle it, then draw.
	footer := m.footer()
	for range 3 {
		if len(footer) == m.footerLines {
			break
		}
		m.footerLines = len(footer)
		m.scroll(0)
		footer = m.footer()
	}
	ph := m.pagerHeight()
	end := min(m.top+ph, len(m.lines))
	if end == len(m.lines) && !m.tooSmall() {
		m.seenEnd = true // this view shows the request's last line
	}
	view := make([]string, 0, ph+len(footer))
	view = append(view, m.lines[m.top:end]...)
	view = append(view, footer...)
	return strings.Join(view, "\n") + "\n"
}

// inlineView runs a [promptModel] under a Bubble Tea program that has no
// renderer: after each message it draws the model's view whole below the
// cursor, in place of the view drawn before, each line cut to the window's
// width and the view to its height (its last lines kept). Every line is
// written in full, blanks included, so what is on screen is also in the
// bytes written, in order.
type inlineView struct {
	m     *promptModel
	out   io.Writer
	last  string // the view drawn last
	lines int    // how many lines it took
	err   error  // the first write error
}

func (v *inlineView) Init() tea.Cmd {
	cmd := v.m.Init()
	v.draw()
	return cmd
}

func (v *inlineView) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	_, cmd := v.m.Update(msg)
	v.draw()
	if v.err != nil {
		return v, tea.Quit
	}
	return v, cmd
}

// View is empty: the program has no renderer; draw draws.
func (v *inlineView) View() tea.View { return tea.View{} }

// draw replaces the view on screen with the model's current one.
func (v *inlineView) draw() {
	view := v.m.View()
	if view == v.last || v.err != nil {
		return
	}
	v.last = view
	lines := strings.Split(strings.TrimSuffix(view, "\n"), "\n")
	if view == "" {
		lines = nil
	}
	// A view as tall as the window would scroll it: keep one line spare.
	if h := max(v.m.height-1, 1); len(lines) > h {
		lines = lines[len(lines)-h:]
	}
	var b strings.Builder
	if v.lines > 0 {
		b.WriteString(ansi.CursorUp(v.lines))
	}
	b.WriteString("\r" + ansi.EraseScreenBelow)
	for _, line := range lines {
		b.WriteString(ansi.Truncate(line, v.m.width, "") + ansi.ResetStyle + "\r\n")
	}
	v.lines = len(lines)
	_, v.err = io.WriteString(v.out, b.String())
}
