package main

import (
	"context"
	"time"

	"github.com/envd-dev/envd/envd/node"
)

// shutdown ends a serving node on SIGTERM or SIGINT: it stops taking
// requests, lets requests and operations in flight finish for up to
// cfg.ShutdownGrace (node.Node.Drain), then closes the node, which cancels
// what remains; the next start resumes or settles those operations.
// Instances, containerd and PostgreSQL keep running, as on any restart.
func shutdown(n *node.Node, cfg node.Config) error {
	cfg.Logger.Info("shutting down: no new requests, waiting for those in flight and running operations", "grace", max(cfg.ShutdownGrace, 0))
	if err := n.Drain(context.Background()); err != nil {
		cfg.Logger.Warn("shutdown grace over: cancelling what remains, the next start resumes or settles it", "err", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.Close(ctx)
	cfg.Logger.Info("envd stopped")
	return nil
}
