#!/bin/sh
# rootgate preremove: runs before the files are removed. $1 is "remove" or
# "upgrade" (deb), or 0 (rpm erase) or 1 (rpm upgrade).
set -e

case "$1" in
remove | 0)
	# Stop the daemon and the sockets, and keep them from starting at boot.
	if [ -d /run/systemd/system ]; then
		systemctl disable --now rootgate.socket rootgate-approve.socket rootgate.service || true
	fi
	;;
esac
exit 0
