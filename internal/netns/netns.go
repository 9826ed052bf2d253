// Package netns opens listeners and connections inside a network
// namespace: tests stand up a peer in a namespace they made (a host on a
// bridge, say), and the port proxy reaches an instance's loopback.
package netns

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Listen listens on network and addr inside the network namespace at path
// (/run/netns/NAME, or /proc/PID/ns/net). The socket stays in that
// namespace; the calling goroutine's thread is not moved.
func Listen(path, network, addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	res := make(chan result, 1)
	go func() {
		// Never unlocked: the thread changed namespace, so the runtime
		// must retire it when this goroutine ends.
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			res <- result{err: err}
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			res <- result{err: fmt.Errorf("enter network namespace %s: %w", path, err)}
			return
		}
		ln, err := net.Listen(network, addr)
		res <- result{ln, err}
	}()
	r := <-res
	return r.ln, r.err
}

// Dial connects to addr (network "tcp", "tcp4" or "tcp6") from inside the
// network namespace at path: the socket is made, and connected, on a
// locked OS thread that entered the namespace, so 127.0.0.1 is the
// namespace's loopback. The thread then returns to the namespace it came
// from; when it cannot, it is retired with its goroutine and never runs
// other Go code. The connection lives on in the namespace it was made in.
func Dial(ctx context.Context, path, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			res <- result{err: fmt.Errorf("open the thread's network namespace: %w", err)}
			return
		}
		defer back.Close()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			res <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			res <- result{err: fmt.Errorf("enter network namespace %s: %w", path, err)}
			return
		}
		var d net.Dialer
		conn, err := d.DialContext(ctx, network, addr)
		if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: left locked, so the thread dies with this goroutine
		res <- result{conn, err}
	}()
	r := <-res
	return r.conn, r.err
}
