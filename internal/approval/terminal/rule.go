package terminal

import (
	"fmt"
	"strings"

	"charm.land/bubbles/v2/textarea"
	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/internal/termsafe"
)

// The policy rule a prompt offers to save (r): edited in a text field,
// checked, shown in full, confirmed. See [Terminal].

// maxRuleText bounds the rule being edited.
const maxRuleText = 8 << 10

// editorPrompt starts each row of the field.
const editorPrompt = "│ "

// newRuleEditor is the field the rule is edited in: no colour, no line
// numbers, every line of the rule on screen (it wraps).
func newRuleEditor(text string, width int) textarea.Model {
	ta := textarea.New()
	ta.ShowLineNumbers = false
	ta.Prompt = editorPrompt
	ta.CharLimit = maxRuleText
	ta.KeyMap.InsertNewline.SetEnabled(false) // Enter checks the rule
	plain := lipgloss.NewStyle()
	st := textarea.StyleState{Base: plain, Text: plain, CursorLine: plain, CursorLineNumber: plain, EndOfBuffer: plain,
		LineNumber: plain, Placeholder: plain, Prompt: plain}
	ta.SetStyles(textarea.Styles{Focused: st, Blurred: st, Cursor: textarea.CursorStyle{Shape: tea.CursorBlock}})
	ta.SetWidth(max(width-1, 10))
	ta.SetValue(text)
	ta.Focus()
	sizeEditor(&ta)
	return ta
}

// sizeEditor makes the field as tall as its wrapped text, so all of it
// shows: the field's rows are measured by Go's grapheme measure, which
// [termsafe.Cells] never counts short (a run of spacing marks is one cell
// to the former).
func sizeEditor(ta *textarea.Model) {
	w := max(ta.Width(), 1)
	// One cell more than the text, for the cursor after its end.
	ta.SetHeight((termsafe.Cells(ta.Value()) + w) / w)
}

// editorRows is the field's view with each row cut to at most width cells
// ([termsafe.Cells]), each piece marked as the field's: a row the field
// measured short would wrap on the terminal, and the prompt's redraw,
// which moves up by the lines it wrote, would leave rows of the old view
// on screen. The cursor's escape sequences take no cells and stay whole.
func editorRows(view string, width int) []string {
	var rows []string
	for row := range strings.SplitSeq(strings.TrimRight(view, "\n"), "\n") {
		var b strings.Builder
		n, state := 0, byte(0)
		for row = strings.TrimRight(row, " "); row != ""; {
			seq, w, size, st := ansi.DecodeSequence(row, state, nil)
			state, row = st, row[size:]
			if w == 0 && (ansi.HasEscPrefix(seq) || seq[0] < 0x20) {
				b.WriteString(seq)
				continue
			}
			for _, r := range seq {
				c := termsafe.Cells(string(r))
				if n+c > width {
					rows = append(rows, b.String())
					b.Reset()
					b.WriteString(editorPrompt)
					n = termsafe.Cells(editorPrompt)
				}
				b.WriteRune(r)
				n += c
			}
		}
		rows = append(rows, b.String())
	}
	return rows
}

// editText is what the pager shows while the rule is edited.
func (m *promptModel) editText() string {
	var b strings.Builder
	b.WriteString("SAVE A POLICY RULE: edit the rule below, then press Enter.\n")
	b.WriteString("It admits exactly this request. To admit more, replace an argument by a glob\n")
	b.WriteString("(*, ?, [...]) or a placeholder ({unit}, {int<=N}, {a|b}), or end it with ...;\n")
	b.WriteString("it must still match this request (docs/policy.md has the grammar).\n")
	b.WriteString("It goes to " + termsafe.Quote(m.ruleFile) + ".")
	if m.ruleErr != "" {
		b.WriteString("\n!!! RULE REFUSED: " + m.ruleErr)
	}
	return b.String()
}

// startRule opens the editor on the rule for exactly this request.
func (m *promptModel) startRule() tea.Cmd {
	if m.ruleFile == "" {
		m.ruleNo = "this rootgated saves no rules (it has no policy file)"
		return nil
	}
	text, err := approval.SuggestRule(m.p)
	if err != nil {
		m.ruleNo = termsafe.Sanitize(err.Error())
		return nil
	}
	if len(text) > maxRuleText {
		m.ruleNo = fmt.Sprintf("the rule for this request would be over %d bytes", maxRuleText)
		return nil
	}
	m.ruleStep, m.ruleErr = 1, ""
	m.edit = newRuleEditor(text, m.width)
	return m.show(m.editText())
}

// ruleConfirmText is the rule as step 2 or 3 shows it.
func (m *promptModel) ruleConfirmText() string {
	text := approval.RenderRule(m.p, m.ruleText, m.ruleFile)
	if m.ruleStep == 3 {
		var b strings.Builder
		b.WriteString("!!! SECOND CONFIRMATION: this rule allows more than the one command shown.\n")
		r, err := approval.CheckRule(m.p, m.ruleText)
		if err == nil {
			for _, why := range approval.RuleRunsAnything(m.p, r) {
				b.WriteString("!!! " + why + ",\n")
			}
		}
		if err == nil && !r.Open() {
			b.WriteString("!!! and the rule binds the input and the directory shown, but not the files the program reads:\n")
			b.WriteString("!!! it lets the requester run whatever the files there (or named by its arguments) say by then, as often as it likes.\n")
		} else {
			b.WriteString("!!! and the rule admits other arguments (a glob, a placeholder or ...):\n")
			b.WriteString("!!! it lets the requester run whatever those arguments say, as often as it likes.\n")
		}
		text = b.String() + text
	}
	return strings.TrimSuffix(text, "\n")
}

// ruleEditKey handles a key (or a paste) while the rule is edited.
func (m *promptModel) ruleEditKey(msg tea.Msg) (*promptModel, tea.Cmd) {
	if k, ok := msg.(tea.KeyPressMsg); ok {
		switch k.String() {
		case "esc":
			m.ruleStep = 0
			cmd := m.show(strings.TrimSuffix(approval.RenderWhole(m.p), "\n"))
			m.armed, m.armGen = true, m.armGen+1 // the request was read: no new dwell
			return m, cmd
		case "ctrl+c":
			m.ruleStep = 0
			_, cmd := m.form.Update(msg) // denies, as on the request
			return m, cmd
		case "enter":
			text := strings.TrimSpace(m.edit.Value())
			if _, err := approval.CheckRule(m.p, text); err != nil {
				m.ruleErr = termsafe.Sanitize(err.Error())
				top := m.top
				cmd := m.show(m.editText())
				m.top, m.armed, m.armGen = top, true, m.armGen+1
				m.scroll(0)
				return m, cmd
			}
			m.ruleText, m.ruleErr, m.ruleStep = text, "", 2
			return m, m.show(m.ruleConfirmText())
		}
	}
	var cmd tea.Cmd
	m.edit, cmd = m.edit.Update(msg)
	sizeEditor(&m.edit)
	return m, cmd
}

// ruleKey handles a key while the checked rule is shown for confirmation.
func (m *promptModel) ruleKey(msg tea.KeyPressMsg) (*promptModel, tea.Cmd) {
	switch msg.String() {
	case "n", "N", "esc":
		m.ruleStep = 1
		cmd := m.show(m.editText())
		m.armed, m.armGen = true, m.armGen+1
		return m, cmd
	case "y", "Y":
		if !m.seenEnd {
			m.refused = true
			return m, nil
		}
		r, err := approval.CheckRule(m.p, m.ruleText)
		if err != nil { // checked on Enter; the request has not changed
			m.ruleStep, m.ruleErr = 1, termsafe.Sanitize(err.Error())
			return m, m.show(m.editText())
		}
		if m.ruleStep == 2 && len(approval.RuleRunsAnything(m.p, r)) > 0 {
			m.ruleStep = 3
			return m, m.show(m.ruleConfirmText())
		}
		m.rule = m.ruleText
		_, cmd := m.form.Update(tea.KeyPressMsg{Code: 'y', Text: "y"})
		return m, cmd
	case "ctrl+c":
		_, cmd := m.form.Update(msg)
		return m, cmd
	}
	return m, nil
}
