// Package save is the save path of DESIGN.md: an instance's root
// filesystem changes captured as a layer (spooled, frozen only for a
// second pass, encoded), checked against the quota, pushed on top of the
// version the rootfs sits on, and committed as a new version that becomes
// current only if current is still what the save expected. Saves run as
// operations; builds and hibernations capture through the same steps
// (Capture, Commit). It needs of the runtime only Mounts, Pause, Resume
// and Status (Runtime), of the registry Get and Append (Registry), the
// store's instance, project and version reads (Store), the upload lease
// (Content) and the early quota check (Quota).
package save

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/containerd/containerd/v2/core/mount"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/freeze"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Runtime is what a save needs of the container runtime: the rootfs
// mounts to find the upper dir, the freezer, and the task's status (is it
// frozen, its user namespace).
type Runtime interface {
	Mounts(ctx context.Context, id string) ([]mount.Mount, error)
	Pause(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) error
	Status(ctx context.Context, id string) (runtime.Status, error)
}

// Store is what a save reads of the store.
type Store interface {
	GetInstance(ctx context.Context, tenant, id string) (versions.Instance, error)
	ListNodeInstances(ctx context.Context, node string) ([]versions.Instance, error)
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	GetVersion(ctx context.Context, tenant, project string, n int) (versions.Version, error)
	UnfinishedOperationOn(ctx context.Context, target string, kinds []types.OpKind) (versions.Operation, error)
}

// Registry is what a save needs of the registry.
type Registry interface {
	Get(ctx context.Context, ref string) (registry.Image, error)
	Append(ctx context.Context, parent registry.Image, layer registry.LayerFile, targetRepo, tag string, annotations map[string]string) (registry.Image, error)
}

// Content is the upload lease a push runs under and the drop of a pushed
// manifest whose commit failed (gc.Content).
type Content interface {
	Upload(ctx context.Context, push func() error) (*versions.Upload, error)
	Drop(ctx context.Context, img registry.Image)
}

// Quota is the early quota check of a new version (quota.Checker.Save).
type Quota interface {
	Save(ctx context.Context, tenant, project string, layerBytes int64) (volumeBytes int64, err error)
}

// Operations starts operations.
type Operations interface {
	Start(ctx context.Context, p types.Principal, spec ops.Spec) (types.Operation, error)
}

// Events receives a capture's progress: an operation's log (*ops.Op), or
// NoEvents for a capture that is no operation (hibernation).
type Events interface {
	Event(ctx context.Context, typ, msg string, data any)
}

// NoEvents drops progress.
type NoEvents struct{}

// Event does nothing.
func (NoEvents) Event(context.Context, string, string, any) {}

// Deps are what a Saver works with.
type Deps struct {
	Node    string // this node: only its instances are saved here
	WorkDir string // spool directories of captures in progress
	Runtime Runtime
	Store   Store
	Reg     Registry
	Content Content
	Quota   Quota
	Ops     Operations
	// Gate is the node's freeze gate, shared with the user's pause.
	Gate *freeze.Gate
	Log  *slog.Logger
}

// Saver saves instances of this node.
type Saver struct {
	Deps
	stats stats
}

// New makes a Saver.
func New(d Deps) *Saver { return &Saver{Deps: d} }

// CaptureKinds are the operations that capture an instance's layer: one at
// a time per instance (see versions.Store.CreateExclusiveOperation).
var CaptureKinds = []types.OpKind{types.OpKindSave}

// Job is everything a save needs, fixed when it is requested, so that a
// resumed save does exactly what was asked.
type Job struct {
	InstanceID string `json:"instance_id"`
	Generation int64  `json:"generation"`
	Expected   int    `json:"expected_current"`
	Message    string `json:"message,omitempty"`
}

// Save starts a save of the instance's changes as a new version (step 1 of
// the save path: record the expected current and the generation).
func (s *Saver) Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, idempotencyKey string) (types.Operation, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return types.Operation{}, err
	}
	in, err := s.Store.GetInstance(ctx, p.Tenant, id)
	if err != nil {
		return types.Operation{}, err
	}
	if err := CheckGeneration(in, req.Generation); err != nil {
		return types.Operation{}, err
	}
	if in.State != types.StateRunning {
		return types.Operation{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s, save needs Running: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	if in.Node != s.Node {
		return types.Operation{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, s.Node, errdefs.ErrFailedPrecondition)
	}
	if len(req.Message) > 4096 {
		return types.Operation{}, fmt.Errorf("message: longer than 4096 bytes: %w", errdefs.ErrInvalidArgument)
	}
	job := Job{InstanceID: id, Generation: in.Generation, Message: req.Message, Expected: in.Version}
	if in.LastSavedVersion > 0 {
		job.Expected = in.LastSavedVersion
	}
	if req.ExpectedCurrent != nil {
		if *req.ExpectedCurrent < 0 {
			return types.Operation{}, fmt.Errorf("expected_current %d: %w", *req.ExpectedCurrent, errdefs.ErrInvalidArgument)
		}
		job.Expected = *req.ExpectedCurrent
	}
	// One save of an instance at a time: a second answers 409 while the
	// first is unfinished, on whichever node it is asked.
	return s.Ops.Start(ctx, p, ops.Spec{Kind: types.OpKindSave, Target: id, Scope: id, IdempotencyKey: idempotencyKey,
		Asked: req, Job: job, Exclusive: CaptureKinds,
		Run: func(ctx context.Context, op *ops.Op) (any, error) { return s.Run(ctx, op, job) }})
}

// Run is steps 2-7 of the save path in DESIGN.md.
func (s *Saver) Run(ctx context.Context, op *ops.Op, job Job) (types.SaveResult, error) {
	start := time.Now()
	in, err := s.Store.GetInstance(ctx, "", job.InstanceID)
	if err != nil {
		return types.SaveResult{}, err
	}
	if in.Generation != job.Generation {
		return types.SaveResult{}, fmt.Errorf("instance %q generation %d, save was for %d: %w", in.ID, in.Generation, job.Generation, errdefs.ErrStaleGeneration)
	}
	if in.State != types.StateRunning {
		return types.SaveResult{}, fmt.Errorf("instance %q is %s: %w", in.ID, in.State, errdefs.ErrFailedPrecondition)
	}
	release, err := s.Guard(ctx, in.ID, op.ID)
	if err != nil {
		return types.SaveResult{}, err
	}
	defer release()
	c, err := s.Capture(ctx, op, Capture{Work: op.ID, Instance: in, Freeze: true, Quota: versions.QuotaEnforced})
	if err != nil {
		return types.SaveResult{}, err
	}
	commitStart := time.Now()
	v, switched, err := s.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, Expected: job.Expected, InstanceID: in.ID, Generation: job.Generation,
		Kind: "snapshot", Message: job.Message,
	})
	if err != nil {
		return types.SaveResult{}, err
	}
	res := types.SaveResult{
		Project: in.Project, Version: v.Number, Current: switched, Conflict: !switched, Expected: job.Expected,
		Image: c.Image.Ref(), FreezeMS: c.Freeze.Milliseconds(), SpoolMS: c.Stats.Duration.Milliseconds(),
		EncodeMS: c.Encode.Milliseconds(), PushMS: c.Push.Milliseconds(), CommitMS: time.Since(commitStart).Milliseconds(),
		TotalMS: time.Since(start).Milliseconds(), LayerBytes: c.Layer.Size, Entries: c.Stats.Entries, Compression: c.Compression,
	}
	s.stats.add(res)
	if switched {
		op.Event(ctx, "committed", fmt.Sprintf("version %d is current", v.Number), res)
	} else {
		op.Event(ctx, "conflict", fmt.Sprintf("version %d is ready but not current: current is no longer %d", v.Number, job.Expected), res)
	}
	return res, nil
}

// Guard claims the instance's capture on this node for what, after
// checking that no capture operation of it runs on any node (a hibernation
// is not an operation; a save is). Call release when the capture ends.
func (s *Saver) Guard(ctx context.Context, id, what string) (release func(), err error) {
	op, err := s.Store.UnfinishedOperationOn(ctx, id, CaptureKinds)
	switch {
	case err == nil && op.ID != what:
		return nil, errdefs.WithDetails(fmt.Errorf("instance %q: %s operation %s is still running; one at a time: "+
			"wait for it to finish, then try again: %w", id, op.Kind, op.ID, errdefs.ErrFailedPrecondition),
			map[string]any{"operation": op.ID})
	case err != nil && !errors.Is(err, errdefs.ErrNotFound):
		return nil, err
	}
	return s.Gate.ClaimCapture(id, what)
}

// ThawInterrupted resumes the tasks of this node's Running instances that
// are frozen: only a save freezes a Running instance, so a frozen one was
// left by a process that died during a save's freeze window.
func (s *Saver) ThawInterrupted(ctx context.Context) error {
	ins, err := s.Store.ListNodeInstances(ctx, s.Node)
	if err != nil {
		return fmt.Errorf("instances of node %q: %w", s.Node, err)
	}
	for _, in := range ins {
		if in.State != types.StateRunning {
			continue
		}
		st, err := s.Runtime.Status(ctx, in.ID)
		if err != nil || st.Task != "paused" {
			continue
		}
		if err := s.Runtime.Resume(ctx, in.ID); err != nil {
			s.Log.Warn("thaw instance frozen by an interrupted save", "instance", in.ID, "err", err)
			continue
		}
		s.Log.Info("thawed instance frozen by an interrupted save", "instance", in.ID)
	}
	return nil
}

// CheckGeneration fences a request that names a generation (g != 0): only
// the instance's newest one may act.
func CheckGeneration(in versions.Instance, g int64) error {
	if g != 0 && g != in.Generation {
		return errdefs.WithDetails(fmt.Errorf("instance %q: generation %d is stale, the newest is %d: %w", in.ID, g, in.Generation, errdefs.ErrStaleGeneration),
			map[string]any{"generation": in.Generation})
	}
	return nil
}
