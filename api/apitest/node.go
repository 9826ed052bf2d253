package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// Node is the fake NodeCore; GC starts an operation in Operations.
type Node struct {
	*Recorder
	ops    *Operations
	GCFunc func(ctx context.Context, req types.GCRequest, key string) (types.Operation, error)
}

func (c *Node) Info(ctx context.Context) (types.Info, error) {
	return echo(c, "Info", types.Principal{}, types.Info{Version: "test", Node: "node-1", Registry: "127.0.0.1:5000",
		Components: map[string]string{"containerd": "v2.4.2"}})
}

// GC starts a running operation of kind "gc".
func (c *Node) GC(ctx context.Context, p types.Principal, req types.GCRequest, key string) (types.Operation, error) {
	c.record("GC", p, req, key)
	if c.GCFunc != nil {
		return c.GCFunc(ctx, req, key)
	}
	return c.ops.NewOperation("gc", "registry"), nil
}
