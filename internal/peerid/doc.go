// Package peerid is who is at the other end of a Unix socket, as the
// kernel says and never as the peer says: its credentials, supplementary
// groups and executable, read once at accept while a pidfd holds the
// process (Of), and the set of uids that control it (Controllers): the
// owners of the terminals and sessions along its ancestry, which is how
// rootgated decides which approvers a requester could type into. Along
// the way it looks for signs that a process belongs to a rootgate run
// (RunSigns).
package peerid
