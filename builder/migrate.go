package builder

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// migrateJob is what a migrate operation does.
type migrateJob struct {
	Project string               `json:"project"`
	Request types.MigrateRequest `json:"request"`
	From    int                  `json:"from"` // the current version when asked
	NewBase string               `json:"new_base"`
	Trial   string               `json:"trial_instance"`
	Builder string               `json:"builder_instance,omitempty"` // a rebuild's build container
}

// maxConflicts bounds the conflicts a result lists.
const maxConflicts = 200

// Migrate starts an operation of kind "migrate": the project's current
// version is rebased onto a new base image (its own layers, those above the
// base it sits on, are put on the new base's), the paths both the base
// update and those layers changed are reported, the project's declared
// validation commands and the request's run in a trial instance, and with
// Switch the result becomes current. The migrated version stays for
// rollback. A current version that already sits on the new base is refused
// at once (ErrFailedPrecondition).
func (b *Builder) Migrate(ctx context.Context, p types.Principal, project string, req types.MigrateRequest, idempotencyKey string) (types.Operation, error) {
	if err := names.Validate("project", project); err != nil {
		return types.Operation{}, err
	}
	if err := checkCommands(req.Validate); err != nil {
		return types.Operation{}, err
	}
	if req.Mode != "" && req.Mode != types.MigrateRebase && req.Mode != types.MigrateRebuild {
		return types.Operation{}, fmt.Errorf("mode %q: must be %s or %s: %w", req.Mode, types.MigrateRebase, types.MigrateRebuild, errdefs.ErrInvalidArgument)
	}
	newBase, err := b.d.Bases.ResolveBase(ctx, p.Tenant, req.Base)
	if err != nil {
		return types.Operation{}, err
	}
	proj, err := b.d.Store.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return types.Operation{}, err
	}
	if cur, err := b.d.Store.GetVersion(ctx, p.Tenant, project, proj.Current); err == nil {
		if old, err := b.BaseOf(ctx, cur.Image); err == nil && old.Digest == newBase.Digest {
			return types.Operation{}, fmt.Errorf("project %q: current version %d already sits on %s: %w",
				project, cur.Number, req.Base, errdefs.ErrFailedPrecondition)
		}
	}
	if req.Mode == types.MigrateRebuild {
		spec, err := b.declaredSpec(ctx, p.Tenant, project, proj.Current)
		if err != nil {
			return types.Operation{}, err
		}
		if df := spec.Dockerfile; df != nil {
			if _, err := ReplaceFinalBase(df.Content, df.Args, df.Target, req.Base); err != nil {
				return types.Operation{}, fmt.Errorf("version %d of project %q: %w", proj.Current, project, err)
			}
		}
	}
	job := migrateJob{Project: project, Request: req, From: proj.Current, NewBase: newBase.Ref(), Trial: names.NewID(project)}
	if req.Mode == types.MigrateRebuild {
		job.Builder = names.NewID(project)
	}
	return b.d.Ops.Start(ctx, p, ops.Spec{Kind: types.OpKindMigrate, Target: project, Scope: project, IdempotencyKey: idempotencyKey,
		Asked: req, Job: job, Run: func(ctx context.Context, op *ops.Op) (any, error) {
			res, err := b.RunMigrate(ctx, op, p, job)
			if err != nil && (res.Version != 0 || len(res.Conflicts) > 0) {
				// The client sees the failed version and the conflicts.
				return nil, ops.FailWithResult(res, err)
			}
			return res, err
		}})
}

// RunMigrate does a migration.
func (b *Builder) RunMigrate(ctx context.Context, op *ops.Op, p types.Principal, job migrateJob) (types.MigrateResult, error) {
	return b.MigrateProject(ctx, op, MigrateSpec{
		Tenant: p.Tenant, Project: job.Project, From: job.From, NewBase: job.NewBase, Trial: job.Trial,
		Validate: job.Request.Validate, Switch: job.Request.Switch, Mode: job.Request.Mode, Builder: job.Builder,
		BaseName: job.Request.Base,
	})
}

// MigrateSpec is one project's migration as MigrateProject does it.
type MigrateSpec struct {
	Tenant, Project string
	// From is the version migrated, the project's current when asked: the
	// switch is a compare-and-swap from it.
	From int
	// NewBase is the new base image, repo@digest.
	NewBase string
	// Trial is the id of the trial instance validation runs in.
	Trial string
	// Validate are commands run after the project's declared ones.
	Validate [][]string
	// Switch makes the validated version current (CAS from From).
	Switch bool
	// ConflictsOnly computes the conflicts and makes nothing (a dry run).
	ConflictsOnly bool
	// StopOnConflicts makes nothing when there are conflicts.
	StopOnConflicts bool
	// Mode is types.MigrateRebase ("" too) or types.MigrateRebuild; a
	// rebuild runs in build container Builder.
	Mode    string
	Builder string
	// BaseName is the new base as the request named it: a rebuild of a
	// Dockerfile version writes it in the final stage's FROM.
	BaseName string
}

// MigrateProject migrates one project, reporting to ev: the conflicts are
// computed; unless ConflictsOnly (or StopOnConflicts and there are some)
// the version is rebased and recorded (not current), validated (a failure
// marks it failed and is an error whose details carry the command's
// output), and with Switch made current by compare-and-swap (a lost swap
// sets the result's Conflict). The result is filled as far as it got, also
// on error.
func (b *Builder) MigrateProject(ctx context.Context, ev Events, s MigrateSpec) (types.MigrateResult, error) {
	res := types.MigrateResult{Project: s.Project, From: s.From, NewBase: s.NewBase, Conflicts: []string{}}
	proj, err := b.d.Store.GetProject(ctx, s.Tenant, s.Project)
	if err != nil {
		return res, err
	}
	from, err := b.d.Store.GetVersion(ctx, s.Tenant, s.Project, s.From)
	if err != nil {
		return res, err
	}
	src, err := b.d.Reg.Get(ctx, from.Image)
	if err != nil {
		return res, err
	}
	newBase, err := b.d.Reg.Get(ctx, s.NewBase)
	if err != nil {
		return res, err
	}
	if s.Mode == types.MigrateRebuild {
		// A Dockerfile version's layers need not start with its base's
		// (BuildKit recompresses them): it is rebuilt from its Dockerfile.
		req, err := b.declaredSpec(ctx, s.Tenant, s.Project, from.Number)
		if err != nil {
			return res, err
		}
		if req.Dockerfile != nil {
			if old, err := b.BaseOf(ctx, from.Image); err == nil {
				res.OldBase = old.Ref()
			}
			return b.rebuildDockerfile(ctx, ev, s, proj, req, newBase, res)
		}
	}
	oldBase, err := b.BaseOf(ctx, from.Image)
	if err != nil {
		return res, fmt.Errorf("version %d: %w", from.Number, err)
	}
	res.OldBase = oldBase.Ref()
	if oldBase.Digest == newBase.Digest {
		return res, fmt.Errorf("version %d already sits on %s: %w", from.Number, newBase.Ref(), errdefs.ErrFailedPrecondition)
	}
	if s.Mode == types.MigrateRebuild {
		return b.rebuild(ctx, ev, s, proj, from, newBase, res)
	}
	res.Mode = types.MigrateRebase
	conflicts, err := b.rebaseConflicts(ctx, src, oldBase, newBase)
	if err != nil {
		return res, err
	}
	res.DatabaseConflict = slices.ContainsFunc(conflicts, func(c string) bool { return slices.Contains(DatabasePaths, c) })
	res.Conflicts = append(res.Conflicts, conflicts[:min(len(conflicts), maxConflicts)]...)
	ev.Event(ctx, "conflicts", fmt.Sprintf("%s: %d paths changed by both the base update and the project", s.Project, len(conflicts)),
		map[string]any{"project": s.Project, "conflicts": res.Conflicts})
	if s.ConflictsOnly || (s.StopOnConflicts && len(conflicts) > 0) {
		return res, nil
	}

	volumeBytes, err := b.d.Quota.Save(ctx, s.Tenant, s.Project, 0)
	if err != nil {
		return res, err
	}
	commands := append(slices.Clone(proj.Validate), s.Validate...)
	var img registry.Image
	up, err := b.d.Content.Upload(ctx, func() (err error) {
		img, err = b.d.Reg.Rebase(ctx, src, len(oldBase.Layers), newBase, names.ProjectRepo(s.Tenant, s.Project), map[string]string{
			"org.envd.project": s.Project, "org.envd.migrated-version": fmt.Sprint(from.Number),
		})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("rebase version %d: %w", from.Number, err)
	}
	v, _, err := up.CommitVersion(ctx, versions.Commit{
		Tenant: s.Tenant, Project: s.Project, NoSwitch: true, Kind: "migration", Image: img.Ref(), Parent: from.Number,
		Quota:     versions.QuotaEnforced,
		SizeBytes: img.Size, Layers: len(img.Layers), Validated: len(commands) == 0, OtherStoredBytes: volumeBytes,
		Message: fmt.Sprintf("version %d moved from %s onto %s; %d conflicts", from.Number, oldBase.Ref(), newBase.Ref(), len(conflicts)),
	})
	up.End()
	if err != nil {
		b.d.Content.Drop(ctx, img)
		return res, err
	}
	res.Version = v.Number
	ev.Event(ctx, "rebased", fmt.Sprintf("%s: version %d is version %d on the new base", s.Project, v.Number, from.Number),
		map[string]any{"project": s.Project, "version": v.Number})
	p := types.Principal{Tenant: s.Tenant}
	if res.Validated, err = b.validateIn(ctx, ev, nil, p, s.Project, s.Trial, commands, v); err != nil {
		return res, err
	}
	if !s.Switch {
		return res, nil
	}
	_, err = b.d.Store.SetCurrent(ctx, s.Tenant, s.Project, v.Number, s.From)
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

// BaseOf finds the imported base image that image (repo@digest) sits on:
// the one whose layers are the longest prefix of its layers.
func (b *Builder) BaseOf(ctx context.Context, image string) (registry.Image, error) {
	img, err := b.d.Reg.Get(ctx, image)
	if err != nil {
		return registry.Image{}, err
	}
	bases, err := b.Bases(ctx)
	if err != nil {
		return registry.Image{}, err
	}
	base, ok := PickBase(bases, img)
	if !ok {
		return registry.Image{}, fmt.Errorf("it sits on no imported base image: %w", errdefs.ErrFailedPrecondition)
	}
	return base.Image, nil
}

// Base is an imported base image with its name.
type Base struct {
	Name string
	registry.Image
}

// Bases returns the imported base images (those the registry still has).
func (b *Builder) Bases(ctx context.Context) ([]Base, error) {
	imgs, err := b.d.Store.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Base, 0, len(imgs))
	for _, rec := range imgs {
		img, err := b.d.Reg.Get(ctx, rec.Repo+"@"+rec.Digest)
		if err != nil {
			continue
		}
		out = append(out, Base{Name: rec.Name, Image: img})
	}
	return out, nil
}

// PickBase returns the base of bases whose layers are the longest prefix
// of img's layers.
func PickBase(bases []Base, img registry.Image) (Base, bool) {
	var best Base
	for _, b := range bases {
		if len(b.Layers) > len(best.Layers) && len(b.Layers) <= len(img.Layers) &&
			slices.EqualFunc(b.Layers, img.Layers[:len(b.Layers)], func(x, y registry.LayerInfo) bool { return x.Digest == y.Digest }) {
			best = b
		}
	}
	return best, len(best.Layers) > 0
}

// rebaseConflicts returns the paths that differ between the old and the new
// base and that img's own layers (above the old base) also change.
func (b *Builder) rebaseConflicts(ctx context.Context, img, oldBase, newBase registry.Image) ([]string, error) {
	oldTree, err := b.tree(ctx, oldBase)
	if err != nil {
		return nil, err
	}
	newTree, err := b.tree(ctx, newBase)
	if err != nil {
		return nil, err
	}
	var changes Changed
	for i := len(oldBase.Layers); i < len(img.Layers); i++ {
		rc, err := b.d.Reg.OpenLayer(ctx, img, i)
		if err != nil {
			return nil, err
		}
		err = changes.Changes(rc)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("layer %d of %s: %w", i, img.Ref(), err)
		}
	}
	return Conflicts(oldTree, newTree, changes), nil
}

// tree flattens an image's layers.
func (b *Builder) tree(ctx context.Context, img registry.Image) (Tree, error) {
	t := Tree{}
	for i := range img.Layers {
		rc, err := b.d.Reg.OpenLayer(ctx, img, i)
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

// SettleMigrate ends a migration a previous envd left unfinished: its trial
// instance is removed and the operation settled; the project is as it was
// (a rebased version already recorded stays, not current).
func (b *Builder) SettleMigrate(ctx context.Context, op versions.Operation) {
	var job migrateJob
	if err := json.Unmarshal(op.Request, &job); err == nil {
		b.d.Instances.RemoveIsolated(job.Trial)
		if job.Builder != "" {
			b.d.Instances.RemoveIsolated(job.Builder)
		}
	}
	b.d.Ops.Settle(ctx, op, fmt.Errorf("envd restarted during the migration; ask again: %w", errdefs.ErrFailedPrecondition))
}
