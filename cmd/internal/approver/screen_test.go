package approver

import (
	"strings"
	"testing"
	"time"

	"github.com/charmbracelet/x/ansi"
	"github.com/rootgate/rootgate/internal/testutil"
)

// The idle screen on a terminal: each status line is printed once, above
// it, the screen erased and drawn again under the line; a prompt takes its
// place and the lines printed meanwhile come after the prompt, in order;
// at the end it leaves the terminal, and lines after that are plain.
func TestScreenKeepsIdleBelowLines(t *testing.T) {
	out := &testutil.SyncBuffer{}
	s := newScreen(out, func() (int, int) { return 100, 30 }, []string{"/run/a.sock"})
	const header = "rootgate approve · idle"
	testutil.WaitFor(t, "the idle screen drawn", 10*time.Second, func() bool { return strings.Contains(out.String(), header) })
	drawn := out.String()
	lines := strings.Count(drawn, "\r\n")
	if lines != 2 || !strings.Contains(drawn, "(not connected to rootgated") {
		t.Fatalf("the first drawing is %d lines: %q", lines, drawn)
	}

	s.println("rootgate: first")
	testutil.WaitFor(t, "the line printed", 10*time.Second, func() bool { return strings.Contains(out.String(), "first") })
	// Up over the two lines drawn, erase below, the line, the screen.
	after := strings.TrimPrefix(out.String(), drawn)
	if !strings.HasPrefix(after, ansi.CursorUp(2)+"\r"+ansi.EraseScreenBelow+"rootgate: first\r\n") || strings.Count(after, header) != 1 {
		t.Fatalf("a status line is written as %q", after)
	}

	// A prompt: begin has erased the screen when it returns; a line
	// printed meanwhile waits for its end.
	s.begin()
	upTo := out.String()
	if !strings.HasSuffix(upTo, ansi.CursorUp(2)+"\r"+ansi.EraseScreenBelow) {
		t.Fatalf("begin left %q", upTo[len(drawn):])
	}
	s.println("rootgate: during")
	s.println("rootgate: during 2")
	s.end()
	testutil.WaitFor(t, "the idle screen drawn again", 10*time.Second, func() bool { return strings.Count(out.String(), header) >= 3 })
	// Nothing between the erase and the held lines: nothing was written
	// while the prompt was up (a line printed then would have come with
	// an erase of its own).
	if after := strings.TrimPrefix(out.String(), upTo); !strings.HasPrefix(after, "rootgate: during\r\nrootgate: during 2\r\n") || strings.Count(after, "\r\n") != 4 {
		t.Fatalf("after the prompt: %q", after)
	}
	upTo = out.String()

	s.finish("rootgate: detached")
	s.println("rootgate: late")
	s.close()
	end := out.String()
	if !strings.HasSuffix(end, ansi.CursorUp(2)+"\r"+ansi.EraseScreenBelow+"rootgate: detached\r\nrootgate: late\n") {
		t.Fatalf("the end: %q", end[len(upTo):])
	}
}

// Without a terminal there is no idle screen: plain lines, held while a
// prompt is up, and not one escape sequence.
func TestScreenPlainLines(t *testing.T) {
	out := &testutil.SyncBuffer{}
	s := newScreen(out, nil, []string{"/run/a.sock"})
	s.println("one")
	s.begin()
	s.println("two")
	s.setStatus(Daemon{Socket: "/run/a.sock"}, nil)
	s.setConnected("/run/a.sock", true)
	s.end()
	s.println("three")
	s.finish("rootgate: detached")
	s.close()
	if got := out.String(); got != "one\ntwo\nthree\nrootgate: detached\n" {
		t.Fatalf("plain lines: %q", got)
	}
}
