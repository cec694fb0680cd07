package approval

import (
	"fmt"
	"os"
	"os/user"
	"strings"
)

// TerminalName names the terminal on this process's stdin, stdout or
// stderr (the first that is one), e.g. "pts/3", or "tty" when none is.
// It is the Name of a [Terminal] approver.
func TerminalName() string {
	for _, fd := range []int{0, 1, 2} {
		if p, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd)); err == nil && strings.HasPrefix(p, "/dev/") && p != "/dev/null" {
			return strings.TrimPrefix(p, "/dev/")
		}
	}
	return "tty"
}

// OperatorName is who sits at this process's terminal: the sudo user when
// it runs as root under sudo, else the user it runs as. It is the Operator
// of a [Terminal] or [Desktop] approver.
func OperatorName() string {
	if u := os.Getenv("SUDO_USER"); u != "" && os.Geteuid() == 0 {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return fmt.Sprint(os.Getuid())
}
