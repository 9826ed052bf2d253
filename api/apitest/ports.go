package apitest

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Ports is the fake PortCore. The preview token is
// "preview-<instance>-<port>"; the port 8443 of every instance is public;
// instance "gone" does not exist; instance "sleepy" is stopped until
// WakeInstance was called for it.
type Ports struct {
	*Recorder
	*Wake
	auth *Auth // whom a preview token admits
	// DialInstanceFunc, when set, is DialInstance.
	DialInstanceFunc func(ctx context.Context, id string, port int) (net.Conn, error)
}

func (c *Ports) DialInstance(ctx context.Context, p types.Principal, id string, port int) (net.Conn, error) {
	c.record("DialInstance", p, id, port)
	if id == "gone" {
		return nil, fmt.Errorf("instance %q: %w", id, errdefs.ErrNotFound)
	}
	if _, woken := c.LastCall("WakeInstance"); id == "sleepy" && !woken {
		return nil, fmt.Errorf("instance %q is Stopped, not Running: %w", id, errdefs.ErrFailedPrecondition)
	}
	if c.DialInstanceFunc != nil {
		return c.DialInstanceFunc(ctx, id, port)
	}
	return nil, fmt.Errorf("port %d of instance %q: %w", port, id, errdefs.ErrPortUnreachable)
}

func (c *Ports) TouchInstance(id string) { c.record("TouchInstance", types.Principal{}, id) }

// HoldInstance records "HoldInstance", and "ReleaseInstance" on release.
func (c *Ports) HoldInstance(id string) func() {
	c.record("HoldInstance", types.Principal{}, id)
	return func() { c.record("ReleaseInstance", types.Principal{}, id) }
}

func (c *Ports) ListPorts(ctx context.Context, p types.Principal, id string) ([]types.ListeningPort, error) {
	c.record("ListPorts", p, id)
	return []types.ListeningPort{{Address: "127.0.0.1", Port: 8080, Protocol: "tcp"}}, nil
}

func (c *Ports) PreviewToken(ctx context.Context, p types.Principal, id string, port int, req types.PreviewTokenRequest) (types.PreviewToken, error) {
	c.record("PreviewToken", p, id, port, req)
	return types.PreviewToken{Token: fmt.Sprintf("preview-%s-%d", id, port), ExpiresAt: time.Now().Add(time.Hour).UTC().Truncate(time.Second)}, nil
}

func (c *Ports) PreviewAccess(ctx context.Context, id string, port int, token string) (types.Principal, time.Time, error) {
	c.record("PreviewAccess", types.Principal{}, id, port, token)
	if token == fmt.Sprintf("preview-%s-%d", id, port) {
		return c.auth.Principal, time.Now().Add(time.Hour), nil
	}
	if port == 8443 {
		return c.auth.Principal, time.Time{}, nil
	}
	return types.Principal{}, time.Time{}, fmt.Errorf("port %d of instance %q: no valid preview token: %w", port, id, errdefs.ErrUnauthenticated)
}

func (c *Ports) GetProjectPorts(ctx context.Context, p types.Principal, project string) (types.ProjectPorts, error) {
	c.record("GetProjectPorts", p, project)
	return types.ProjectPorts{Public: []int{}}, nil
}

func (c *Ports) SetProjectPorts(ctx context.Context, p types.Principal, project string, req types.ProjectPorts) (types.ProjectPorts, error) {
	c.record("SetProjectPorts", p, project, req)
	return req, nil
}
