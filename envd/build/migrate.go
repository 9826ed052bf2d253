package build

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
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
}

// maxConflicts bounds the conflicts a result lists.
const maxConflicts = 200

// Migrate starts an operation of kind "migrate": the project's current
// version is rebased onto a new base image (its own layers, those above the
// base it sits on, are put on the new base's), the paths both the base
// update and those layers changed are reported, the validation commands
// run in a trial instance, and with Switch the result becomes current. The
// migrated version stays for rollback.
func (b *Builder) Migrate(ctx context.Context, p types.Principal, project string, req types.MigrateRequest, idempotencyKey string) (types.Operation, error) {
	if err := names.Validate("project", project); err != nil {
		return types.Operation{}, err
	}
	if err := checkCommands(req.Validate); err != nil {
		return types.Operation{}, err
	}
	newBase, err := b.d.Bases.ResolveBase(ctx, p.Tenant, req.Base)
	if err != nil {
		return types.Operation{}, err
	}
	proj, err := b.d.Store.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return types.Operation{}, err
	}
	job := migrateJob{Project: project, Request: req, From: proj.Current, NewBase: newBase.Ref(), Trial: names.NewID(project)}
	return b.d.Ops.Start(ctx, p, ops.Spec{Kind: types.OpKindMigrate, Target: project, Scope: project, IdempotencyKey: idempotencyKey,
		Asked: req, Job: job, Run: func(ctx context.Context, op *ops.Op) (any, error) { return b.RunMigrate(ctx, op, p, job) }})
}

// RunMigrate does a migration.
func (b *Builder) RunMigrate(ctx context.Context, op *ops.Op, p types.Principal, job migrateJob) (types.MigrateResult, error) {
	res := types.MigrateResult{Project: job.Project, From: job.From, NewBase: job.NewBase, Conflicts: []string{}}
	from, err := b.d.Store.GetVersion(ctx, p.Tenant, job.Project, job.From)
	if err != nil {
		return res, err
	}
	src, err := b.d.Reg.Get(ctx, from.Image)
	if err != nil {
		return res, err
	}
	newBase, err := b.d.Reg.Get(ctx, job.NewBase)
	if err != nil {
		return res, err
	}
	oldBase, err := b.baseOf(ctx, src)
	if err != nil {
		return res, fmt.Errorf("version %d: %w", from.Number, err)
	}
	res.OldBase = oldBase.Ref()
	if oldBase.Digest == newBase.Digest {
		return res, fmt.Errorf("version %d already sits on %s: %w", from.Number, newBase.Ref(), errdefs.ErrFailedPrecondition)
	}
	conflicts, err := b.rebaseConflicts(ctx, src, oldBase, newBase)
	if err != nil {
		return res, err
	}
	res.DatabaseConflict = slices.ContainsFunc(conflicts, func(c string) bool { return slices.Contains(builder.DatabasePaths, c) })
	res.Conflicts = conflicts[:min(len(conflicts), maxConflicts)]
	op.Event(ctx, "conflicts", fmt.Sprintf("%d paths changed by both the base update and the project", len(conflicts)),
		map[string]any{"conflicts": res.Conflicts})

	volumeBytes, err := b.d.Quota.Save(ctx, p.Tenant, job.Project, 0)
	if err != nil {
		return res, err
	}
	var img registry.Image
	up, err := b.d.Content.Upload(ctx, func() (err error) {
		img, err = b.d.Reg.Rebase(ctx, src, len(oldBase.Layers), newBase, names.ProjectRepo(p.Tenant, job.Project), map[string]string{
			"org.envd.project": job.Project, "org.envd.migrated-version": fmt.Sprint(from.Number),
		})
		return err
	})
	if err != nil {
		return res, fmt.Errorf("rebase version %d: %w", from.Number, err)
	}
	v, _, err := up.CommitVersion(ctx, versions.Commit{
		Tenant: p.Tenant, Project: job.Project, NoSwitch: true, Kind: "migration", Image: img.Ref(), Parent: from.Number,
		Quota:     versions.QuotaEnforced,
		SizeBytes: img.Size, Layers: len(img.Layers), Validated: len(job.Request.Validate) == 0, OtherStoredBytes: volumeBytes,
		Message: fmt.Sprintf("version %d moved from %s onto %s; %d conflicts", from.Number, oldBase.Ref(), newBase.Ref(), len(conflicts)),
	})
	up.End()
	if err != nil {
		b.d.Content.Drop(ctx, img)
		return res, err
	}
	res.Version = v.Number
	op.Event(ctx, "rebased", fmt.Sprintf("version %d is version %d on the new base", v.Number, from.Number), nil)
	if res.Validated, err = b.validateIn(ctx, op, p, job.Project, job.Trial, job.Request.Validate, v); err != nil {
		return res, err
	}
	if !job.Request.Switch {
		return res, nil
	}
	_, err = b.d.Store.SetCurrent(ctx, p.Tenant, job.Project, v.Number, job.From)
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

// baseOf finds the imported base image that img sits on: the one whose
// layers are the longest prefix of img's.
func (b *Builder) baseOf(ctx context.Context, img registry.Image) (registry.Image, error) {
	imgs, err := b.d.Store.ListImages(ctx)
	if err != nil {
		return registry.Image{}, err
	}
	var best registry.Image
	for _, rec := range imgs {
		b, err := b.d.Reg.Get(ctx, rec.Repo+"@"+rec.Digest)
		if err != nil {
			continue
		}
		if len(b.Layers) > len(best.Layers) && len(b.Layers) <= len(img.Layers) &&
			slices.EqualFunc(b.Layers, img.Layers[:len(b.Layers)], func(x, y registry.LayerInfo) bool { return x.Digest == y.Digest }) {
			best = b
		}
	}
	if len(best.Layers) == 0 {
		return registry.Image{}, fmt.Errorf("it sits on no imported base image: %w", errdefs.ErrFailedPrecondition)
	}
	return best, nil
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
	var changes builder.Changed
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
	return builder.Conflicts(oldTree, newTree, changes), nil
}

// tree flattens an image's layers.
func (b *Builder) tree(ctx context.Context, img registry.Image) (builder.Tree, error) {
	t := builder.Tree{}
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
	}
	b.d.Ops.Settle(ctx, op, fmt.Errorf("envd restarted during the migration; ask again: %w", errdefs.ErrFailedPrecondition))
}
