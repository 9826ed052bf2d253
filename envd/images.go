package envd

import (
	"context"
	"fmt"
	"io"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// ExportVersion writes version n of project as a tar of an OCI image
// layout to w (layers as stored: eStargz stays eStargz), for `envctl image
// import` on another installation. The ref name in its index is
// "PROJECT-N".
func (s *Service) ExportVersion(ctx context.Context, p types.Principal, project string, n int, w io.Writer) error {
	if err := ValidateName("project", project); err != nil {
		return err
	}
	v, err := s.store.Versions.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return err
	}
	if v.State != versions.StateReady || v.Image == "" {
		return errdefs.WithDetails(fmt.Errorf("version %d of %q is %s: %w", n, project, v.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": v.State})
	}
	img, err := s.reg.Get(ctx, v.Image)
	if err != nil {
		return err
	}
	return s.reg.ExportLayout(ctx, img, fmt.Sprintf("%s-%d", project, n), w)
}
