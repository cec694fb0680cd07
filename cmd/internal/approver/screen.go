package approver

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	tea "charm.land/bubbletea/v2"
	"charm.land/lipgloss/v2"
	"github.com/charmbracelet/colorprofile"
	"github.com/charmbracelet/x/ansi"
	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/termsafe"
	"golang.org/x/sys/unix"
)

// screen is where the client writes between prompts: its status lines
// and, on a terminal, the idle screen below them. It is a Bubble Tea
// program, run as approval/terminal runs its prompt's: with no renderer
// (its model, [screenModel], draws itself) and no input (keys typed
// between prompts answer nothing, and each prompt reads the terminal
// itself). Its methods send the model a message each, so whatever the
// goroutine, what is written is written in one order.
type screen struct {
	prog  *tea.Program
	ended chan struct{} // closed when the program has ended
}

// newScreen starts the screen on out for the daemons at socks, in order.
// size, when set, is out's window size: out is a terminal, and the idle
// screen is kept on it, drawn again when the window is resized.
func newScreen(out io.Writer, size func() (w, h int), socks []string) *screen {
	m := &screenModel{out: out, size: size, order: socks, labelled: len(socks) > 1,
		statuses: map[string]*remote.Message{}, labels: map[string]string{}, connected: map[string]bool{}}
	profile := colorprofile.NoTTY
	if size != nil {
		// The idle screen's headings are bold, as the prompt's title is,
		// where the terminal's type says it shows bold. What moves the
		// cursor and erases is written whatever the type, as before.
		profile = colorprofile.Env(os.Environ())
		m.bold = profile > colorprofile.NoTTY
	}
	s := &screen{ended: make(chan struct{})}
	s.prog = tea.NewProgram(m,
		tea.WithInput(nil),
		tea.WithOutput(m.out),
		tea.WithoutRenderer(),
		tea.WithColorProfile(profile),
		// The client owns SIGINT and SIGTERM (they end Run's context),
		// and a panic here is a bug to see, not a program to recover.
		tea.WithoutSignalHandler(),
		tea.WithoutCatchPanics(),
		// The renderer is none: its frame ticks need not wake the
		// process more than once a second while it waits for hours.
		tea.WithFPS(1),
	)
	go func() {
		defer close(s.ended)
		_, _ = s.prog.Run()
	}()
	if size != nil {
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, unix.SIGWINCH)
		go func() {
			defer signal.Stop(winch)
			for {
				select {
				case <-s.ended:
					return
				case <-winch:
					s.prog.Send(resizedMsg{})
				}
			}
		}()
	}
	return s
}

// println prints a status line, held while a prompt is up.
func (s *screen) println(line string) { s.prog.Send(lineMsg(line)) }

// setStatus keeps m as the status the idle screen shows for daemon d
// (nil: none, or no longer).
func (s *screen) setStatus(d Daemon, m *remote.Message) {
	s.prog.Send(statusMsg{sock: d.Socket, label: d.Label(), st: m})
}

// setConnected says whether the client has a connection to the daemon at
// sock now.
func (s *screen) setConnected(sock string, up bool) {
	s.prog.Send(connectedMsg{sock: sock, up: up})
}

// drop takes the daemon at sock off the idle screen: it refused this
// client for good.
func (s *screen) drop(sock string) { s.prog.Send(dropMsg(sock)) }

// begin takes the idle screen off the terminal for a prompt, which is
// drawn where it was, and holds status lines until end. It returns once
// the screen has written its last before the prompt.
func (s *screen) begin() { s.wait(func(done chan struct{}) tea.Msg { return beginMsg{done} }) }

// end puts the idle screen back after a prompt, under the lines held.
func (s *screen) end() { s.prog.Send(endMsg{}) }

// finish takes the idle screen off the terminal for good and prints
// line, if any, in its place; status lines after it are plain lines. It
// returns once they are written.
func (s *screen) finish(line string) {
	s.wait(func(done chan struct{}) tea.Msg { return finishMsg{line, done} })
}

// close ends the screen once nothing is left to print on it.
func (s *screen) close() {
	s.prog.Quit()
	<-s.ended
}

// wait sends the message made with done and returns when the model has
// closed done (or the screen has ended).
func (s *screen) wait(msg func(done chan struct{}) tea.Msg) {
	done := make(chan struct{})
	s.prog.Send(msg(done))
	select {
	case <-done:
	case <-s.ended:
	}
}

// The screen's messages.
type (
	lineMsg   string
	statusMsg struct {
		sock, label string
		st          *remote.Message
	}
	connectedMsg struct {
		sock string
		up   bool
	}
	dropMsg   string
	beginMsg  struct{ done chan struct{} }
	endMsg    struct{}
	finishMsg struct {
		line string
		done chan struct{}
	}
	resizedMsg struct{} // SIGWINCH
	agingMsg   struct{} // idleRedraw has passed
)

// idleRedraw is how often the idle screen is drawn again when nothing
// changed, so the ages and ends it shows stay current.
const idleRedraw = 5 * time.Second

// maxHeld bounds the status lines held while a prompt is up; those past
// it are counted, and the count printed after the prompt.
const maxHeld = 1000

// heading is how the idle screen draws its headings (the first line, and
// each daemon's): bold, as the prompt's title.
var heading = lipgloss.NewStyle().Bold(true)

// screenModel is what the screen shows, and draws it. While a prompt is
// up (busy), lines are held and printed after it. With size set, out is
// a terminal, and between prompts the idle screen ([idleScreen]) is kept
// below the status lines, each of which is printed once: the block is
// erased, the line printed, and the block drawn again under it.
type screenModel struct {
	out     io.Writer
	size    func() (w, h int) // nil: plain lines, no idle screen
	bold    bool              // the idle screen's headings are drawn bold
	busy    bool
	held    []string
	dropped int // lines past maxHeld while busy
	drawn   int // how many lines of the idle screen are on the terminal, ending at the cursor
	// order are the daemons' sockets, in the order their statuses are
	// shown; labelled says there are several, so each is headed by its
	// label. statuses and labels are by socket: the last status (nil:
	// none yet) and the daemon's label.
	order    []string
	labelled bool
	statuses map[string]*remote.Message
	labels   map[string]string
	// connected holds the sockets the client has a connection to now.
	connected map[string]bool
}

// Init draws the idle screen, every daemon not connected yet.
func (m *screenModel) Init() tea.Cmd {
	if m.size == nil {
		return nil
	}
	m.redraw()
	return agingTick()
}

// agingTick asks for the idle screen to be drawn again in idleRedraw:
// ages and ends on it move on without a status.
func agingTick() tea.Cmd {
	return tea.Tick(idleRedraw, func(time.Time) tea.Msg { return agingMsg{} })
}

func (m *screenModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case lineMsg:
		m.println(string(msg))
	case statusMsg:
		m.statuses[msg.sock], m.labels[msg.sock] = msg.st, msg.label
		m.redraw()
	case connectedMsg:
		m.connected[msg.sock] = msg.up
		m.redraw()
	case dropMsg:
		m.order = slices.DeleteFunc(slices.Clone(m.order), func(o string) bool { return o == string(msg) })
		m.redraw()
	case agingMsg:
		if m.size != nil && m.aging() {
			m.redraw()
		}
		return m, agingTick()
	case resizedMsg:
		m.resized()
	case beginMsg:
		m.begin()
		close(msg.done)
	case endMsg:
		m.end()
	case finishMsg:
		m.finish(msg.line)
		close(msg.done)
	}
	return m, nil
}

// View is empty: the program has no renderer; the model draws.
func (m *screenModel) View() tea.View { return tea.View{} }

// println prints line, or holds it while a prompt is up.
func (m *screenModel) println(line string) {
	if !m.busy {
		m.print(line)
		return
	}
	if len(m.held) < maxHeld {
		m.held = append(m.held, line)
	} else {
		m.dropped++
	}
}

// print prints line, above the idle screen if there is one.
func (m *screenModel) print(line string) {
	if m.size == nil {
		fmt.Fprintln(m.out, line)
		return
	}
	var b strings.Builder
	m.eraseTo(&b)
	b.WriteString(line + "\r\n")
	m.drawTo(&b)
	_, _ = io.WriteString(m.out, b.String())
}

// aging says the idle screen shows ages or ends (a queue, grants).
func (m *screenModel) aging() bool {
	for _, st := range m.statuses {
		if st != nil && (len(st.Queue) > 0 || len(st.Grants) > 0) {
			return true
		}
	}
	return false
}

// redraw draws the idle screen again in place, unless a prompt is up.
func (m *screenModel) redraw() {
	if m.busy || m.size == nil {
		return
	}
	var b strings.Builder
	m.eraseTo(&b)
	m.drawTo(&b)
	_, _ = io.WriteString(m.out, b.String())
}

// resized draws the idle screen for the window's new size. The terminal
// may have wrapped the lines drawn before anew, so they cannot be counted
// back over: the window is cleared and the screen drawn at its top.
func (m *screenModel) resized() {
	if m.busy || m.size == nil {
		return
	}
	var b strings.Builder
	b.WriteString(ansi.CursorHomePosition + ansi.EraseEntireScreen)
	m.drawn = 0
	m.drawTo(&b)
	_, _ = io.WriteString(m.out, b.String())
}

// eraseTo writes to b what erases the idle screen, which ends at the
// cursor.
func (m *screenModel) eraseTo(b *strings.Builder) {
	if m.drawn > 0 {
		b.WriteString(ansi.CursorUp(m.drawn))
	}
	b.WriteString("\r" + ansi.EraseScreenBelow)
	m.drawn = 0
}

// drawTo writes the idle screen to b, below the cursor.
func (m *screenModel) drawTo(b *strings.Builder) {
	w, h := m.size()
	if w <= 0 || h <= 0 {
		w, h = 80, 24
	}
	sts := make([]daemonStatus, 0, len(m.order))
	for _, sock := range m.order {
		ds := daemonStatus{st: m.statuses[sock], down: !m.connected[sock]}
		if m.labelled {
			ds.label = cmp.Or(m.labels[sock], termsafe.Sanitize(sock))
		}
		sts = append(sts, ds)
	}
	lines := idleScreen(sts, time.Now(), w, h)
	for _, l := range lines {
		if m.bold && strings.HasPrefix(l, headingMark) {
			l = heading.Render(l)
		}
		b.WriteString(l + "\r\n")
	}
	m.drawn = len(lines)
}

// begin takes the idle screen off the terminal: the prompt is drawn
// where it was.
func (m *screenModel) begin() {
	m.busy = true
	if m.size != nil {
		var b strings.Builder
		m.eraseTo(&b)
		_, _ = io.WriteString(m.out, b.String())
	}
}

// end prints the lines held while the prompt was up, and draws the idle
// screen under them.
func (m *screenModel) end() {
	m.busy = false
	held := m.held
	if m.dropped > 0 {
		held = append(held, fmt.Sprintf("rootgate: %d status lines dropped while the prompt was up", m.dropped))
	}
	m.held, m.dropped = nil, 0
	if m.size == nil {
		for _, l := range held {
			fmt.Fprintln(m.out, l)
		}
		return
	}
	var b strings.Builder
	for _, l := range held {
		b.WriteString(l + "\r\n")
	}
	m.drawTo(&b)
	_, _ = io.WriteString(m.out, b.String())
}

// finish takes the idle screen off the terminal for good and prints
// line, if any, in its place; lines after it are plain.
func (m *screenModel) finish(line string) {
	if m.size == nil {
		if line != "" {
			fmt.Fprintln(m.out, line)
		}
		return
	}
	var b strings.Builder
	m.eraseTo(&b)
	if line != "" {
		b.WriteString(line + "\r\n")
	}
	_, _ = io.WriteString(m.out, b.String())
	m.size = nil
}
