#!/bin/sh
# Prints rootgate's version: the VERSION file at the top of the tree if
# there is one, else the nearest v* tag (git describe), else
# 0.0.0-dev.COMMITS+gHASH for a tree without tags. ".dirty" marks
# uncommitted changes.
set -e
cd "$(dirname "$0")/.."
if [ -f VERSION ]; then
	cat VERSION
	exit 0
fi
if d=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
	echo "${d#v}"
	exit 0
fi
count=$(git rev-list --count HEAD)
hash=$(git rev-parse --short HEAD)
dirty=
git diff --quiet HEAD -- || dirty=.dirty
echo "0.0.0-dev.$count+g$hash$dirty"
