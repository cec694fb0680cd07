#!/bin/sh
# rootgate preremove: runs before the files are removed. $1 is "remove" or
# "upgrade" (deb), or 0 (rpm erase) or 1 (rpm upgrade).
set -e

case "$1" in
remove | 0)
	# Stop the daemon and the sockets, and keep them from starting at boot.
	if [ -d /run/systemd/system ]; then
		systemctl disable --now rootgate.socket rootgate-approve.socket rootgate.service || true
	elif command -v systemctl >/dev/null 2>&1; then
		systemctl disable rootgate.socket rootgate-approve.socket rootgate.service || true
	fi
	;;
esac
if [ "$1" = remove ]; then
	# For postinstall, should the package be installed again before a purge.
	mkdir -p /var/lib/rootgate
	touch /var/lib/rootgate/removed
fi
exit 0
