package main

import (
	"os/exec"
	"strings"
	"testing"
)

// uiPackages are the import path prefixes of terminal and desktop UI code:
// the charm libraries (bubbletea, lipgloss, huh, bubbles) and what they
// bring (terminal capabilities, colours, text widths, the clipboard),
// D-Bus, and the module's own prompts and approver client.
var uiPackages = []string{
	"charm.land/",
	"github.com/charmbracelet/",
	"github.com/muesli/",
	"github.com/lucasb-eyer/go-colorful",
	"github.com/xo/terminfo",
	"github.com/mattn/go-runewidth",
	"github.com/rivo/uniseg",
	"github.com/clipperhouse/",
	"github.com/atotto/clipboard",
	"github.com/catppuccin/",
	"github.com/godbus/",
	"github.com/rootgate/rootgate/internal/approval/terminal",
	"github.com/rootgate/rootgate/internal/approval/desktop",
	"github.com/rootgate/rootgate/cmd/internal/approver",
}

// TestNoUI: the root daemon links no UI library. Its --tty prompt is
// rootgate's approver, run as a child on the terminal, so none of that
// code runs as root for the whole life of the daemon.
func TestNoUI(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/rootgate/rootgate/cmd/rootgated").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps listed only %d packages", len(deps))
	}
	for _, d := range deps {
		for _, ui := range uiPackages {
			if strings.HasPrefix(d, ui) {
				t.Errorf("rootgated links %s: the root daemon links no UI library (its --tty prompt runs rootgate approve)", d)
			}
		}
	}
}
