package pipeline

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// AsUser calls fn with the file system identity of acct: on a thread of
// its own whose fsuid, fsgid and supplementary groups are acct's UID, GID
// and Groups while fn runs, so every path fn follows and every file it
// opens is checked against acct's rights, not the caller's. Use it to
// resolve and open what a run as acct will use ([OpenDir], [Resolve],
// [Pin]): the descriptors fn opens stay valid after it returns.
//
// Only the thread's file system identity changes, through the raw
// per-thread system calls (the process-wide wrappers of Go and libc apply
// a change to every thread); its uid, gid and capabilities other than the
// file system ones stay, and so does every other thread's identity. The
// caller must be root (CAP_SETUID, CAP_SETGID). fn must not start
// goroutines that open files: they run on other threads.
//
// Afterwards the thread's identity is restored and checked (fsuid, fsgid,
// groups and capabilities as before); if that fails, the thread is never
// handed back to the runtime, which then ends it, and AsUser returns an
// error. It also returns an error when the identity could not be taken,
// without calling fn; otherwise it returns fn's error.
func AsUser(acct *Account, fn func() error) error {
	type result struct {
		err   error
		panic any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only once the thread's own identity is back: a
		// goroutine that ends still locked takes its thread with it.
		var res result
		defer func() { done <- res }()
		saved, err := threadIdentity()
		if err != nil {
			runtime.UnlockOSThread()
			res.err = fmt.Errorf("as user %d: %w", acct.UID, err)
			return
		}
		err = setThreadIdentity(acct.UID, acct.GID, acct.Groups)
		if err == nil {
			func() {
				defer func() { res.panic = recover() }()
				res.err = fn()
			}()
		} else {
			err = fmt.Errorf("as user %d: %w", acct.UID, err)
		}
		if rerr := saved.restore(); rerr != nil {
			res.err, res.panic = fmt.Errorf("as user %d: restore the thread's identity: %w", acct.UID, rerr), nil
			return // still locked: the runtime ends this thread
		}
		runtime.UnlockOSThread()
		if err != nil {
			res.err = err
		}
	}()
	res := <-done
	if res.panic != nil {
		panic(res.panic)
	}
	return res.err
}

// identity is a thread's file system identity and capabilities.
type identity struct {
	fsuid, fsgid uint32
	groups       []uint32
	caps         [2]unix.CapUserData
}

// noID is (uid_t)-1: setfsuid and setfsgid change nothing and return the
// current id.
const noID = ^uint32(0)

// threadIdentity reads the calling thread's identity.
func threadIdentity() (*identity, error) {
	id := &identity{fsuid: setfsuid(noID), fsgid: setfsgid(noID)}
	var err error
	if id.groups, err = getgroups(); err != nil {
		return nil, err
	}
	if id.caps, err = capget(); err != nil {
		return nil, err
	}
	return id, nil
}

// restore gives the calling thread back identity id and checks it has it.
func (id *identity) restore() error {
	if err := setThreadIdentity(id.fsuid, id.fsgid, id.groups); err != nil {
		return err
	}
	now, err := threadIdentity()
	if err != nil {
		return err
	}
	if now.caps != id.caps {
		return errors.New("capabilities not restored")
	}
	return nil
}

// setThreadIdentity sets the calling thread's groups, fsgid and fsuid, in
// that order (setting the groups and the fsgid needs CAP_SETGID, which a
// non-zero fsuid would not take away, but be plain), and checks them.
func setThreadIdentity(uid, gid uint32, groups []uint32) error {
	if err := setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	setfsgid(gid)
	setfsuid(uid)
	if got := setfsgid(noID); got != gid {
		return fmt.Errorf("setfsgid %d: fsgid is %d", gid, got)
	}
	if got := setfsuid(noID); got != uid {
		return fmt.Errorf("setfsuid %d: fsuid is %d", uid, got)
	}
	got, err := getgroups()
	if err != nil {
		return fmt.Errorf("getgroups: %w", err)
	}
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(groups))) {
		return fmt.Errorf("setgroups %v: groups are %v", groups, got)
	}
	return nil
}

// setfsuid sets the calling thread's fsuid (noID: leaves it) and returns
// the previous one.
func setfsuid(uid uint32) uint32 {
	r, _, _ := unix.RawSyscall(unix.SYS_SETFSUID, uintptr(uid), 0, 0)
	return uint32(r)
}

// setfsgid is setfsuid for the fsgid.
func setfsgid(gid uint32) uint32 {
	r, _, _ := unix.RawSyscall(unix.SYS_SETFSGID, uintptr(gid), 0, 0)
	return uint32(r)
}

// setgroups sets the calling thread's supplementary groups, and no other
// thread's.
func setgroups(groups []uint32) error {
	var p unsafe.Pointer
	if len(groups) > 0 {
		p = unsafe.Pointer(&groups[0])
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(groups)), uintptr(p), 0); e != 0 {
		return e
	}
	return nil
}

// getgroups reads the calling thread's supplementary groups.
func getgroups() ([]uint32, error) {
	for {
		n, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, 0, 0, 0)
		if e != 0 {
			return nil, e
		}
		if n == 0 {
			return []uint32{}, nil
		}
		groups := make([]uint32, n)
		m, _, e := unix.RawSyscall(unix.SYS_GETGROUPS, n, uintptr(unsafe.Pointer(&groups[0])), 0)
		if e == unix.EINVAL {
			continue // grew meanwhile
		}
		if e != 0 {
			return nil, e
		}
		return groups[:m], nil
	}
}

// capget reads the calling thread's capability sets.
func capget() ([2]unix.CapUserData, error) {
	var data [2]unix.CapUserData
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return data, fmt.Errorf("capget: %w", err)
	}
	return data, nil
}
