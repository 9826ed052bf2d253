package envd

import (
	"context"
	"fmt"

	"github.com/envd-dev/envd/internal/errdefs"
	"github.com/envd-dev/envd/runtime"
)

// checkSavable refuses, before an operation starts, a save of an instance
// that runs in a user namespace (the node's --userns): its writable layer
// holds shifted ids, which the save path does not shift back.
func (s *Service) checkSavable(ctx context.Context, id string) error {
	st, err := s.rt.Status(ctx, id)
	if err != nil {
		return err
	}
	if st.Labels[runtime.LabelUserNS] != "" {
		return fmt.Errorf("instance %q runs in a user namespace (node setting --userns): saving it is not supported, "+
			"its writable layer holds shifted ids; use volumes for data to keep, or a node without --userns: %w", id, errdefs.ErrFailedPrecondition)
	}
	return nil
}
