package envd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder"
	"github.com/envd-dev/envd/envd/changes"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// VersionSpec answers a build spec that makes version n of project again:
// the declared spec of a build, else one derived from what n changed
// against the base image it sits on (builder.Derive).
func (s *Service) VersionSpec(ctx context.Context, p types.Principal, project string, n int) (types.VersionSpec, error) {
	if err := ValidateName("project", project); err != nil {
		return types.VersionSpec{}, err
	}
	v, err := s.store.Versions.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return types.VersionSpec{}, err
	}
	if v.State != versions.StateReady || v.Image == "" {
		return types.VersionSpec{}, errdefs.WithDetails(fmt.Errorf("version %d of %q is %s: %w", n, project, v.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": v.State})
	}
	out := types.VersionSpec{Project: project, Version: n, Kind: v.Kind, Omitted: []types.SpecOmit{}}
	base, err := s.builds.BaseOf(ctx, v.Image)
	if err != nil {
		return out, fmt.Errorf("version %d of %q: %w", n, project, err)
	}
	out.Base = base.Ref()
	vs, err := s.store.Versions.ListVersions(ctx, p.Tenant, project)
	if err != nil {
		return out, err
	}
	for _, bv := range vs {
		if bv.Kind == versions.KindBase && bv.State == versions.StateReady && bv.Image == base.Ref() {
			out.BaseVersion = bv.Number
			break
		}
	}
	raw, err := s.store.Versions.VersionSpec(ctx, p.Tenant, project, n)
	switch {
	case err == nil:
		if err := json.Unmarshal(raw, &out.Spec); err != nil {
			return out, fmt.Errorf("declared spec of version %d of %q: %w", n, project, err)
		}
		out.Declared = true
		return out, nil
	case !errors.Is(err, errdefs.ErrNotFound):
		return out, err
	}
	if d, ok := s.specs.get(base.Ref(), v.Image); ok {
		out.Spec, out.Omitted = d.spec, append(out.Omitted, d.omitted...)
		return s.withFrom(out), nil
	}
	img, err := s.reg.Get(ctx, v.Image)
	if err != nil {
		return out, err
	}
	before, err := s.configTree(ctx, base, 0, nil)
	if err != nil {
		return out, err
	}
	after, err := s.configTree(ctx, img, len(base.Layers), before)
	if err != nil {
		return out, err
	}
	out.Spec, out.Omitted = builder.Derive(builder.PackageChanges(before, after, changes.ComparePackageDatabases), before, after)
	s.specs.put(base.Ref(), v.Image, derived{out.Spec, out.Omitted})
	return s.withFrom(out), nil
}

// withFrom names the version a derived spec builds on.
func (s *Service) withFrom(out types.VersionSpec) types.VersionSpec {
	if out.BaseVersion != 1 {
		out.Spec.From = out.BaseVersion
	}
	if out.BaseVersion == 0 {
		out.Omitted = append(out.Omitted, types.SpecOmit{Path: "/", Reason: "the project has no version of kind base with image " + out.Base + ": the spec names no version to build on (from)"})
	}
	return out
}

// derived is a spec derived from an image's changes over its base.
type derived struct {
	spec    types.BuildRequest
	omitted []types.SpecOmit
}

// specCache keeps derived specs by the two images (content-addressed, so
// never stale); past maxSpecs entries it starts again empty.
type specCache struct {
	mu sync.Mutex
	m  map[[2]string]derived
}

const maxSpecs = 256

func (c *specCache) get(base, image string) (derived, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.m[[2]string{base, image}]
	return d, ok
}

func (c *specCache) put(base, image string, d derived) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxSpecs {
		c.m = map[[2]string]derived{}
	}
	c.m[[2]string{base, image}] = d
}

// configTree flattens img's configuration trees from layer start on,
// over from (the tree of the layers below start; nil: none).
func (s *Service) configTree(ctx context.Context, img registry.Image, start int, from builder.ConfigTree) (builder.ConfigTree, error) {
	t := builder.ConfigTree{}
	if from != nil {
		t = from.Clone()
	}
	for i := start; i < len(img.Layers); i++ {
		rc, err := s.reg.OpenLayer(ctx, img, i)
		if err != nil {
			return nil, err
		}
		err = t.Apply(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("layer %d of %s: %w", i, img.Ref(), err)
		}
	}
	return t, nil
}

// OperationLogs writes the log of operation id to w: the log kept in
// object storage once the operation ended, else (it still runs, or the
// node keeps no objects) the output lines of its events.
func (s *Service) OperationLogs(ctx context.Context, p types.Principal, id string, w io.Writer) error {
	op, err := s.ops.GetOperation(ctx, p, id)
	if err != nil {
		return err
	}
	if s.cfg.Objects != nil {
		rc, err := s.cfg.Objects.Get(ctx, builder.LogKey(p.Tenant, op.ID))
		if err == nil {
			defer rc.Close()
			_, err = io.Copy(w, rc)
			return err
		}
		if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	var buf bytes.Buffer
	lines, after := 0, 0
	for {
		evs, err := s.ops.OperationEvents(ctx, p, id, after)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		for _, e := range evs {
			after = e.Seq
			if e.Type == builder.EventLog {
				buf.WriteString(e.Message)
				buf.WriteByte('\n')
				lines++
			}
		}
	}
	if lines == 0 && op.Done() {
		return fmt.Errorf("operation %s (%s) kept no log: only builds and rebuilding migrations write one: %w", id, op.Kind, errdefs.ErrNotFound)
	}
	_, err = io.Copy(w, strings.NewReader(buf.String()))
	return err
}

// UploadBuildContext keeps a tar as a build context of project.
func (s *Service) UploadBuildContext(ctx context.Context, p types.Principal, project string, r io.Reader) (types.BuildContext, error) {
	return s.builds.UploadContext(ctx, p, project, r)
}
