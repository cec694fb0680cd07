package daemon

import (
	"strconv"
	"strings"

	"github.com/rootgate/rootgate/internal/approval"
	"github.com/rootgate/rootgate/pipeline"
)

// maxSudoArgs is how many bytes of a command's arguments SUDO_COMMAND
// holds, as sudo keeps them (a long "find / ..." must not make the
// environment too big to exec).
const maxSudoArgs = 4096

// setSudoEnv sets, in a privileged or run-as run, the variables sudo sets
// for the command it runs: SUDO_USER, SUDO_UID, SUDO_GID and SUDO_HOME
// name the requester as the kernel reported it at connect (its uid and
// gid) and the passwd database describes it (its name and home), and each
// stage's SUDO_COMMAND is its own command line. Nothing of it comes from
// the client: an entry of these names already in the environment (none
// passes the env allowlist) is dropped first.
// They are set in cmd, p's command set up for its run.
func setSudoEnv(cmd *pipeline.Cmd, p *runPlan) {
	if !p.req.Privileged && p.req.RunAsGroup == "" {
		return
	}
	env := cmd.Env[:0:0]
	for _, kv := range cmd.Env {
		if !isSudoEntry(kv) {
			env = append(env, kv)
		}
	}
	name := strconv.Itoa(p.peer.UID)
	home := ""
	// The cache the run-as account comes from: a passwd look-up per run
	// (os/user, through NSS) cost a run about a third of a millisecond.
	if u, err := pipeline.CachedAccount(uint32(p.peer.UID)); err == nil {
		name, home = u.Name, u.Home
	}
	env = append(env,
		"SUDO_USER="+name,
		"SUDO_UID="+strconv.Itoa(p.peer.UID),
		"SUDO_GID="+strconv.Itoa(p.peer.GID))
	if home != "" {
		env = append(env, "SUDO_HOME="+home)
	}
	cmd.Env = env
	cmd.StageEnv = make([][]string, len(p.stages))
	for i, st := range p.stages {
		cmd.StageEnv[i] = []string{"SUDO_COMMAND=" + sudoCommand(st)}
	}
}

// isSudoEntry reports whether kv sets one of the variables setSudoEnv
// sets.
func isSudoEntry(kv string) bool {
	k, _, _ := strings.Cut(kv, "=")
	switch k {
	case "SUDO_USER", "SUDO_UID", "SUDO_GID", "SUDO_HOME", "SUDO_COMMAND":
		return true
	}
	return false
}

// sudoCommand is a stage's SUDO_COMMAND as sudo builds it: the command as
// written when it holds a "/", else the path its name was found at, then
// the arguments joined by spaces, of which the first maxSudoArgs bytes.
func sudoCommand(st approval.Stage) string {
	cmd := st.Path
	if len(st.Argv) > 0 && strings.Contains(st.Argv[0], "/") {
		cmd = st.Argv[0]
	}
	if len(st.Argv) < 2 {
		return cmd
	}
	args := strings.Join(st.Argv[1:], " ")
	if len(args) > maxSudoArgs {
		args = args[:maxSudoArgs]
	}
	return cmd + " " + args
}
