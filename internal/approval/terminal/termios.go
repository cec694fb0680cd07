package terminal

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Quiet turns echo off on the terminal f, so keys typed while no prompt
// is up (at `rootgate approve`'s idle screen) are not shown, and returns
// what restores the terminal's modes. Line editing and signals stay as
// they were (Ctrl-C still interrupts); a prompt flushes what was typed
// before it and turns echo back on where it reads a line (a deny note,
// the accessible prompt).
func Quiet(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	tio, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("not a terminal: %w", err)
	}
	saved := *tio
	tio.Lflag &^= unix.ECHO | unix.ECHONL
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, tio); err != nil {
		return nil, fmt.Errorf("failed to turn echo off: %w", err)
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, &saved) }, nil
}

// lineMode is tio with line editing and echo on: how a line (a note, the
// accessible prompt's answer) is read.
func lineMode(tio unix.Termios) *unix.Termios {
	tio.Lflag |= unix.ECHO | unix.ICANON | unix.ECHOE | unix.ECHOK
	return &tio
}

// makeRaw sets tio as cfmakeraw(3) does: keys are read one by one, unechoed
// and unprocessed, and output is written as is.
func makeRaw(tio *unix.Termios) {
	tio.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	tio.Oflag &^= unix.OPOST
	tio.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	tio.Cflag &^= unix.CSIZE | unix.PARENB
	tio.Cflag |= unix.CS8
	tio.Cc[unix.VMIN] = 1
	tio.Cc[unix.VTIME] = 0
}

// WindowSize is the size of the terminal f, 0x0 when it does not say.
func WindowSize(f *os.File) (width, height int) { return windowSize(int(f.Fd())) }

// windowSize is the size of the terminal on fd, 0x0 when it does not say.
func windowSize(fd int) (w, h int) {
	ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
	if err != nil {
		return 0, 0
	}
	return int(ws.Col), int(ws.Row)
}
