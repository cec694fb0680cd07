// Package cgroup is all of rootgate's cgroup v2: finding the cgroup2
// mount and a process's cgroup in it (Own, Of), making, opening and
// removing a run's cgroup (New, Open, Cgroup.Remove), writing its limits
// (memory.max, memory.swap.max, pids.max: WriteLimits), killing it whole
// (cgroup.kill, and a pidfd for each process cgroup.kill misses:
// Cgroup.Kill) and reading what it counted (Cgroup.Usage). Runs is
// rootgated's side of it: where its runs' cgroups go (a subtree of its
// own cgroup, moving itself into a leaf under a delegated unit, or a
// directory named), the controllers enabled there and what cannot be
// enforced (Runs.Check), the mark on each cgroup it made, the leftovers
// of a daemon that did not stop cleanly, and the memory.max of the
// daemon's own leaf. It imports nothing of the module.
package cgroup
