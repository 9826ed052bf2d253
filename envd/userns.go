package envd

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter"
)

// idShift is how a save maps instance id's upper dir ids back to the
// container's: nil unless it runs in a user namespace (the node's --userns).
func (s *Service) idShift(ctx context.Context, id string) (*snapshotter.IDShift, error) {
	st, err := s.rt.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	v := st.Labels[runtime.LabelUserNS]
	if v == "" {
		return nil, nil
	}
	m, err := runtime.ParseUserNSLabel(v)
	if err != nil {
		return nil, fmt.Errorf("instance %q: %w", id, err)
	}
	return &snapshotter.IDShift{HostBase: m[0].HostID, Size: m[0].Size}, nil
}
