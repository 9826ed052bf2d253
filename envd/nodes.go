package envd

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// PlaceInstance picks the node of a new instance of project
// (cluster.Placer.PlaceInstance).
func (s *Service) PlaceInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest) (node, apiURL, reason string, local bool, err error) {
	return s.placer.PlaceInstance(ctx, p, project, req)
}
