package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/user"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rootgate/rootgate/approval/remote"
	"github.com/rootgate/rootgate/wire"
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

// serveApprover runs one approver connection.
func (s *Server) serveApprover(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	peer, err := peerOf(c)
	if err != nil {
		remote.Refuse(c, wire.ApproverPeerCredentials)
		return
	}
	user := userNameOf(peer.UID)
	log := s.cfg.Log.With("approver_uid", peer.UID, "approver_pid", peer.PID)
	if !s.cfg.Admission.admits(peer) {
		log.Warn("approver refused: not admitted")
		remote.Refuse(c, wire.ApproverNotAdmitted(peer.UID, user))
		return
	}
	// Each connection costs a walk of the peer's ancestry and keeps the
	// daemon from exiting idle: an admitted uid (often the requester's
	// own) may not open them without bound.
	release, ok := s.approverShares.take(peer.UID)
	if !ok {
		log.Warn("approver refused: too many connections")
		remote.Refuse(c, wire.ApproverTooMany(peer.UID))
		return
	}
	defer release()
	controllers, err := peerControllers(c, peer.PID)
	if err != nil {
		log.Warn("approver refused: controller set unknown", "err", err)
		remote.Refuse(c, wire.ApproverControllers(err))
		return
	}
	s.host.Serve(ctx, c,
		remote.Peer{UID: peer.UID, GID: peer.GID, PID: peer.PID, Groups: peer.Groups, User: user, Controllers: controllers})
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
