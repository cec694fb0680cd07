package terminal

import (
	"errors"
	"io"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/muesli/cancelreader"
	"golang.org/x/sys/unix"
)

// readKeys returns what is typed on f, read by one goroutine of ours, and
// a function that stops that goroutine and waits until it has. Bubble Tea
// v2 reads the terminal itself from goroutines that can outlive
// Program.Run and go on reading it during the next prompt, taking its
// keys; given a pipe, what outlives Run reads only that pipe, closed by
// stop.
func readKeys(f *os.File) (io.Reader, func(), error) {
	in, err := cancelreader.NewReader(ttyInput{f})
	if err != nil {
		return nil, nil, err
	}
	pr, pw := io.Pipe()
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		var k keyReads
		buf := make([]byte, 4096)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				if _, werr := pw.Write(k.mark(buf[:n])); werr != nil {
					return
				}
			}
			if err != nil {
				if errors.Is(err, cancelreader.ErrCanceled) {
					err = nil
				}
				pw.CloseWithError(err)
				return
			}
		}
	}()
	stop := func() {
		pr.Close() // a write to the pipe now fails
		in.Cancel()
		<-copied
		in.Close()
	}
	return pr, stop, nil
}

// keyReads marks, in what is read from the terminal, each run of two or
// more characters that came in one read as a bracketed paste, so Bubble Tea
// gives it as a PasteMsg, not as keys: "yes" typed (or pasted, or sent by a
// program) in one go is text, not the key y. Bubble Tea v1 did this itself.
// Escape sequences, control keys and pastes the terminal marked pass
// through as they are.
type keyReads struct {
	inPaste bool // inside a paste the terminal marked
}

const (
	pasteStart = "\x1b[200~"
	pasteEnd   = "\x1b[201~"
)

func (k *keyReads) mark(b []byte) []byte {
	out := make([]byte, 0, len(b)+2*len(pasteStart))
	run := 0 // where the current run of characters starts
	flush := func(i int) {
		if utf8.RuneCount(b[run:i]) >= 2 {
			out = append(out, pasteStart...)
			out = append(out, b[run:i]...)
			out = append(out, pasteEnd...)
		} else {
			out = append(out, b[run:i]...)
		}
	}
	i := 0
	for i < len(b) {
		if k.inPaste {
			end := strings.Index(string(b[i:]), pasteEnd)
			if end < 0 {
				return append(out, b[i:]...)
			}
			out = append(out, b[i:i+end+len(pasteEnd)]...)
			i += end + len(pasteEnd)
			k.inPaste = false
			run = i
			continue
		}
		c := b[i]
		if c >= 0x20 && c != 0x7f {
			i++ // part of a run of characters
			continue
		}
		flush(i)
		n := 1
		if c == 0x1b {
			n = escapeLen(b[i:])
			if string(b[i:i+n]) == pasteStart {
				k.inPaste = true
			}
		}
		out = append(out, b[i:i+n]...)
		i += n
		run = i
	}
	flush(len(b))
	return out
}

// escapeLen is the length of the escape sequence b starts with: CSI, SS3,
// OSC, or ESC and one more byte (alt and a key); all of b if it ends first.
func escapeLen(b []byte) int {
	if len(b) < 2 {
		return len(b)
	}
	switch b[1] {
	case '[':
		for i := 2; i < len(b); i++ {
			if b[i] >= 0x40 && b[i] <= 0x7e {
				return i + 1
			}
		}
		return len(b)
	case 'O':
		return min(3, len(b))
	case ']':
		for i := 2; i < len(b); i++ {
			if b[i] == 0x07 {
				return i + 1
			}
			if b[i] == 0x1b && i+1 < len(b) && b[i+1] == '\\' {
				return i + 2
			}
		}
		return len(b)
	}
	return 2
}

// ttyInput is the terminal as the form reads it. A hung-up terminal reads
// as end of file (or EIO), which Bubble Tea takes as "no more input" and
// goes on waiting; ttyInput makes it errHangup, so the prompt ends at once.
type ttyInput struct{ *os.File }

func (f ttyInput) Read(b []byte) (int, error) {
	n, err := f.File.Read(b)
	if n == 0 && len(b) > 0 && (err == nil || errors.Is(err, io.EOF) || errors.Is(err, unix.EIO)) {
		return 0, errHangup
	}
	return n, err
}
