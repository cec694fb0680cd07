package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/rootgate/rootgate/internal/peerid"
	"github.com/rootgate/rootgate/pipeline"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"
)

// maxAgentConns bounds the connections one run may hold open to the
// forwarded agent at once.
const maxAgentConns = 16

// agentSource is the SSH agent an approver offered: its socket, and the
// identity the daemon takes on to connect to it, so that an approver can
// only lend an agent it can reach itself.
type agentSource struct {
	Path   string
	UID    uint32
	GID    uint32
	Groups []uint32
}

// agentRelay is one run's forwarded agent: a socket owned by the run-as
// user in a fresh directory of root's, each connection to which is
// relayed to the approver's agent, for as long as the run lasts.
type agentRelay struct {
	dir  string
	ln   *net.UnixListener
	src  agentSource
	uid  uint32 // the run-as user, the only peer (besides root) let through
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu     sync.Mutex // guards the fields that follow
	conns  map[net.Conn]struct{}
	closed bool
}

// startAgentRelay makes parent (0711, root) if needed, a fresh 0711
// directory of root's in it, and in that a 0600 socket owned by owner
// relaying to src. The directory stays root's: owner's, it let owner's
// processes, in the run or not, fill the runtime directory's tmpfs
// (/run) for as long as the run lasted. The caller must Close the relay
// when the run ends.
func startAgentRelay(ctx context.Context, parent string, src agentSource, owner pipeline.Account) (*agentRelay, error) {
	if err := os.MkdirAll(parent, 0o711); err != nil {
		return nil, err
	}
	// MkdirAll leaves an existing directory as it is: check it.
	fi, err := os.Lstat(parent)
	if err != nil {
		return nil, err
	}
	if st := fi.Sys().(*syscall.Stat_t); !fi.IsDir() || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s must be a directory owned by root and writable only by it", parent)
	}
	if err := os.Chmod(parent, 0o711); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(parent, "run-")
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, "agent.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	ln.SetUnlinkOnClose(false) // the directory goes as a whole
	uid, gid := int(owner.UID), int(owner.GID)
	for _, step := range []func() error{
		func() error { return os.Chmod(sock, 0o600) },
		func() error { return os.Chown(sock, uid, gid) },
		func() error { return os.Chmod(dir, 0o711) }, // last: from here on, the owner can reach it
	} {
		if err := step(); err != nil {
			ln.Close()
			os.RemoveAll(dir)
			return nil, err
		}
	}
	ctx, stop := context.WithCancel(ctx)
	r := &agentRelay{dir: dir, ln: ln, src: src, uid: owner.UID, stop: stop, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.serve(ctx)
	return r, nil
}

// SocketPath is the run's SSH_AUTH_SOCK.
func (r *agentRelay) SocketPath() string { return filepath.Join(r.dir, "agent.sock") }

// Close stops relaying, ends every relayed connection and removes the
// directory.
func (r *agentRelay) Close() error {
	r.stop()
	r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
	return os.RemoveAll(r.dir)
}

func (r *agentRelay) serve(ctx context.Context) {
	defer r.wg.Done()
	sem := semaphore.NewWeighted(maxAgentConns)
	for {
		c, err := r.ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		// The socket's owner and mode already keep others out; the peer
		// check says so again in code, and rules out a socket passed on
		// to another user.
		peer, err := peerid.Of(c)
		if err != nil || (peer.UID != 0 && uint32(peer.UID) != r.uid) {
			c.Close()
			continue
		}
		if !sem.TryAcquire(1) {
			c.Close() // too many at once
			continue
		}
		if !r.track(c) {
			sem.Release(1)
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer sem.Release(1)
			defer r.untrack(c)
			r.relay(c)
		}()
	}
}

// track adds c to the open connections, unless the relay is closing.
func (r *agentRelay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		c.Close()
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *agentRelay) untrack(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

// relay joins c to a fresh connection to the approver's agent.
func (r *agentRelay) relay(c *net.UnixConn) {
	up, err := dialAs(r.src)
	if err != nil {
		return
	}
	if !r.track(up) {
		return
	}
	defer r.untrack(up)
	done := make(chan struct{})
	go func() {
		io.Copy(up, c)
		up.CloseWrite()
		close(done)
	}()
	io.Copy(c, up)
	c.CloseWrite()
	<-done
}

// dialAs connects to src.Path with src's filesystem identity: path lookup
// and the socket's permissions are checked as the approver, not as root.
// It runs on a thread of its own that is never given back to the Go
// runtime (the goroutine exits still locked, so the thread ends), because
// setgroups, setfsuid and setfsgid change only the calling thread.
func dialAs(src agentSource) (*net.UnixConn, error) {
	type result struct {
		c   *net.UnixConn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // no Unlock: the thread dies with this goroutine
		if src.UID != 0 {
			groups := make([]int, len(src.Groups))
			for i, g := range src.Groups {
				groups[i] = int(g)
			}
			if err := unix.Setgroups(groups); err != nil {
				ch <- result{err: fmt.Errorf("failed to take the approver's groups: %w", err)}
				return
			}
			unix.Setfsgid(int(src.GID))
			if cur, _ := unix.SetfsgidRetGid(-1); cur != int(src.GID) {
				ch <- result{err: fmt.Errorf("failed to take the approver's gid %d", src.GID)}
				return
			}
			unix.Setfsuid(int(src.UID))
			// setfsuid reports no errors; asking with an invalid id
			// returns the current one, which must now be the approver's.
			if cur, _ := unix.SetfsuidRetUid(-1); cur != int(src.UID) {
				ch <- result{err: fmt.Errorf("failed to take the approver's uid %d", src.UID)}
				return
			}
		}
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: src.Path, Net: "unix"})
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
