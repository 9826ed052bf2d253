package envd

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/changes"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// MaxChangesLimit bounds how many entries of each kind a changes answer
// lists.
const MaxChangesLimit = 10000

// VersionChanges tells what changed from version against (0: n's parent)
// to version n of project: packages, then files, at most limit of each
// kind (0: changes.DefaultLimit). Results are cached by the two images.
func (s *Service) VersionChanges(ctx context.Context, p types.Principal, project string, n, against, limit int) (types.Changes, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Changes{}, err
	}
	if n <= 0 || against < 0 {
		return types.Changes{}, fmt.Errorf("versions %d against %d: must be positive version numbers: %w", n, against, errdefs.ErrInvalidArgument)
	}
	if limit < 0 || limit > MaxChangesLimit {
		return types.Changes{}, fmt.Errorf("limit %d: must be between 1 and %d: %w", limit, MaxChangesLimit, errdefs.ErrInvalidArgument)
	}
	if limit == 0 {
		limit = changes.DefaultLimit
	}
	after, err := s.store.Versions.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return types.Changes{}, err
	}
	if against == 0 {
		if after.Parent == 0 {
			return types.Changes{}, fmt.Errorf("version %d of %q has no parent: name the version to compare it with (against): %w", n, project, errdefs.ErrInvalidArgument)
		}
		against = after.Parent
	}
	before, err := s.store.Versions.GetVersion(ctx, p.Tenant, project, against)
	if err != nil {
		return types.Changes{}, err
	}
	imgs := [2]versions.Version{before, after}
	var refs [2]string
	for i, v := range imgs {
		if v.State != versions.StateReady || v.Image == "" {
			return types.Changes{}, errdefs.WithDetails(fmt.Errorf("version %d of %q is %s: %w", v.Number, project, v.State, errdefs.ErrFailedPrecondition),
				map[string]any{"state": v.State})
		}
		refs[i] = v.Image
	}
	out, ok := s.diffs.Get(refs[0], refs[1], limit)
	if !ok {
		b, err := s.reg.Get(ctx, refs[0])
		if err != nil {
			return types.Changes{}, err
		}
		a, err := s.reg.Get(ctx, refs[1])
		if err != nil {
			return types.Changes{}, err
		}
		if out, err = changes.Compute(ctx, s.reg, b, a, limit); err != nil {
			return types.Changes{}, fmt.Errorf("changes of version %d of %q against %d: %w", n, project, against, err)
		}
		s.diffs.Put(refs[0], refs[1], limit, out)
	}
	out.Project, out.Version, out.Against = project, n, against
	return out, nil
}

// pendingDigest names the layer a save would add in the image Compute
// compares with: the instance's upper dir, read as the save reads it.
const pendingDigest = "pending:upper-dir"

// pendingLayers serves an instance's upper dir as the layer pendingDigest
// and every other layer from the registry.
type pendingLayers struct {
	reg  changes.Layers
	open func(ctx context.Context) (io.ReadCloser, error)
}

func (l pendingLayers) OpenLayer(ctx context.Context, img registry.Image, i int) (io.ReadCloser, error) {
	if i >= 0 && i < len(img.Layers) && img.Layers[i].Digest == pendingDigest {
		return l.open(ctx)
	}
	return l.reg.OpenLayer(ctx, img, i)
}

// InstanceChanges tells what a save of instance id would capture now,
// against the version its layer sits on, with the paths a save leaves out
// and why. The instance's writable layer must be on this node (Running,
// Paused, or stopped and retained but not hibernated). It is read without
// freezing the instance, so a running one may change meanwhile.
func (s *Service) InstanceChanges(ctx context.Context, p types.Principal, id string, limit int) (types.Changes, error) {
	if limit < 0 || limit > MaxChangesLimit {
		return types.Changes{}, fmt.Errorf("limit %d: must be between 1 and %d: %w", limit, MaxChangesLimit, errdefs.ErrInvalidArgument)
	}
	if limit == 0 {
		limit = changes.DefaultLimit
	}
	in, err := s.store.Instances.GetInstance(ctx, p.Tenant, id)
	if err != nil {
		return types.Changes{}, err
	}
	layerHere := in.State == types.StateRunning || in.State == types.StatePaused ||
		(in.State == types.StateStopped && in.Retain && in.HibernatedVersion == 0)
	if !layerHere {
		return types.Changes{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s: only a running, paused or stopped retained instance has a writable layer to look at: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	if in.Node != s.cfg.Node {
		return types.Changes{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, s.cfg.Node, errdefs.ErrFailedPrecondition)
	}
	pending, err := s.saver.Pending(ctx, in)
	if err != nil {
		return types.Changes{}, err
	}
	base, err := s.reg.Get(ctx, pending.Base.Image)
	if err != nil {
		return types.Changes{}, fmt.Errorf("image of version %d: %w", pending.Base.Number, err)
	}
	after := base
	after.Layers = append(slices.Clone(base.Layers), registry.LayerInfo{Digest: pendingDigest})
	out, err := changes.Compute(ctx, pendingLayers{reg: s.reg, open: pending.Open}, base, after, limit)
	if err != nil {
		return types.Changes{}, fmt.Errorf("changes of instance %q: %w", id, err)
	}
	out.Project, out.Instance, out.Against, out.Excluded = in.Project, id, pending.Base.Number, pending.Excluded
	return out, nil
}
