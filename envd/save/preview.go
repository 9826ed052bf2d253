package save

import (
	"context"
	"fmt"
	"io"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/snapshotter"
	"github.com/envd-dev/envd/versions"
)

// Exclusions are the paths a save of an instance of proj leaves out, each
// with the reason a user is told: the runtime's mount points, the files
// the node writes at each start, the project's volumes and its excludes.
func Exclusions(proj versions.Project) ([]types.ExcludedPath, error) {
	var out []types.ExcludedPath
	for _, p := range snapshotter.DefaultExcludes {
		reason := "runtime mount point"
		if p == "/tmp" {
			reason = "temporary files (never saved)"
		}
		out = append(out, types.ExcludedPath{Path: p, Reason: reason})
	}
	for _, p := range injectedFiles {
		out = append(out, types.ExcludedPath{Path: p, Reason: "written by the node at each start"})
	}
	ps, err := spec.Parse(proj.Spec)
	if err != nil {
		return nil, err
	}
	for _, v := range ps.Volumes {
		// Volumes are never part of a snapshot: their data stays in the volume.
		out = append(out, types.ExcludedPath{Path: v.Path, Reason: fmt.Sprintf("volume %s (kept by the volume, not the snapshot)", v.Name)})
	}
	for _, p := range proj.Excludes {
		out = append(out, types.ExcludedPath{Path: p, Reason: "the project's exclude"})
	}
	return out, nil
}

// Pending is what a save of an instance would capture now.
type Pending struct {
	// Base is the version the instance's layer sits on: a save makes its
	// image plus one layer of what Open returns.
	Base versions.Version
	// Open returns a new read of the instance's upper dir as the layer tar
	// a save would write (excluded paths left out), without freezing it:
	// a running instance may change between two reads.
	Open     func(ctx context.Context) (io.ReadCloser, error)
	Excluded []types.ExcludedPath
}

// Pending tells what a save of instance in would capture now. The instance
// must have its writable layer on this node (Running, Paused or a stopped
// retained one).
func (s *Saver) Pending(ctx context.Context, in versions.Instance) (Pending, error) {
	var p Pending
	proj, err := s.Store.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return p, err
	}
	layerVersion := in.Version
	if in.LayerVersion > 0 {
		layerVersion = in.LayerVersion
	}
	if p.Base, err = s.Store.GetVersion(ctx, in.Tenant, in.Project, layerVersion); err != nil {
		return p, err
	}
	mounts, err := s.Runtime.Mounts(ctx, in.ID)
	if err != nil {
		return p, fmt.Errorf("rootfs of %q: %w", in.ID, err)
	}
	upper, err := snapshotter.UpperDir(mounts)
	if err != nil {
		return p, fmt.Errorf("rootfs of %q: %w", in.ID, err)
	}
	if p.Excluded, err = Exclusions(proj); err != nil {
		return p, err
	}
	opts := snapshotter.SpoolOptions{}
	for _, e := range p.Excluded {
		opts.Excludes = append(opts.Excludes, e.Path)
	}
	if opts.IDShift, err = s.idShift(ctx, in.ID); err != nil {
		return p, err
	}
	p.Open = func(ctx context.Context) (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() {
			_, err := snapshotter.Spool(ctx, upper, pw, opts)
			pw.CloseWithError(err)
		}()
		return pr, nil
	}
	return p, nil
}
