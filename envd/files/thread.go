package files

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Streams (archives in and out) last as long as their client takes; a
// slow or stalled client must not hold an OS thread (a node has a few
// thousand, and the Go runtime aborts the process past its limit). So a
// stream runs as an actor: a goroutine that is locked to a thread acting
// as the identity while it makes file system calls, and that gives the
// thread back, with the process's credentials restored, while it waits on
// the client (actor.wait). A thread goes back to the scheduler only once
// its credentials were read back equal to those it had before; if they
// cannot be restored it stays locked and ends with its goroutine, as
// every thread of Root.as does.

// creds are the per-thread credentials become changes.
type creds struct {
	fsuid, fsgid int
	groups       []int
	caps         [2]unix.CapUserData
}

func (c creds) equal(o creds) bool {
	return c.fsuid == o.fsuid && c.fsgid == o.fsgid && slices.Equal(c.groups, o.groups) && c.caps == o.caps
}

// threadCreds reads the calling thread's credentials.
func threadCreds() (creds, error) {
	var c creds
	c.fsuid, _ = unix.SetfsuidRetUid(-1) // -1 changes nothing, returns the current id
	c.fsgid, _ = unix.SetfsgidRetGid(-1)
	groups, err := unix.Getgroups() // getgroups(2) reads the calling thread's
	if err != nil {
		return c, fmt.Errorf("getgroups: %w", err)
	}
	slices.Sort(groups)
	c.groups = groups
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capget(&hdr, &c.caps[0]); err != nil {
		return c, fmt.Errorf("capget: %w", err)
	}
	return c, nil
}

// restoreCreds gives the calling thread the credentials c back and checks
// that it has them.
func restoreCreds(c creds) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	caps := c.caps
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	if unix.Geteuid() == 0 {
		gs := make([]uint32, len(c.groups))
		for i, g := range c.groups {
			gs[i] = uint32(g)
		}
		var p unsafe.Pointer
		if len(gs) > 0 {
			p = unsafe.Pointer(&gs[0])
		}
		// Raw: unix.Setgroups changes every thread of the process.
		_, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, uintptr(len(gs)), uintptr(p), 0)
		runtime.KeepAlive(gs)
		if e != 0 {
			return fmt.Errorf("setgroups: %w", e)
		}
	}
	unix.Setfsgid(c.fsgid)
	unix.Setfsuid(c.fsuid)
	now, err := threadCreds()
	if err != nil {
		return err
	}
	if !now.equal(c) {
		return errors.New("the thread's credentials read back different")
	}
	return nil
}

// actor is a goroutine that acts as a Root's identity in turns (see
// above). Only its own goroutine may call its methods.
type actor struct {
	r     *Root
	saved creds
	// stuck: the thread's credentials are (or may be) the identity's and
	// could not be restored; the thread stays locked and ends with the
	// goroutine, and the actor makes no more calls.
	stuck bool
}

// stream runs fn on an actor of its own, on a thread acting as the
// identity except inside fn's calls of a.wait, and returns fn's error.
func (r *Root) stream(fn func(a *actor) error) error {
	done := make(chan error, 1)
	go func() {
		a := &actor{r: r}
		defer func() {
			if rec := recover(); rec != nil {
				// Where it panicked is unknown: the thread is not given back.
				a.stuck = true
				done <- fmt.Errorf("file operation: internal error: %v", rec)
			}
		}()
		if err := a.enter(); err != nil {
			done <- err
			return
		}
		err := fn(a)
		if !a.stuck {
			err = errors.Join(err, a.leave())
		}
		done <- err
	}()
	return <-done
}

// enter locks the goroutine to its thread and gives the thread the
// identity.
func (a *actor) enter() error {
	if a.stuck {
		return errThreadStuck
	}
	runtime.LockOSThread()
	saved, err := threadCreds()
	if err != nil {
		runtime.UnlockOSThread() // nothing changed
		return err
	}
	a.saved = saved
	if err := a.r.become(true); err != nil {
		a.stuck = true // partly changed
		return err
	}
	return nil
}

// leave restores the thread's credentials and unlocks it.
func (a *actor) leave() error {
	if err := restoreCreds(a.saved); err != nil {
		a.stuck = true
		return fmt.Errorf("file operation: restore a thread's credentials: %w", err)
	}
	runtime.UnlockOSThread()
	return nil
}

var errThreadStuck = errors.New("file operation: a thread's credentials could not be restored")

// wait runs fn, a wait on the client (a read or write of the network),
// without a thread of the identity, and takes one again after.
func (a *actor) wait(fn func() error) error {
	if a.stuck {
		return errThreadStuck
	}
	if err := a.leave(); err != nil {
		return err
	}
	ferr := fn()
	if err := a.enter(); err != nil {
		return errors.Join(ferr, err)
	}
	return ferr
}

// parkWriter writes to w while its actor waits.
type parkWriter struct {
	a *actor
	w io.Writer
}

func (p parkWriter) Write(b []byte) (n int, err error) {
	err = p.a.wait(func() error {
		n, err = p.w.Write(b)
		return err
	})
	return n, err
}

// parkReader reads from r while its actor waits.
type parkReader struct {
	a *actor
	r io.Reader
}

func (p parkReader) Read(b []byte) (n int, err error) {
	werr := p.a.wait(func() error {
		n, err = p.r.Read(b)
		return nil
	})
	if werr != nil {
		return n, werr
	}
	return n, err
}

// streamBuffer is the size of the buffers between an actor and its
// client: one wait per this many bytes.
const streamBuffer = 256 << 10
