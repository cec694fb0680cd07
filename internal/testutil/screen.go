package testutil

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"sync"
)

// Screen is what a program shows on a pseudo-terminal, read from the pty's
// master. Like a real terminal emulator it answers the queries that
// bubbletea and termenv send when a program starts (background and
// foreground colour, cursor position, device attributes): a pty nobody
// answers makes each of those programs wait 5 s before it draws anything.
type Screen struct {
	master *os.File
	copyTo func([]byte) // also gets every read, when set

	mu      sync.Mutex
	raw     bytes.Buffer
	scanned int // how far raw was searched for queries
	done    chan struct{}
}

// NewScreen starts reading master. copyTo, if not nil, gets a copy of
// everything read (for a log). Done is closed when master reads an error
// (the program exited and its terminal closed, or master was closed).
func NewScreen(master *os.File, copyTo func([]byte)) *Screen {
	s := &Screen{master: master, copyTo: copyTo, done: make(chan struct{})}
	go s.read()
	return s
}

// queries are the terminal queries Screen answers, each with its reply:
// OSC 10/11 (foreground/background colour, BEL or ST terminated), DSR
// cursor position and DA1.
var queries = []struct {
	re    *regexp.Regexp
	reply string
}{
	{regexp.MustCompile(`\x1b\]10;\?(\x07|\x1b\\)`), "\x1b]10;rgb:ffff/ffff/ffff\x1b\\"},
	{regexp.MustCompile(`\x1b\]11;\?(\x07|\x1b\\)`), "\x1b]11;rgb:0000/0000/0000\x1b\\"},
	{regexp.MustCompile(`\x1b\[6n`), "\x1b[1;1R"},
	{regexp.MustCompile(`\x1b\[0?c`), "\x1b[?62;22c"},
}

// longestQuery bounds how much of the already-scanned output a query split
// across two reads can start in.
const longestQuery = 16

func (s *Screen) read() {
	defer close(s.done)
	buf := make([]byte, 32<<10)
	for {
		n, err := s.master.Read(buf)
		if n > 0 {
			if s.copyTo != nil {
				s.copyTo(buf[:n])
			}
			s.mu.Lock()
			s.raw.Write(buf[:n])
			replies := s.answers()
			s.mu.Unlock()
			if replies != "" {
				s.master.Write([]byte(replies))
			}
		}
		if err != nil {
			return
		}
	}
}

// answers returns the replies to the queries in the output not scanned
// yet, in the order they were asked. Called with mu held.
func (s *Screen) answers() string {
	b := s.raw.Bytes()
	from := max(0, s.scanned-longestQuery)
	type hit struct {
		at    int
		reply string
	}
	var hits []hit
	end := from
	for _, q := range queries {
		for _, loc := range q.re.FindAllIndex(b[from:], -1) {
			if from+loc[1] <= s.scanned {
				continue // answered before
			}
			hits = append(hits, hit{from + loc[0], q.reply})
			end = max(end, from+loc[1])
		}
	}
	s.scanned = max(len(b), end)
	if len(hits) == 0 {
		return ""
	}
	for i := 1; i < len(hits); i++ {
		for j := i; j > 0 && hits[j].at < hits[j-1].at; j-- {
			hits[j], hits[j-1] = hits[j-1], hits[j]
		}
	}
	var out strings.Builder
	for _, h := range hits {
		out.WriteString(h.reply)
	}
	return out.String()
}

// Raw returns everything shown so far, escape sequences included.
func (s *Screen) Raw() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.raw.String()
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[()][0-9A-Za-z]|\x1b[=>78]`)

// Text returns what was shown so far with ANSI sequences removed.
func (s *Screen) Text() string {
	return ansi.ReplaceAllString(s.Raw(), "")
}

// Done is closed when the screen stops reading.
func (s *Screen) Done() <-chan struct{} { return s.done }
