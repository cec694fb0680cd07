package daemoncmd

import (
	"fmt"
	"io"

	"github.com/rootgate/rootgate/internal/clidoc"
	"github.com/rootgate/rootgate/internal/client"
	"github.com/rootgate/rootgate/internal/daemon"
	"github.com/rootgate/rootgate/internal/version"
)

// Page describes rootgated for its manual page and completions, with the
// flag table [Main] parses.
func Page() *clidoc.Page {
	return &clidoc.Page{
		Name:     "rootgated",
		Section:  8,
		Summary:  "rootgate's root daemon: runs agents' commands once a policy rule or a person approves them",
		Version:  version.String(),
		Synopsis: []string{synopsis},
		Flags:    clidoc.Settings(flags),
		Description: `rootgated takes requests from rootgate(1) clients on a Unix socket: an exact pipeline to run, as root or as the requester, with a reason. Each request is checked, then decided by the policy file or put to a person: on the daemon's own terminal (--tty) or through approver clients attached to the approver socket (rootgate approve). An approved pipeline runs without a shell, with a clean environment and a time limit, and every process it started is killed when it ends. The output goes back to the requester.

With --tty, rootgated runs rootgate approve, as root, on the terminal it was started on, attached over a socket pair; its log lines go to that approver, which prints them above its screen. It runs the rootgate in its own directory, else the first in /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin, never $PATH's, and only one that no one but root can change, or, next to rootgated, no one but rootgated's owner and those who could change rootgated too; any other, next to it, stops the daemon with exit code 78. When that approver exits (Ctrl-C), the daemon stops.

rootgated must run as root. Under systemd it is started by rootgate.socket and rootgate-approve.socket and takes the sockets systemd hands over; started by hand, it binds --socket and --approver-socket itself.`,
		Sections: []clidoc.Section{
			{Title: "Socket activation", Text: `With LISTEN_FDS set for its pid, rootgated takes its listeners by name: the fd named "requests" (required) serves requests, the fd named "approvers" (optional) serves approvers. Each must be a listening Unix stream socket; any other set of fds stops the daemon with exit code 78 (a configuration error) and a message saying what was expected and what it got. --socket and --approver-socket are then ignored.

With Type=notify it sends READY=1 once it serves, STOPPING=1 when shutdown begins, and WATCHDOG=1 when WatchdogSec= is set. A socket-activated daemon exits by itself --idle-exit after its last connection ended, with no connection, no attached approver and no run meanwhile, but not before the replay window (2 × --max-skew) of its last request is over: with the defaults, 10 minutes after the last request. An attached approver (rootgate approve) keeps it running.`},
			{Title: "Signals", Text: `SIGTERM or SIGINT stop the daemon: waiting requests are answered "daemon stopping", running pipelines are killed, and it exits 0.

SIGHUP (systemctl reload rootgate) reads the policy file and its drop-ins again; it stops nothing. (With --tty, unless started under nohup, SIGHUP is the terminal's hangup and stops the daemon as SIGTERM does.) Requests received from then on are decided by the new policy; running pipelines and requests waiting for a person are untouched. A policy that does not parse, or a file owned by another user than root or writable by its group or others, is refused: the policy in force stays, and the error is logged at error level and recorded in the audit log (policy_reload). Check the files first with rootgate policy check.`},
			{Title: "Exit status", Text: `0 after SIGTERM, SIGINT or an idle exit; 1 when it could not start or serve for a reason that may pass (the socket in use, the audit log unwritable); 2 on bad usage; 78 (EX_CONFIG) on a configuration error that only a person can fix: a policy that does not parse or is refused, an audit log or runtime directory that cannot be opened, a --run-memory-max or --run-tasks-max this machine cannot enforce, a --cgroup directory that cannot be used (not cgroup2, missing, another daemon's) or that holds cgroups rootgated did not make (without --cgroup-shared), --tty without a terminal or without a rootgate it may run there, the wrong sockets handed over, not running as root. rootgate.service lists 2 and 78 in RestartPreventExitStatus=, so systemd does not restart the daemon after them: the unit fails. The reason is the last line on stderr, "rootgated: error: ..."; when stderr is the journal's stream (JOURNAL_STREAM) each such line has the prefix "<3>", so the journal files it at priority err and journalctl -u rootgate -p err shows it.`},
			{Title: "Files", Terms: true, Text: defaultPolicy + `
The policy rules (--policy); a missing file means ask for everything.

` + defaultPolicy + `.d/*.policy
Drop-in policy files, read after the main file in the byte order of their names; names starting with "." are skipped.

` + client.DefaultSocket + `
The request socket (--socket), 0660 root:rootgate (0600 root when there is no group rootgate).

` + client.DefaultApproverSocket + `
The approver socket (--approver-socket), 0600 root; 0666 when --approver admits others, as the daemon then checks every peer itself.

` + daemon.DefaultRuntimeDir + `
Runtime state: the replay window (--runtime-dir).`},
			{Title: "See also", Text: "rootgate(1), systemd.socket(5), systemd.service(5)"},
		},
	}
}

// writeDoc writes the manual page (man) or the completion script for shell.
func writeDoc(w io.Writer, man bool, shell string) error {
	p := Page()
	if man {
		return p.Man(w)
	}
	switch shell {
	case "bash":
		return p.Bash(w)
	case "zsh":
		return p.Zsh(w)
	case "fish":
		return p.Fish(w)
	}
	return fmt.Errorf("--completion: unknown shell %q; want bash, zsh or fish", shell)
}
