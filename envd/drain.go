package envd

import (
	"context"
	"fmt"
	"strings"
)

// Drain waits until the operations running in this process have finished
// or ctx ends; then it reports those still running (wrapping ctx's error,
// naming them). It cancels nothing: Close does, leaving them unfinished
// for the next Start to resume (saves, GCs) or settle (restores, builds,
// migrations). A caller stops new requests first; background work
// (hibernation) may still start an operation meanwhile, which Drain waits
// for too.
func (s *Service) Drain(ctx context.Context) error {
	if ids := s.ops.Idle(ctx); len(ids) > 0 {
		return fmt.Errorf("%d operation(s) still running: %s: %w", len(ids), strings.Join(ids, ", "), ctx.Err())
	}
	return nil
}
