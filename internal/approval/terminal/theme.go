package terminal

import (
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"charm.land/huh/v2"
	"charm.land/lipgloss/v2"
	"github.com/rootgate/rootgate/internal/approval"
)

// newConfirmForm builds the prompt's form: a huh Confirm bound to ok
// (false, so Deny is focused), titled with the run-as user, described by
// nothing else: [promptModel] draws the request above it. Esc and ctrl+c abort the form (a
// denial). Styles use no colour at all, so nothing
// needs the terminal's background, and the focused button is marked by
// text as well as by reverse video, so it shows without colour too.
func newConfirmForm(p *approval.Prompt, ok *bool) *huh.Form {
	title := "Run this command as " + approval.RunAsWord(p) + "?"
	keys := huh.NewDefaultKeyMap()
	keys.Quit = key.NewBinding(key.WithKeys("ctrl+c", "esc"))

	form := huh.NewForm(huh.NewGroup(
		huh.NewConfirm().
			Title(title).
			Affirmative("Approve").
			Negative("Deny").
			Value(ok),
	)).
		WithKeyMap(keys).
		WithTheme(huh.ThemeFunc(promptTheme)).
		WithShowHelp(false).
		WithShowErrors(false)
	form.SubmitCmd = tea.Quit
	form.CancelCmd = tea.Quit
	return form
}

// promptTheme is the form's theme, the same on a dark or a light
// background.
func promptTheme(bool) *huh.Styles {
	plain := lipgloss.NewStyle()
	var t huh.Styles
	t.Form.Base = plain
	t.Group.Base = plain
	t.Group.Title = plain.Bold(true)
	t.Group.Description = plain
	t.FieldSeparator = plain.SetString("\n\n")
	button := plain.Padding(0, 1).MarginRight(2)
	f := &t.Focused
	f.Base = plain.PaddingLeft(1).BorderStyle(lipgloss.ThickBorder()).BorderLeft(true)
	f.Card = f.Base
	f.Title = plain.Bold(true)
	f.Description = plain
	f.ErrorIndicator = plain.SetString(" *")
	f.ErrorMessage = plain.SetString(" *")
	// Render joins a style's string and its argument with a space:
	// "> Deny" when focused, "  Approve" when not.
	f.FocusedButton = button.Reverse(true).Bold(true).SetString(">")
	f.BlurredButton = button.SetString(" ")
	t.Blurred = t.Focused
	return &t
}
