#!/bin/sh
# getgo.sh: makes sure that `go` on PATH can build rootgate, whose go.mod
# asks for a newer Go than most distributions ship. The README's first
# command runs it before go build.
#
# Any go of 1.21 or newer builds the module: it fetches the Go that go.mod
# names by itself (GOTOOLCHAIN=auto) through the Go module proxy, into the
# user's module cache. Where `go` is missing or older, this installs one
# from the distribution, with sudo apt-get:
#   Debian 12 (bookworm): golang-go from bookworm-backports (1.23; its
#     own golang-go is 1.19), adding that suite from the mirror apt uses;
#   Debian 13, Ubuntu 24.04 and newer: their golang-go.
# Elsewhere it says what to get and exits 1. Then it has go fetch the
# Go of go.mod, so that go build starts at once.
set -eu
cd "$(dirname "$0")/.."
want=$(sed -n 's/^go \([0-9][0-9.]*\)$/\1/p' go.mod)
say() { echo "getgo.sh: $*" >&2; }

# minor prints the minor version of a Go version: go1.23.4 -> 23.
minor() { v=${1#go}; v=${v#1.}; echo "${v%%.*}"; }

# installed prints the version of the go on PATH, as it is installed (run
# outside the module, so no toolchain switch), or fails.
installed() {
	command -v go >/dev/null 2>&1 || return 1
	(cd / && go env GOVERSION) 2>/dev/null
}

if ! have=$(installed) || [ "$(minor "$have")" -lt 21 ]; then
	[ -n "${have:-}" ] && say "$(command -v go) is $have, too old to fetch Go $want by itself"
	. /etc/os-release
	case "${ID:-}:${VERSION_CODENAME:-}" in
	debian:bookworm)
		if ! grep -rqs '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
			mirror=$( { grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}'
				grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'; } |
				grep -v -- -security | grep '^http' | head -n 1)
			mirror=${mirror:-http://deb.debian.org/debian}
			say "adding bookworm-backports ($mirror) to apt's sources, for a golang-go newer than 1.19"
			echo "deb $mirror bookworm-backports main" | sudo tee /etc/apt/sources.list.d/bookworm-backports.list >/dev/null
		fi
		sudo apt-get update -qq
		sudo apt-get install -y -qq -t bookworm-backports golang-go ca-certificates
		;;
	debian:* | ubuntu:*)
		sudo apt-get update -qq
		sudo apt-get install -y -qq golang-go ca-certificates
		;;
	*)
		say "no go of 1.21 or newer on PATH: install one (https://go.dev/dl/, or your distribution's golang package), then run this again"
		exit 1
		;;
	esac
	hash -r 2>/dev/null || true
	if ! have=$(installed) || [ "$(minor "$have")" -lt 21 ]; then
		say "$(command -v go || echo go) is still ${have:-missing}: put /usr/bin before it on PATH, or remove it"
		exit 1
	fi
fi

# A go that may not switch (GOTOOLCHAIN=local) and is older than go.mod's
# cannot build the module.
if [ "$(minor "$have")" -lt "$(minor "$want")" ] && [ "$(cd / && go env GOTOOLCHAIN)" = local ]; then
	if [ "${GOTOOLCHAIN:-}" = local ]; then
		say "GOTOOLCHAIN=local in the environment keeps $have from fetching Go $want: unset it"
		exit 1
	fi
	say "$have has GOTOOLCHAIN=local: setting GOTOOLCHAIN=auto in your go env (go env -w), so that it fetches Go $want"
	go env -w GOTOOLCHAIN=auto
fi
got=$(go env GOVERSION)
say "go on PATH is $have; in this tree it runs $got ($(go env GOROOT))"
