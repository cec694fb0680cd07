package client

import (
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"
)

// PermissionHint says what would let this process connect to socket,
// which refused it for want of permission. rootgated gives its sockets
// to group rootgate (mode 0660) when it starts and the group exists, and
// otherwise keeps them root's (0600): a group created later takes effect
// at the daemon's next start, and a user added to the group at their next
// login.
func PermissionHint(socket string) string {
	g, err := user.LookupGroup("rootgate")
	if err != nil {
		return "only root may connect: group rootgate does not exist; create it (sudo groupadd --system rootgate), " +
			"restart rootgated (it gives its socket to the group when it starts), then sudo usermod -aG rootgate $USER and log in again"
	}
	var st syscall.Stat_t
	if syscall.Stat(socket, &st) == nil && strconv.FormatUint(uint64(st.Gid), 10) != g.Gid {
		return "only root may connect: this socket is not group rootgate's, as rootgated started before the group existed; " +
			"restart rootgated (it gives its socket to the group when it starts), then, if not done yet, sudo usermod -aG rootgate $USER and log in again"
	}
	if gid, err := strconv.Atoi(g.Gid); err == nil {
		if groups, err := os.Getgroups(); err == nil && !slices.Contains(groups, gid) && os.Getegid() != gid {
			if u, err := user.Current(); err == nil {
				if ids, err := u.GroupIds(); err == nil && slices.Contains(ids, g.Gid) {
					return "only root and members of group rootgate may connect: you are in the group, but this login session is not yet; log in again (or run newgrp rootgate)"
				}
			}
		}
	}
	return "only root and members of group rootgate may connect: sudo usermod -aG rootgate $USER, then log in again"
}
