// Package netns opens listeners inside a network namespace, for tests that
// stand up a peer in a namespace they made (a host on a bridge, say).
package netns

import (
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
