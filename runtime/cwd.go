package runtime

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"

	"github.com/envd-dev/envd/api/types"
)

// withCheckedCwd refuses a container spec whose process would start in a
// directory types.CheckCwd refuses: the image's WorkingDir is the image author's
// choice, hence the tenant's.
func withCheckedCwd(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	if s.Process == nil {
		return nil
	}
	if err := types.CheckCwd(s.Process.Cwd); err != nil {
		return fmt.Errorf("image working directory: %w", err)
	}
	return nil
}
