package envd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/internal/netns"
	"github.com/envd-dev/envd/versions"
)

// DialInstance opens a TCP connection to port of a running instance, as
// a process inside it would reach 127.0.0.1:port: the socket is made in
// the network namespace of the instance's task, so servers bound to
// loopback only (Vite, Next, Jupyter by default) are reached as well as
// those on every address. When nothing listens on 127.0.0.1, ::1 is
// tried. Each connection counts as activity on the instance.
//
// Errors: ErrInvalidArgument for a port outside 1-65535; ErrNotFound for
// an instance not of p's tenant; ErrFailedPrecondition when the instance
// is not Running or runs on another node; ErrPortUnreachable when nothing
// listens on the port.
func (s *Service) DialInstance(ctx context.Context, p types.Principal, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: must be from 1 to 65535: %w", port, errdefs.ErrInvalidArgument)
	}
	_, pid, err := s.instancePid(ctx, p, id)
	if err != nil {
		return nil, err
	}
	ns := fmt.Sprintf("/proc/%d/ns/net", pid)
	var conn net.Conn
	for _, host := range []string{"127.0.0.1", "::1"} {
		conn, err = netns.Dial(ctx, ns, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
		if err == nil || !refused(err) {
			break
		}
	}
	if err != nil {
		if refused(err) {
			return nil, fmt.Errorf("port %d of instance %q: nothing listens on it (127.0.0.1 nor ::1): %w", port, id, errdefs.ErrPortUnreachable)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to port %d of instance %q: %w", port, id, ctx.Err())
		}
		return nil, fmt.Errorf("connect to port %d of instance %q: %v: %w", port, id, err, errdefs.ErrUnavailable)
	}
	s.TouchInstance(id)
	return conn, nil
}

// refused reports whether a dial failed because nothing listens there
// (or the address family has no loopback in the namespace).
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENETUNREACH)
}

// instancePid returns instance id, which must be Running on this node and
// belong to p's tenant, and the pid of its task.
func (s *Service) instancePid(ctx context.Context, p types.Principal, id string) (versions.Instance, uint32, error) {
	// The store, not GetInstance: its view asks the runtime for more than
	// this needs, on every new proxied connection.
	if err := names.ValidateInstanceID(id); err != nil {
		return versions.Instance{}, 0, err
	}
	in, err := s.store.GetInstance(ctx, p.Tenant, id)
	if err != nil {
		return versions.Instance{}, 0, err
	}
	if in.State != types.StateRunning {
		return versions.Instance{}, 0, fmt.Errorf("instance %q is %s, not Running: %w", id, in.State, errdefs.ErrFailedPrecondition)
	}
	if in.Node != s.cfg.Node {
		return versions.Instance{}, 0, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, s.cfg.Node, errdefs.ErrFailedPrecondition)
	}
	st, err := s.rt.Status(ctx, id)
	if err != nil {
		return versions.Instance{}, 0, err
	}
	if st.Task != "running" || st.Pid == 0 {
		return versions.Instance{}, 0, fmt.Errorf("instance %q has no running task: %w", id, errdefs.ErrFailedPrecondition)
	}
	return in, st.Pid, nil
}
