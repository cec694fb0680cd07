#!/bin/sh
# rootgate postinstall: runs after the files are in place, on install and
# on upgrade. $1 is "configure" (deb) or 1 (rpm install), 2 (rpm upgrade).
set -e

# Is systemd the running init (sd_booted)? Not in a chroot, where an image
# build installs packages, often without /proc mounted.
booted=
[ -d /run/systemd/system ] && booted=yes

# The group whose members may ask (the request socket's group).
if command -v systemd-sysusers >/dev/null 2>&1; then
	systemd-sysusers /usr/lib/sysusers.d/rootgate.conf
elif ! getent group rootgate >/dev/null; then
	groupadd --system rootgate
fi

# /var/log/rootgate (0700) and /etc/rootgate. systemd-tmpfiles needs /proc
# and fails without it, which would leave the package half configured, so
# it runs only under a running systemd; the plain tools do the same
# elsewhere, and the tmpfiles file applies again at every boot.
if [ -n "$booted" ] && command -v systemd-tmpfiles >/dev/null 2>&1; then
	systemd-tmpfiles --create /usr/lib/tmpfiles.d/rootgate.conf
else
	install -d -m 0700 -o root -g root /var/log/rootgate
	install -d -m 0755 -o root -g root /etc/rootgate
fi

# A first install enables the sockets; so does installing again after a
# removal (deb: dpkg then passes the old version as on an upgrade, so
# preremove leaves a mark). An upgrade leaves them as the operator set them.
first=
case "$1" in
1) first=yes ;;
configure)
	if [ -z "$2" ] || [ -e /var/lib/rootgate/removed ]; then
		first=yes
	fi
	rm -f /var/lib/rootgate/removed
	rmdir /var/lib/rootgate 2>/dev/null || true
	;;
esac

# Only with systemd as the running init is there anything to reload or
# start.
if [ -n "$booted" ]; then
	systemctl daemon-reload
	if [ -n "$first" ]; then
		# The sockets start now and at every boot.
		systemctl enable --now rootgate.socket rootgate-approve.socket
	fi
	# An upgrade does not restart a running daemon, which would kill the
	# runs it has in progress. The new binary takes over once the old one
	# exits when idle (--idle-exit), which it never does while an approver
	# is attached: say so, or a fixed bug could stay running for good.
	if [ -z "$first" ] && systemctl --quiet is-active rootgate.service; then
		echo "rootgate: the running rootgated is the old version until it exits idle, which it does not while an approver is attached;" >&2
		echo "rootgate:   run \"systemctl restart rootgate\" when no request is waiting or running" >&2
	fi
else
	echo "rootgate: systemd is not running; once it is:" >&2
	echo "rootgate:   systemctl enable --now rootgate.socket rootgate-approve.socket" >&2
fi
exit 0
