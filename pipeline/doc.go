// Package pipeline runs argv stages chained by kernel pipes, the way a shell
// runs "a | b | c", but without a shell: each stage is an argv executed
// directly, so there is no word splitting, globbing, redirection, variable
// expansion or command substitution, and a bare argv[0] is looked up only in
// the fixed [SearchPath].
//
// # Use
//
// Resolve each stage's argv[0] with [Resolve] (what it returns is what runs
// and what an approver should be shown), build the environment with [Env]
// from the run-as user's [LookupAccount], fill in a [Cmd] and call
// [Cmd.Run] once:
//
//	res, err := (&pipeline.Cmd{
//		Argv:    [][]string{{"dmesg"}, {"tail", "-n", "20"}},
//		Paths:   []string{"/usr/bin/dmesg", "/usr/bin/tail"},
//		Env:     pipeline.Env(acct, nil),
//		Account: &acct,
//		Timeout: time.Minute,
//	}).Run(ctx)
//
// An error from Run means the run could not be started; exit codes and
// signal deaths are part of the [Result].
//
// # How a run is wired
//
// All stages start together. Stage i's stdout is stage i+1's stdin through an
// [os.Pipe]: the kernel moves the data, this package copies nothing between
// stages. The first stage reads /dev/null or the given bytes. The last
// stage's stdout and every stage's stderr are read concurrently into buffers
// that keep the first [Cmd].Cap bytes of stdout, and [Cmd].Cap bytes of
// all the stderr streams together (a run's memory does not grow with its
// stages), and read and discard the rest, so a chatty child never blocks
// on a full pipe. Children get the environment
// given and nothing else, no descriptor but 0, 1 and 2 (a pinned script
// also gets 3, its own file: see [Cmd].Pinned), and no controlling
// terminal: each stage leads its own process group, and its own session
// too when the calling process has a controlling terminal (so that no
// stage can open it as /dev/tty) or the stage runs as a user other than
// root (SIGCONT may be sent to any process of one's own session, whatever
// its owner). Otherwise the stages stay in the caller's session: a process
// that does not lead a session can never acquire a terminal, and on a
// kernel that schedules by session (autogroup) the stages of a pipeline
// then share one group, as under a shell, rather than one each. (A root
// stage that itself switches to another user, with su or setpriv, stays
// in the caller's session: what it runs then was given root by whoever
// allowed the run.) Signals
// start with their default action, except those the calling process
// ignores: exec keeps SIG_IGN. (Go installs handlers rather than ignoring,
// so this only matters for a daemon that calls signal.Ignore, or one
// started with SIGHUP or SIGINT ignored, as nohup does.)
//
// # Kill guarantees
//
// When the timeout fires or the context ends, every stage's process group
// gets SIGTERM, and SIGKILL [Cmd].KillGrace later. When a stage's leader
// exits, however the run ends, its process group gets SIGKILL at once, so
// no background process started by a stage outlives the run or holds its
// pipes open. Groups are signalled only while their leader is known not to
// have been reaped, so a recycled pid is never hit. Run returns within
// Timeout + KillGrace plus a fraction of a second, whatever the children do.
// Should the calling process die, each stage's leader gets SIGKILL from the
// kernel (PR_SET_PDEATHSIG); the rest of its group does not. Without a
// cgroup, a caller that records each run's tag ([Cmd].Tag) and stages
// ([Cmd].Started) lets the next process find those with [KillLeftovers].
//
// A process that leaves its stage's session or process group (setsid,
// setpgid, a daemon that double-forks that way) escapes the group kill.
// With a [cgroup.Cgroup] ([Cmd].Cgroup), that does not matter: every stage is
// created in the run's cgroup, all it starts stays there (but a process
// running as root may move itself to another cgroup through its
// cgroup.procs, as root may do anything), and once the
// stages' leaders have exited (or the run is stopped) everything in the
// cgroup is killed through cgroup.kill (and each process still listed
// there through a pidfd: cgroup.kill misses one whose first thread has
// exited while others run on) and waited for; the stages get no
// tag and no sweep runs. [Result].Usage then holds the run's CPU time and
// peak memory. Without a cgroup (the fallback), every stage gets [RunEnvKey] set to a random tag of the run,
// and once the stages' groups are dead every child of the calling process
// whose environment still holds the tag is killed and reaped (the scan
// repeats until it finds none). Escaped processes are the caller's
// children once it called [Subreaper], as rootgated does without cgroups; without it they
// go to init and are not found. The limit: a process that also replaces
// its environment escapes that too. If it still holds one of the run's output pipes, Run stops reading
// it shortly after the stages have ended and closes it, so it cannot delay
// the result; it may go on running. Give the run a [cgroup.Cgroup] when that
// matters.
package pipeline
