package testutil

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// TestScreenAnswersTerminalQueries writes, from a program's side of a
// real pty, the queries bubbletea and termenv send at start, one split
// across two writes, and requires Screen's replies in order: without
// them each program waits 5 s before it draws.
func TestScreenAnswersTerminalQueries(t *testing.T) {
	master, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer master.Close()
	defer tty.Close()
	// Raw mode: the replies have no newline and must not be echoed back.
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	tio.Lflag &^= unix.ICANON | unix.ECHO
	tio.Cc[unix.VMIN], tio.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(int(tty.Fd()), unix.TCSETS, tio); err != nil {
		t.Fatal(err)
	}
	s := NewScreen(master, nil)
	for _, w := range []string{"hello \x1b]11;?\x07 \x1b[6n \x1b]10;?\x1b\\", "\x1b[c \x1b]1", "1;?\x1b\\ world"} {
		if _, err := tty.Write([]byte(w)); err != nil {
			t.Fatal(err)
		}
	}
	want := "\x1b]11;rgb:0000/0000/0000\x1b\\" + "\x1b[1;1R" + "\x1b]10;rgb:ffff/ffff/ffff\x1b\\" + "\x1b[?62;22c" + "\x1b]11;rgb:0000/0000/0000\x1b\\"
	got := make([]byte, len(want))
	read := make(chan error, 1)
	go func() { _, err := io.ReadFull(tty, got); read <- err }()
	select {
	case err := <-read:
		if err != nil {
			t.Fatalf("replies: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no replies within 10s")
	}
	if !bytes.Equal(got, []byte(want)) {
		t.Fatalf("replies %q, want %q", got, want)
	}
	WaitFor(t, "the text", 10*time.Second, func() bool { return s.Text() == "hello     world" })
}
