#!/bin/sh
# rootgate postinstall: runs after the files are in place, on install and
# on upgrade. $1 is "configure" (deb) or 1 (rpm install), 2 (rpm upgrade).
set -e

# The group whose members may ask (the request socket's group).
if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers /usr/lib/sysusers.d/rootgate.conf
elif ! getent group rootgate >/dev/null; then
	groupadd --system rootgate
fi

# /var/log/rootgate (0700) and /etc/rootgate.
if command -v systemd-tmpfiles >/dev/null 2>&1; then
	systemd-tmpfiles --create /usr/lib/tmpfiles.d/rootgate.conf
else
	install -d -m 0700 -o root -g root /var/log/rootgate
	install -d -m 0755 -o root -g root /etc/rootgate
fi

# Only with systemd as the running init (sd_booted) is there anything to
# reload or start.
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload
	case "$1" in
	configure | 1)
		if [ "$1" = 1 ] || [ -z "$2" ]; then
			# A first install: the sockets start now and at every boot.
			systemctl enable --now rootgate.socket rootgate-approve.socket
		fi
		# An upgrade does not restart a running daemon, which would kill
		# the runs it has in progress: the new binary takes over once the
		# old one exits when idle (--idle-exit).
		;;
	esac
else
	echo "rootgate: systemd is not running; once it is:" >&2
	echo "rootgate:   systemctl enable --now rootgate.socket rootgate-approve.socket" >&2
fi
exit 0
