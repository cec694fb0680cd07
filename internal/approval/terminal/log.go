package terminal

import (
	"fmt"
	"io"
)

// maxHeldLog bounds what a [Terminal.LogWriter] holds back while a prompt is
// on screen.
const maxHeldLog = 1 << 20

// LogWriter returns a writer for log output that passes writes through to
// w, except while a prompt is on the terminal: then it holds them back (up
// to 1 MiB, dropping whole writes past that and saying how many bytes it
// dropped) and writes them after the prompt's outcome line, so log lines
// never garble the form. It is safe for concurrent use.
func (t *Terminal) LogWriter(w io.Writer) io.Writer {
	l := &heldLog{t: t, w: w}
	t.logMu.Lock()
	t.logs = append(t.logs, l)
	t.logMu.Unlock()
	return l
}

// heldLog is a [Terminal.LogWriter].
type heldLog struct {
	t       *Terminal
	w       io.Writer
	held    []byte // guarded by t.logMu
	dropped int    // guarded by t.logMu
}

func (l *heldLog) Write(b []byte) (int, error) {
	l.t.logMu.Lock()
	defer l.t.logMu.Unlock()
	if !l.t.onScreen {
		return l.w.Write(b)
	}
	if len(l.held)+len(b) > maxHeldLog {
		l.dropped += len(b)
	} else {
		l.held = append(l.held, b...)
	}
	return len(b), nil
}

func (t *Terminal) holdLogs() {
	t.logMu.Lock()
	t.onScreen = true
	t.logMu.Unlock()
}

func (t *Terminal) releaseLogs() {
	t.logMu.Lock()
	defer t.logMu.Unlock()
	t.onScreen = false
	for _, l := range t.logs {
		if len(l.held) > 0 {
			_, _ = l.w.Write(l.held)
		}
		if l.dropped > 0 {
			fmt.Fprintf(l.w, "rootgate: %d bytes of log output dropped while an approval prompt was on screen\n", l.dropped)
		}
		l.held, l.dropped = nil, 0
	}
}
