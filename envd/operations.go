package envd

import (
	"context"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/gc"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/save"
)

// Start settles what a previous process left (scratch files, frozen
// instances, containers no row owns, rows whose container vanished,
// unfinished operations) and starts the background loops: the TTL reaper
// and the periodic reconciler.
func (s *Service) Start(ctx context.Context) error {
	s.removeScratch()
	if err := s.saver.ThawInterrupted(ctx); err != nil {
		return err
	}
	if s.cfg.Volumes != nil { // volumes a checkpoint left frozen
		if err := s.cfg.Volumes.ThawAll(ctx); err != nil {
			return err
		}
	}
	if err := s.life.Reconcile(ctx); err != nil {
		return err
	}
	// Saves and GCs are safe to run twice; the others are settled: a
	// restore's client may have given up, a build's install is not resumed.
	if err := s.ops.Resume(ctx, map[types.OpKind]ops.Resumer{
		types.OpKindSave:    ops.Rerun(s.ops, func(ctx context.Context, op *ops.Op, job save.Job) (any, error) { return s.saver.Run(ctx, op, job) }),
		types.OpKindGC:      ops.Rerun(s.ops, func(ctx context.Context, op *ops.Op, job gc.Job) (any, error) { return s.gc.Run(ctx, op, job) }),
		types.OpKindRestore: s.life.SettleRestore,
		types.OpKindBuild:   s.builds.SettleBuild,
		types.OpKindMigrate: s.builds.SettleMigrate,
		types.OpKindFork:    s.forks.Settle,
		types.OpKindRollout: ops.Rerun(s.ops, s.rollouts.Run),
		// A rollback settles each project by its intent and current.
		types.OpKindRollback: ops.Rerun(s.ops, s.rollouts.RunRollback),

		types.OpKindCheckpoint: s.checkpoints.Settle,
	}); err != nil {
		return err
	}
	s.life.Run()
	s.runSquash()
	s.hooksRun()
	return nil
}

// Reconcile makes the runtime and the instance rows of this node agree
// (see lifecycle.Manager.Reconcile).
func (s *Service) Reconcile(ctx context.Context) error { return s.life.Reconcile(ctx) }

// Save starts a save of the instance's changes as a new version
// (save.Saver.Save).
func (s *Service) Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, idempotencyKey string) (types.Operation, error) {
	return s.saves.Save(ctx, p, id, req, idempotencyKey)
}

// Build starts a build operation (builder.Builder.Build).
func (s *Service) Build(ctx context.Context, p types.Principal, project string, req types.BuildRequest, idempotencyKey string) (types.Operation, error) {
	return s.builds.Build(ctx, p, project, req, idempotencyKey)
}

// Migrate starts a migration onto a new base (builder.Builder.Migrate).
func (s *Service) Migrate(ctx context.Context, p types.Principal, project string, req types.MigrateRequest, idempotencyKey string) (types.Operation, error) {
	return s.builds.Migrate(ctx, p, project, req, idempotencyKey)
}

// GC starts a GC operation, admin only (gc.Collector.Start).
func (s *Service) GC(ctx context.Context, p types.Principal, req types.GCRequest, idempotencyKey string) (types.Operation, error) {
	return s.gc.Start(ctx, p, req, idempotencyKey)
}

// Labels envd puts on containers, so the reconciler can tell its own.
const (
	LabelGeneration = lifecycle.LabelGeneration
	LabelProject    = lifecycle.LabelProject
	LabelTenant     = lifecycle.LabelTenant
	LabelNode       = lifecycle.LabelNode
	LabelBuild      = lifecycle.LabelBuild
)

// ReasonHibernated is the reason of a stopped instance whose layer was
// saved as a version and freed.
const ReasonHibernated = lifecycle.ReasonHibernated
