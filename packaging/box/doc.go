// Package box holds rootgate's end-to-end suite under a real systemd: its
// tests build the .deb, boot a minimal Debian root filesystem with
// systemd-nspawn --boot (systemd is PID 1 there), install the package in
// it and check what an operator relies on: the sockets, socket
// activation, approval through `rootgate approve` in tmux, reload, stop,
// idle exit, the journal, upgrade, remove and purge, and shipping the
// journal's audit entries to another journal. TestReadmeFirstCommand runs
// the README's first command as a new user would, from a checkout, in
// such a Debian 12 box and in an Ubuntu 24.04 one, side by side.
//
// Each root filesystem is made once per machine with debootstrap and kept
// under /var/tmp/rootgate-box, keyed by a hash of what goes into it; each
// run boots it through an overlay, so the cached copy is never changed.
// The tests need root, debootstrap, systemd-nspawn (systemd-container)
// and network access to a Debian mirror and Ubuntu's archive the first
// time; the README's test command installs the tools.
package box
