package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// declaredSpec is the spec version n of project was built from, if it can
// be built again on another base: a Dockerfile build (devcontainer.json
// builds are Dockerfile builds), or a build of envd's spec made on a
// version of kind base. Anything else is ErrFailedPrecondition saying why.
func (b *Builder) declaredSpec(ctx context.Context, tenant, project string, n int) (types.BuildRequest, error) {
	var req types.BuildRequest
	raw, err := b.d.Store.VersionSpec(ctx, tenant, project, n)
	if errors.Is(err, errdefs.ErrNotFound) {
		return req, fmt.Errorf("version %d of project %q keeps no declared spec (only a build made since specs are kept does): migrate it with mode rebase, or build its exported spec (envctl spec export): %w",
			n, project, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return req, err
	}
	if err := json.Unmarshal(raw, &req); err != nil {
		return req, fmt.Errorf("declared spec of version %d of project %q: %w", n, project, err)
	}
	if req.Dockerfile != nil {
		// Whatever version was current when it was built, a Dockerfile
		// describes the whole image: its final stage's base is replaced.
		return req, nil
	}
	v, err := b.d.Store.GetVersion(ctx, tenant, project, n)
	if err != nil {
		return req, err
	}
	parent, err := b.d.Store.GetVersion(ctx, tenant, project, v.Parent)
	if err != nil {
		return req, fmt.Errorf("version %d of project %q was built on version %d: %w", n, project, v.Parent, err)
	}
	if parent.Kind != versions.KindBase {
		return req, fmt.Errorf("version %d of project %q was built on version %d, of kind %s: a rebuild on a new base would lose that version's changes; migrate with mode rebase: %w",
			n, project, parent.Number, parent.Kind, errdefs.ErrFailedPrecondition)
	}
	return req, nil
}

// rebuild is a migration in mode rebuild: the declared spec of version
// s.From is built again on a version of the new base (recorded as a
// version of kind base of the project unless it has one), validated with
// the project's, the spec's and the migration's commands, and with Switch
// made current by compare-and-swap from s.From.
func (b *Builder) rebuild(ctx context.Context, ev Events, s MigrateSpec, proj versions.Project, from versions.Version, newBase registry.Image, res types.MigrateResult) (types.MigrateResult, error) {
	res.Mode = types.MigrateRebuild
	req, err := b.declaredSpec(ctx, s.Tenant, s.Project, from.Number)
	if err != nil {
		return res, err
	}
	ev.Event(ctx, "conflicts", fmt.Sprintf("%s: a rebuild installs the declared spec on the new base: no layers are rebased", s.Project),
		map[string]any{"project": s.Project, "conflicts": []string{}})
	if s.ConflictsOnly {
		return res, nil
	}
	base, err := b.baseVersion(ctx, s.Tenant, s.Project, newBase, from.Number)
	if err != nil {
		return res, err
	}
	req.From = base.Number
	p := types.Principal{Tenant: s.Tenant}
	key := SpecKey(base.Image, req)
	v, err := b.d.Store.FindBuild(ctx, s.Tenant, s.Project, key)
	switch {
	case err == nil:
		ev.Event(ctx, "cached", fmt.Sprintf("%s: version %d was built from the same base and spec", s.Project, v.Number), nil)
	case errors.Is(err, errdefs.ErrNotFound):
		opID := s.Builder
		if o, ok := ev.(*ops.Op); ok {
			opID = o.ID
		}
		blog := b.newLog(ctx, ev, s.Tenant, opID)
		defer blog.close()
		if v, err = b.buildVersion(ctx, ev, blog, p, s.Project, s.Builder, base, req, key); err != nil {
			return res, err
		}
		res.Version = v.Number
		commands := slices.Concat(proj.Validate, req.Validate, s.Validate)
		if res.Validated, err = b.validateIn(ctx, ev, blog, p, s.Project, s.Trial, commands, v); err != nil {
			return res, err
		}
	default:
		return res, err
	}
	res.Version = v.Number
	return b.rebuilt(ctx, ev, s, res, fmt.Sprintf("version %d's spec", from.Number))
}

// rebuilt ends a rebuild whose new version is res.Version, made from what:
// its event, then the switch asked for (a compare-and-swap from s.From).
func (b *Builder) rebuilt(ctx context.Context, ev Events, s MigrateSpec, res types.MigrateResult, what string) (types.MigrateResult, error) {
	ev.Event(ctx, "rebuilt", fmt.Sprintf("%s: version %d is %s built on the new base", s.Project, res.Version, what),
		map[string]any{"project": s.Project, "version": res.Version})
	if !s.Switch {
		return res, nil
	}
	_, err := b.d.Store.SetCurrent(ctx, s.Tenant, s.Project, res.Version, s.From)
	switch {
	case err == nil:
		res.Current = true
	case errors.Is(err, errdefs.ErrConflict):
		res.Conflict = true
	default:
		return res, err
	}
	return res, nil
}

// baseVersion is the project's ready version of kind base whose image is
// img, recorded now (not current) if it has none.
func (b *Builder) baseVersion(ctx context.Context, tenant, project string, img registry.Image, forVersion int) (versions.Version, error) {
	vs, err := b.d.Store.ListVersions(ctx, tenant, project)
	if err != nil {
		return versions.Version{}, err
	}
	for _, v := range vs {
		if v.Kind == versions.KindBase && v.State == versions.StateReady && v.Image == img.Ref() {
			return v, nil
		}
	}
	up, err := b.d.Content.Upload(ctx, func() error { return nil }) // nothing to push: the image is imported
	if err != nil {
		return versions.Version{}, err
	}
	defer up.End()
	v, _, err := up.CommitVersion(ctx, versions.Commit{
		Tenant: tenant, Project: project, NoSwitch: true, Kind: versions.KindBase, Image: img.Ref(),
		SizeBytes: img.Size, Layers: len(img.Layers), Validated: true, Quota: versions.QuotaEnforced,
		Message: fmt.Sprintf("base image %s, to rebuild version %d on", img.Ref(), forVersion),
	})
	return v, err
}

// rebuildDockerfile is a migration in mode rebuild of a version built from
// a Dockerfile (or a devcontainer.json, translated to one): the kept
// request is built again with the FROM its final stage descends from
// naming the new base (s.BaseName, resolved to s.NewBase when the
// migration was asked for), other images as they resolve now, the same
// kept build context. The result is a version of kind build whose kept
// spec is that Dockerfile, validated with the project's, the spec's and
// the migration's commands, and with Switch made current by
// compare-and-swap from s.From.
func (b *Builder) rebuildDockerfile(ctx context.Context, ev Events, s MigrateSpec, proj versions.Project, req types.BuildRequest, newBase registry.Image, res types.MigrateResult) (types.MigrateResult, error) {
	res.Mode = types.MigrateRebuild
	if s.BaseName == "" {
		return res, fmt.Errorf("a rebuild of a Dockerfile version needs the new base's name: %w", errdefs.ErrInvalidArgument)
	}
	df := *req.Dockerfile
	content, err := ReplaceFinalBase(df.Content, df.Args, df.Target, s.BaseName)
	if err != nil {
		return res, fmt.Errorf("version %d of project %q: %w", s.From, s.Project, err)
	}
	df.Content = content
	req.Dockerfile, req.Switch = &df, false
	refs, err := DockerfileImages(content, df.Args)
	if err != nil {
		return res, err
	}
	bases := map[string]string{}
	for _, name := range refs.Images {
		if baseName(name) == baseName(s.BaseName) {
			bases[baseName(name)] = newBase.Ref()
			continue
		}
		img, err := b.d.Bases.ResolveBase(ctx, s.Tenant, baseName(name))
		if err != nil {
			return res, fmt.Errorf("dockerfile of version %d: image %q: %w", s.From, name, err)
		}
		bases[baseName(name)] = img.Ref()
	}
	ev.Event(ctx, "conflicts", fmt.Sprintf("%s: a rebuild builds the Dockerfile again with its final stage FROM %s: no layers are rebased", s.Project, s.BaseName),
		map[string]any{"project": s.Project, "conflicts": []string{}})
	if s.ConflictsOnly {
		return res, nil
	}
	opID := s.Builder
	if o, ok := ev.(*ops.Op); ok {
		opID = o.ID
	}
	blog := b.newLog(ctx, ev, s.Tenant, opID)
	defer blog.close()
	job := buildJob{Project: s.Project, Request: req, Expected: s.From, Trial: s.Trial, Key: DockerfileKey(req, bases), Bases: bases}
	v, _, validated, err := b.dockerfileVersion(ctx, ev, blog, types.Principal{Tenant: s.Tenant}, job, slices.Concat(proj.Validate, s.Validate))
	res.Version, res.Validated = v.Number, validated
	if err != nil {
		return res, err
	}
	return b.rebuilt(ctx, ev, s, res, fmt.Sprintf("version %d's Dockerfile", s.From))
}
