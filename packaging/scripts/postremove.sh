#!/bin/sh
# rootgate postremove: runs after the files are removed. $1 is "remove",
# "purge" or "upgrade" (deb), or 0 (rpm erase) or 1 (rpm upgrade).
set -e

case "$1" in
remove | 0)
	# The policy and the audit log stay: only a purge drops them. The
	# runtime directory goes now: the socket files (systemd leaves them
	# when it stops the sockets) and the replay window's file would
	# otherwise stay until the next boot.
	rm -rf /run/rootgate
	;;
purge)
	rm -rf /etc/rootgate /var/log/rootgate /var/lib/rootgate /run/rootgate
	;;
esac
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
