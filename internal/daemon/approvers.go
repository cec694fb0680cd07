package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/rootgate/rootgate/internal/approval/remote"
	"github.com/rootgate/rootgate/internal/peerid"
	"golang.org/x/sys/unix"
)

// Admission says who may attach as an approver besides root.
type Admission struct {
	UIDs []int
	GIDs []int
}

// ParseApprover turns a --approver value (USER, or @GROUP) into uids/gids.
func (a *Admission) ParseApprover(v string) error {
	if g, ok := strings.CutPrefix(v, "@"); ok && g != "" {
		grp, err := user.LookupGroup(g)
		if err != nil {
			return fmt.Errorf("--approver %s: no such group", v)
		}
		gid, _ := strconv.Atoi(grp.Gid)
		a.GIDs = append(a.GIDs, gid)
		return nil
	}
	u, err := user.Lookup(v)
	if err != nil {
		return fmt.Errorf("--approver %s: no such user", v)
	}
	uid, _ := strconv.Atoi(u.Uid)
	a.UIDs = append(a.UIDs, uid)
	return nil
}

// Open reports whether anyone besides root is admitted.
func (a Admission) Open() bool { return len(a.UIDs)+len(a.GIDs) > 0 }

// admits reports whether peer may attach.
func (a Admission) admits(p peerInfo) bool {
	if p.UID == 0 || slices.Contains(a.UIDs, p.UID) {
		return true
	}
	for _, g := range a.GIDs {
		if p.GID == g || slices.Contains(p.Groups, uint32(g)) {
			return true
		}
	}
	return false
}

// ServeApprovers accepts approver clients on ln until ctx ends, attaching
// each admitted one to the server's broker. It returns ErrServerClosed
// after ctx ended.
func (s *Server) ServeApprovers(ctx context.Context, ln *net.UnixListener) error {
	if s.cfg.Broker == nil {
		return errors.New("daemon: ServeApprovers needs Config.Broker")
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return ErrServerClosed
			}
			if isTemporary(err) {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			return fmt.Errorf("daemon: accept approver: %w", err)
		}
		end := s.act.begin(s.cfg.Now)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer end()
			s.serveApprover(ctx, c)
		}()
	}
}

// ServeTerminal serves the approver client rootgated --tty runs on its
// own terminal, over c, the daemon's end of the socket pair it made for
// that client, until the connection or ctx ends. peer is that terminal's
// approver as the caller found it: the operator, and the uids that can
// control the terminal (a socket pair's credentials name the daemon
// itself, so none are read from c). attached, when set, is called once
// the client is attached to the broker: requests are put to it from then
// on. The broker names it as the daemon's own terminal (decided_by's via
// "terminal").
func (s *Server) ServeTerminal(ctx context.Context, c *net.UnixConn, peer remote.Peer, attached func()) error {
	if s.host == nil {
		c.Close()
		return errors.New("daemon: ServeTerminal needs Config.Broker")
	}
	defer s.act.begin(s.cfg.Now)()
	s.host.ServeTerminal(ctx, c, peer, attached)
	return nil
}

// serveApprover runs one approver connection.
func (s *Server) serveApprover(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	peer, err := peerid.Of(c)
	if err != nil {
		remote.Refuse(c, remote.ApproverPeerCredentials)
		return
	}
	user := userNameOf(peer.UID)
	log := s.cfg.Log.With("approver_uid", peer.UID, "approver_pid", peer.PID)
	if !s.cfg.Admission.admits(peer) {
		log.Warn("approver refused: not admitted")
		remote.Refuse(c, remote.ApproverNotAdmitted(peer.UID, user))
		return
	}
	// Each connection costs a walk of the peer's ancestry and keeps the
	// daemon from exiting idle: an admitted uid (often the requester's
	// own) may not open them without bound.
	release, ok := s.approverShares.take(peer.UID)
	if !ok {
		log.Warn("approver refused: too many connections")
		remote.Refuse(c, remote.ApproverTooMany(peer.UID))
		return
	}
	defer release()
	run := s.runSigns()
	controllers, err := peerid.ControllersOf(c, peer.PID, run)
	if err != nil {
		log.Warn("approver refused: controller set unknown", "err", err)
		remote.Refuse(c, remote.ApproverControllers(err))
		return
	}
	if run.Why != "" {
		// A run (one as an admitted account, or as the operator, who
		// approved it) must not approve the requests that follow it.
		log.Warn("approver refused: part of a rootgate run", "why", run.Why)
		remote.Refuse(c, remote.ApproverInRun(run.Why))
		return
	}
	s.host.Serve(ctx, c,
		remote.Peer{UID: peer.UID, GID: peer.GID, PID: peer.PID, Groups: peer.Groups, User: user, Controllers: controllers})
}

// runSigns is what tells a process of one of this daemon's runs from
// others: the runs' cgroups when they have them, else the daemon's own
// process when it is their orphans' subreaper; and the environment tag
// every run's stages get (pipeline.RunEnvKey) in either case.
func (s *Server) runSigns() *peerid.RunSigns {
	r := &peerid.RunSigns{}
	if s.cfg.Cgroups != nil {
		r.Cgroups = s.cfg.Cgroups.Parent
	}
	if pid := os.Getpid(); pid != 1 {
		var v int32
		if unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0) == nil && v != 0 {
			r.Daemon = pid
		}
	}
	return r
}

// approverPower says why the account p's run has (or the group it names)
// may approve rootgate requests, or "" when it may not or the run is
// root's or the requester is root: it is admitted to attach an approver
// (--approver, by name or by one of its groups), or it could control the
// terminal or session of an approver attached now or since the daemon
// began. Such a run is root's equal: it could attach an approver or type
// into one and answer the next request for root. Its prompt says so and
// goes only to approvers the account cannot control, and neither a
// policy rule nor a standing grant decides it.
func (s *Server) approverPower(p *runPlan) string {
	if p.named == nil || p.account.UID == 0 || p.peer.UID == 0 {
		return ""
	}
	uid := int(p.account.UID)
	if slices.Contains(s.cfg.Admission.UIDs, uid) {
		return "it is admitted as an approver: --approver " + userNameOf(uid)
	}
	for _, g := range append([]uint32{p.account.GID}, p.account.Groups...) {
		if slices.Contains(s.cfg.Admission.GIDs, int(g)) {
			return "its group " + groupNameOf(int(g)) + " is admitted as an approver: --approver @" + groupNameOf(int(g))
		}
	}
	if b := s.cfg.Broker; b != nil && b.Controls(uid) {
		return "it can control the terminal or session of an approver attached since rootgated started"
	}
	return ""
}

// groupNameOf is the name of group gid, or its number.
func groupNameOf(gid int) string {
	if g, err := user.LookupGroupId(strconv.Itoa(gid)); err == nil {
		return g.Name
	}
	return strconv.Itoa(gid)
}

// nodename is this machine's host name as uname(2) gives it in the
// daemon's UTS namespace, or "" when it cannot be read. An approver client
// shows it on every prompt from this daemon.
func nodename() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return ""
	}
	return unix.ByteSliceToString(u.Nodename[:])
}
