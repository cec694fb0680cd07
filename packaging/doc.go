// Package packaging holds no code: it is where rootgate's .deb and .rpm are
// described (nfpm.yaml, the default policy, the maintainer scripts, built
// by `make packages` at the top of the tree) and where they are tested.
//
// Its tests check the systemd units in ../systemd with systemd-analyze,
// build both packages with the real Makefile and nfpm, inspect them with
// dpkg-deb and rpm, and install, remove and purge the .deb on this machine
// with dpkg. They need root.
package packaging
