package apitest

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Forward is the fake ForwardCore.
type Forward struct {
	*Recorder
	// InstanceOwnerFunc says which node answers for an instance; without
	// it every instance is this node's.
	InstanceOwnerFunc func(ctx context.Context, id string) (node, apiURL string, local bool, err error)
}

// InstanceOwner answers local unless InstanceOwnerFunc says otherwise; it
// is not recorded (every instance route asks it).
func (c *Forward) InstanceOwner(ctx context.Context, p types.Principal, id string) (string, string, bool, error) {
	if c.InstanceOwnerFunc != nil {
		return c.InstanceOwnerFunc(ctx, id)
	}
	return "", "", true, nil
}

// Cluster is the fake ClusterCore: one member, node-1, which places
// every instance and owns every operation.
type Cluster struct{ *Recorder }

// fakeNode is the fake's one member, ready.
func fakeNode(state string) types.Node {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	return types.Node{Name: "node-1", APIURL: "http://127.0.0.1:1", State: state, Labels: map[string]string{"zone": "a"},
		Capacity: types.NodeCapacity{CPUs: 2, MemoryBytes: 4 << 30, DiskBytes: 100 << 30}, LeaseSeconds: 15,
		LeaseExpiresAt: t.Add(15 * time.Second), RenewedAt: t, StartedAt: t, StateChangedAt: t}
}

func (c *Cluster) nodeCall(method string, p types.Principal, name, state string) (types.Node, error) {
	c.record(method, p, name)
	if !p.Admin {
		return types.Node{}, fmt.Errorf("nodes: %w", errdefs.ErrPermissionDenied)
	}
	if name != "node-1" {
		return types.Node{}, fmt.Errorf("node %q: %w", name, errdefs.ErrNotFound)
	}
	return fakeNode(state), nil
}

// ListNodes answers the one member, node-1.
func (c *Cluster) ListNodes(ctx context.Context, p types.Principal) ([]types.Node, error) {
	c.record("ListNodes", p)
	if !p.Admin {
		return nil, fmt.Errorf("nodes: %w", errdefs.ErrPermissionDenied)
	}
	return []types.Node{fakeNode(types.NodeReady)}, nil
}

// GetNode answers node-1, else not found.
func (c *Cluster) GetNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return c.nodeCall("GetNode", p, name, types.NodeReady)
}

// CordonNode answers node-1 cordoned.
func (c *Cluster) CordonNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return c.nodeCall("CordonNode", p, name, types.NodeCordoned)
}

// UncordonNode answers node-1 ready.
func (c *Cluster) UncordonNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return c.nodeCall("UncordonNode", p, name, types.NodeReady)
}

// DrainNode answers node-1 draining.
func (c *Cluster) DrainNode(ctx context.Context, p types.Principal, name string) (types.Node, error) {
	return c.nodeCall("DrainNode", p, name, types.NodeDraining)
}

// JoinCommand answers a fixed command.
func (c *Cluster) JoinCommand(ctx context.Context, p types.Principal) (types.JoinCommand, error) {
	c.record("JoinCommand", p)
	if !p.Admin {
		return types.JoinCommand{}, fmt.Errorf("join command: %w", errdefs.ErrPermissionDenied)
	}
	return types.JoinCommand{Command: "envd serve --database postgres://x", Args: []string{"envd", "serve", "--database", "postgres://x"}, Secrets: []string{"--database"}}, nil
}

// PlaceInstance places every instance here.
func (c *Cluster) PlaceInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (string, string, string, bool, error) {
	return "node-1", "", "placed on node-1: the only node", true, nil
}

// SetProjectCheckpoint echoes the setting.
func (c *Cluster) SetProjectCheckpoint(ctx context.Context, p types.Principal, project string, s types.CheckpointSetting) (types.CheckpointSetting, error) {
	return echo(c, "SetProjectCheckpoint", p, s, project)
}

// GetProjectCheckpoint answers never.
func (c *Cluster) GetProjectCheckpoint(ctx context.Context, p types.Principal, project string) (types.CheckpointSetting, error) {
	return echo(c, "GetProjectCheckpoint", p, types.CheckpointSetting{Every: "0"}, project)
}

// OperationOwner answers local.
func (c *Cluster) OperationOwner(ctx context.Context, p types.Principal, id string) (string, string, bool, error) {
	return "node-1", "", true, nil
}
