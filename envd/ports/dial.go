package ports

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"syscall"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/limiter"
	"github.com/envd-dev/envd/internal/netns"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// DialInstance opens a TCP connection to port of a running instance, as
// a process inside it would reach 127.0.0.1:port: the socket is made in
// the network namespace of the instance's task, so servers bound to
// loopback only (Vite, Next, Jupyter by default) are reached as well as
// those on every address. When nothing listens on 127.0.0.1, ::1 is
// tried. Each connection counts as activity on the instance. On gVisor
// the same servers are reached another way (sandbox.go).
//
// A dial in progress holds one slot of AdmitDials for p's tenant and for
// the node (DialLimits) and lasts at most DialLimits.Timeout; the
// connection it returns holds none.
//
// Errors: ErrInvalidArgument for a port outside 1-65535; ErrResourceExhausted
// past the dial limits or the node's thread high-water mark; ErrNotFound
// for an instance not of p's tenant; ErrFailedPrecondition when the
// instance is not Running or runs on another node; ErrPortUnreachable when
// nothing listens on the port, or its listener accepts nothing within the
// timeout.
func (pt *Ports) DialInstance(ctx context.Context, p types.Principal, id string, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: must be from 1 to 65535: %w", port, errdefs.ErrInvalidArgument)
	}
	release, err := pt.admitDial(p)
	if err != nil {
		return nil, err
	}
	defer release()
	_, st, err := pt.instancePid(ctx, p, id)
	if err != nil {
		return nil, err
	}
	timeout := pt.dialLimits().Timeout
	dctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.Conn
	if st.Class == runtime.ClassGVisor {
		conn, err = pt.dialSandbox(ctx, dctx, id, st.Address, port)
		if err != nil && errdefs.Code(err) != "internal" && dctx.Err() == nil {
			return nil, err // the relay's, of a kind already
		}
	} else {
		ns := fmt.Sprintf("/proc/%d/ns/net", st.Pid)
		for _, host := range []string{"127.0.0.1", "::1"} {
			conn, err = netns.Dial(dctx, ns, "tcp", net.JoinHostPort(host, strconv.Itoa(port)))
			if err == nil || !refused(err) {
				break
			}
		}
	}
	if err != nil {
		if refused(err) {
			return nil, fmt.Errorf("port %d of instance %q: nothing listens on it (127.0.0.1 nor ::1): %w", port, id, errdefs.ErrPortUnreachable)
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("connect to port %d of instance %q: %w", port, id, ctx.Err())
		}
		if dctx.Err() != nil {
			return nil, fmt.Errorf("port %d of instance %q: its listener accepted no connection within %s (it does not call accept, and its backlog is full): %w",
				port, id, timeout, errdefs.ErrPortUnreachable)
		}
		return nil, fmt.Errorf("connect to port %d of instance %q: %v: %w", port, id, err, errdefs.ErrUnavailable)
	}
	pt.instances.Touch(id)
	return conn, nil
}

// DialLimits bound the connections to instances' ports being opened at
// once (port proxy, TCP tunnels, SSH -L forwarding), each a slot of kind
// AdmitDials from the check of the instance to the end of the connect.
// Zero fields take DefaultDialLimits; a negative count is unlimited.
type DialLimits struct {
	PerTenant int           // per tenant on this node; default 32
	PerNode   int           // over all tenants on this node; default 512
	Timeout   time.Duration // longest connect; default 10s
}

// DefaultDialLimits are the node defaults: a dial to a listening port
// takes well under a millisecond, so these are only reached by dials that
// hang (a listener that never accepts).
var DefaultDialLimits = DialLimits{PerTenant: 32, PerNode: 512, Timeout: 10 * time.Second}

// AdmitDials is the admission kind of connections to instances' ports
// being opened (DialLimits).
const AdmitDials = "dials"

func (pt *Ports) dialLimits() DialLimits {
	l, d := pt.limits, DefaultDialLimits
	if l.PerTenant == 0 {
		l.PerTenant = d.PerTenant
	}
	if l.PerNode == 0 {
		l.PerNode = d.PerNode
	}
	if l.Timeout <= 0 {
		l.Timeout = d.Timeout
	}
	return l
}

// admitDial takes a dial slot for p's tenant and the node, once the
// node's thread count allows new work.
func (pt *Ports) admitDial(p types.Principal) (release func(), err error) {
	if err := pt.threads(); err != nil {
		return nil, err
	}
	pt.dialsOnce.Do(func() {
		l := pt.dialLimits()
		pt.dials = limiter.New(map[string]limiter.Limit{AdmitDials: {Max: l.PerTenant, NodeMax: l.PerNode, RetryAfter: time.Second}})
	})
	return pt.dials.Acquire(p.Tenant, AdmitDials)
}

// refused reports whether a dial failed because nothing listens there
// (or the address family has no loopback in the namespace).
func refused(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EADDRNOTAVAIL) || errors.Is(err, syscall.ENETUNREACH)
}

// instancePid returns instance id, which must be Running on this node and
// belong to p's tenant, and the status of its task (Pid set).
func (pt *Ports) instancePid(ctx context.Context, p types.Principal, id string) (versions.Instance, runtime.Status, error) {
	// The store, not GetInstance: its view asks the runtime for more than
	// this needs, on every new proxied connection.
	if err := names.ValidateInstanceID(id); err != nil {
		return versions.Instance{}, runtime.Status{}, err
	}
	in, err := pt.store.GetInstance(ctx, p.Tenant, id)
	if err != nil {
		return versions.Instance{}, runtime.Status{}, err
	}
	if in.State != types.StateRunning {
		return versions.Instance{}, runtime.Status{}, fmt.Errorf("instance %q is %s, not Running: %w", id, in.State, errdefs.ErrFailedPrecondition)
	}
	if in.Node != pt.node {
		return versions.Instance{}, runtime.Status{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, pt.node, errdefs.ErrFailedPrecondition)
	}
	st, err := pt.rt.Status(ctx, id)
	if err != nil {
		return versions.Instance{}, runtime.Status{}, err
	}
	if st.Task != "running" || st.Pid == 0 {
		return versions.Instance{}, runtime.Status{}, fmt.Errorf("instance %q has no running task: %w", id, errdefs.ErrFailedPrecondition)
	}
	return in, st, nil
}
