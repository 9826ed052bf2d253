// Package netns opens listeners and connections inside a network
// namespace: tests stand up a peer in a namespace they made (a host on a
// bridge, say), and the port proxy reaches an instance's loopback.
package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"syscall"
	"time"

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

// Dial connects to addr (network "tcp", "tcp4" or "tcp6"; addr an IP
// literal and a port, "127.0.0.1:8080" or "[::1]:8080") from inside the
// network namespace at path, so 127.0.0.1 is the namespace's loopback.
//
// Only the socket(2) call runs in the namespace, on a locked OS thread that
// enters it and returns at once (a socket belongs to the namespace it was
// made in, wherever it is used from); when the thread cannot return, it
// is retired with its goroutine and never runs other Go code. The connect
// is non-blocking and awaited in the runtime's poller like any net.Dial,
// so a dial that hangs (a listener whose backlog is full) holds no OS
// thread. ctx bounds the connect: when it ends first, Dial returns its
// error. Errors wrap the system call's errno (syscall.ECONNREFUSED, ...).
func Dial(ctx context.Context, path, network, addr string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s %s: address must be an IP literal and a port: %w", network, addr, err)
	}
	ip := ap.Addr().Unmap()
	var (
		family int
		sa     unix.Sockaddr
	)
	switch {
	case ip.Is4() && network != "tcp6":
		family, sa = unix.AF_INET, &unix.SockaddrInet4{Port: int(ap.Port()), Addr: ip.As4()}
	case ip.Is6() && network != "tcp4":
		family, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: int(ap.Port()), Addr: ip.As16()}
	default:
		return nil, fmt.Errorf("dial %s %s: address of another family", network, addr)
	}
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, fmt.Errorf("dial %s %s: only tcp, tcp4 and tcp6", network, addr)
	}
	fd, err := socketIn(path, family)
	if err != nil {
		return nil, err
	}
	return connect(ctx, fd, sa, network, addr)
}

// socketIn makes a non-blocking TCP socket of family in the network
// namespace at path, on a thread locked for that alone.
func socketIn(path string, family int) (int, error) {
	type result struct {
		fd  int
		err error
	}
	res := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		back, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			res <- result{-1, fmt.Errorf("open the thread's network namespace: %w", err)}
			return
		}
		defer back.Close()
		target, err := os.Open(path)
		if err != nil {
			runtime.UnlockOSThread()
			res <- result{-1, err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			res <- result{-1, fmt.Errorf("enter network namespace %s: %w", path, err)}
			return
		}
		fd, err := unix.Socket(family, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, unix.IPPROTO_TCP)
		if unix.Setns(int(back.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: left locked, so the thread dies with this goroutine
		if err != nil {
			res <- result{-1, os.NewSyscallError("socket", err)}
			return
		}
		res <- result{fd, nil}
	}()
	r := <-res
	return r.fd, r.err
}

// connect connects the non-blocking socket fd to sa and returns it as a
// net.Conn; fd is closed on every path (the connection holds a copy).
func connect(ctx context.Context, fd int, sa unix.Sockaddr, network, addr string) (net.Conn, error) {
	opErr := func(err error) error {
		return &net.OpError{Op: "dial", Net: network, Addr: tcpAddr(addr), Err: err}
	}
	err := unix.Connect(fd, sa)
	if err != nil && !errors.Is(err, unix.EINPROGRESS) {
		unix.Close(fd)
		return nil, opErr(os.NewSyscallError("connect", err))
	}
	// A non-blocking fd: os.NewFile registers it with the runtime's poller.
	f := os.NewFile(uintptr(fd), "netns-dial "+addr)
	defer f.Close()
	if err != nil { // EINPROGRESS: wait until the socket is writable
		rc, err := f.SyscallConn()
		if err != nil {
			return nil, opErr(err)
		}
		stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
		var connErr error
		werr := rc.Write(func(fd uintptr) bool {
			n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
			switch {
			case err != nil:
				connErr = os.NewSyscallError("getsockopt", err)
			case n != 0:
				connErr = os.NewSyscallError("connect", syscall.Errno(n))
			default:
				if _, err := unix.Getpeername(int(fd)); err != nil {
					return false // still connecting
				}
			}
			return true
		})
		stop()
		if werr != nil {
			if ctx.Err() != nil {
				return nil, opErr(ctx.Err())
			}
			return nil, opErr(werr)
		}
		if connErr != nil {
			return nil, opErr(connErr)
		}
	}
	conn, err := net.FileConn(f)
	if err != nil {
		return nil, opErr(err)
	}
	return conn, nil
}

type tcpAddr string

func (a tcpAddr) Network() string { return "tcp" }
func (a tcpAddr) String() string  { return string(a) }
