package node

import (
	"context"
	"errors"
	"fmt"
)

// Drain is the first half of a graceful stop: the API stops accepting
// connections and requests, and Drain waits, for up to
// Config.ShutdownGrace or until ctx ends, for the requests in flight and
// the operations running in this process to finish. When the grace is
// over, the API's remaining connections (event streams of operations that
// did not finish, say) are closed and Drain reports what did not finish.
// Close, the second half, cancels the operations that remain; the next
// Start resumes or settles them. Hijacked connections (exec and
// port-forward WebSockets) are not waited for: they end with the process.
func (n *Node) Drain(ctx context.Context) error {
	grace := max(n.cfg.ShutdownGrace, 0)
	ctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	served := make(chan error, 1)
	if n.srv != nil {
		go func() { served <- n.srv.Shutdown(ctx) }()
	} else {
		served <- nil
	}
	var opsErr error
	if n.Service != nil {
		opsErr = n.Service.Drain(ctx)
	}
	// Event streams end when their operation does, so requests are waited
	// for after the operations, within the same grace.
	httpErr := <-served
	if httpErr != nil {
		_ = n.srv.Close()
		httpErr = fmt.Errorf("requests still in flight closed: %w", httpErr)
	}
	return errors.Join(opsErr, httpErr)
}
