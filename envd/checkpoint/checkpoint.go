// Package checkpoint holds the captures of a running instance that are
// not a plain save: coordinated checkpoints (its rootfs and its project's
// volumes at one freeze, api.CheckpointCore), the projects' periodic
// checkpoint schedule, and forks (api.VersionCore's Fork). Each is an
// operation (envd/ops) whose capture is the save path's (envd/save).
package checkpoint

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
	"github.com/envd-dev/envd/workspace"
)

// Store is what checkpoints and forks need of the store.
type Store interface {
	GetInstance(ctx context.Context, tenant, id string) (versions.Instance, error)
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	ListCheckpoints(ctx context.Context, tenant, project string) ([]versions.Checkpoint, error)
	GetCheckpoint(ctx context.Context, tenant, project string, number int) (versions.Checkpoint, error)
	// DeleteCheckpoint deletes the record; released: its version is
	// marked deleting, to be collected.
	DeleteCheckpoint(ctx context.Context, tenant, project string, number int) (c versions.Checkpoint, released bool, err error)
	GetVersion(ctx context.Context, tenant, project string, n int) (versions.Version, error)
	ImageInUse(ctx context.Context, image string) (bool, error)
	DeleteVersion(ctx context.Context, tenant, project string, number int) error
	SetCheckpointEvery(ctx context.Context, tenant, project string, every time.Duration) error
	CheckpointEvery(ctx context.Context, tenant, project string) (time.Duration, error)
	CheckpointDue(ctx context.Context, node string) ([]versions.Instance, error)
	SetInstanceCheckpoint(ctx context.Context, id string, v int) error
	// SetCheckpointMemoryNewBytes records a recount of what a checkpoint's
	// memory image adds to the tenant's stored bytes.
	SetCheckpointMemoryNewBytes(ctx context.Context, tenant, project string, number int, n int64) error
}

// Saver is the save path's capture (save.Saver).
type Saver interface {
	Guard(ctx context.Context, id, what string) (release func(), err error)
	Capture(ctx context.Context, ev save.Events, cp save.Capture) (save.Captured, error)
	Commit(ctx context.Context, c save.Captured, commit versions.Commit) (versions.Version, bool, error)
	Abandon(ctx context.Context, c save.Captured)
}

// Operations runs checkpoints and forks as operations (ops.Runner).
type Operations interface {
	Start(ctx context.Context, p types.Principal, spec ops.Spec) (types.Operation, error)
	GetOperation(ctx context.Context, p types.Principal, id string) (types.Operation, error)
	Settle(ctx context.Context, op versions.Operation, err error)
}

// Instances is what checkpoints and forks need of instances
// (lifecycle.Manager).
type Instances interface {
	// Checkpoint saves in's layer alone as a version that does not
	// become current.
	Checkpoint(ctx context.Context, in versions.Instance) (versions.Version, error)
	// StartCopies starts a fork's new instances, all or none.
	StartCopies(ctx context.Context, p types.Principal, c lifecycle.Copies) ([]types.Instance, error)
}

// Freezer freezes a project's volume for its point-in-time copy
// (workspace.Manager).
type Freezer interface {
	Freeze(ctx context.Context, owner string, s workspace.Spec) (*workspace.Frozen, error)
}

// Archives deletes the volume archives no record names any more
// (volumes.Manager).
type Archives interface {
	DeleteOrphanArchives(ctx context.Context)
}

// Registry deletes the manifest of a collected version.
type Registry interface {
	DeleteManifest(ctx context.Context, img registry.Image) error
}

// MemoryEngine writes the memory image of an instance's processes
// (runtime.Runtime): only instances of a class whose engine can (gVisor).
type MemoryEngine interface {
	InstanceClass(ctx context.Context, id string) (runtime.Class, error)
	// CheckpointMemory writes the image into dir and leaves the instance
	// as it was (a paused one paused).
	CheckpointMemory(ctx context.Context, id, dir string) error
	// ExternalConnections lists the instance's established TCP
	// connections with peers outside it, which a resume would not have.
	ExternalConnections(ctx context.Context, id string) ([]string, error)
}

// MemoryImages pushes a memory image directory to the registry
// (registry/memimage) as an artifact of repo whose subject is the manifest
// digest subject; the result's Image, Bytes and NewBytes are set.
type MemoryImages interface {
	PushMemory(ctx context.Context, dir, repo, subject string) (versions.CheckpointMemory, error)
}

// Deps is what New and NewForks need. Freezer and Objects are nil on a
// node without volumes or object storage: a checkpoint of a project with
// volumes is refused there.
type Deps struct {
	Node      string // this node's name
	WorkDir   string // the volumes' copies of checkpoints in progress
	Store     Store
	Saver     Saver
	Ops       Operations
	Instances Instances
	Quota     Quota
	Freezer   Freezer
	Objects   objstore.Store
	Archives  Archives
	Registry  Registry
	Log       *slog.Logger
	// Memory and MemImages are nil on a node without a memory engine or
	// a registry for memory images: checkpoints with memory are refused.
	Memory    MemoryEngine
	MemImages MemoryImages
	// Portable, Artifacts, Content and Quota export and import checkpoints
	// (portable.go); Portable nil refuses both. Artifacts nil: no recount
	// of memory images' stored bytes.
	Portable  Portable
	Artifacts MemoryArtifacts
	Content   Content
}

// Checkpoints serves api.CheckpointCore and the projects' checkpoint
// schedule (SetProjectCheckpoint, GetProjectCheckpoint, Due).
type Checkpoints struct {
	node      string
	workDir   string
	store     Store
	saver     Saver
	ops       Operations
	instances Instances
	freezer   Freezer
	objects   objstore.Store
	archives  Archives
	reg       Registry
	log       *slog.Logger
	memory    MemoryEngine
	memImages MemoryImages
	portable  Portable
	artifacts MemoryArtifacts
	content   Content
	quota     Quota
}

// New makes the checkpoints part.
func New(d Deps) *Checkpoints {
	return &Checkpoints{node: d.Node, workDir: d.WorkDir, store: d.Store, saver: d.Saver, ops: d.Ops, instances: d.Instances,
		freezer: d.Freezer, objects: d.Objects, archives: d.Archives, reg: d.Registry, log: d.Log,
		memory: d.Memory, memImages: d.MemImages, portable: d.Portable, artifacts: d.Artifacts, content: d.Content, quota: d.Quota}
}

// Settle ends a checkpoint a previous envd left unfinished: committed, it
// is listed; otherwise nothing of it is (archives it wrote without a
// record are objects no row names). It is the ops.Resumer of kind
// checkpoint.
func (pt *Checkpoints) Settle(ctx context.Context, op versions.Operation) {
	pt.ops.Settle(ctx, op, fmt.Errorf("envd restarted during the checkpoint; one that committed is listed (envctl checkpoints): %w", errdefs.ErrFailedPrecondition))
}

// A coordinated checkpoint freezes an instance once and captures, at that
// moment, its rootfs as a version and each volume of its project as an
// archive, recorded together (versions.Checkpoint):
//
//  1. as a save: the instance's changes are spooled while it runs;
//  2. the instance is frozen for the rootfs's second pass; still frozen,
//     each volume's file system is frozen too (workspace.Freeze: flushed,
//     its writers blocked), then the instance thaws;
//  3. each volume's image is copied (a reflink, or its data extents) and
//     its file system thawed: only writes to the volume waited for the copy;
//  4. the layer is encoded and pushed; each copy is archived to object
//     storage from a read-only mount of it;
//  5. one transaction records the version (not current, unless asked),
//     the checkpoint and its archives, checked against the quota with the
//     archives' bytes. A failure before it deletes the archives written.

// checkpointJob is what a checkpoint operation does, fixed when asked.
type checkpointJob struct {
	InstanceID string                  `json:"instance_id"`
	Generation int64                   `json:"generation"`
	Expected   int                     `json:"expected_current"`
	Request    types.CheckpointRequest `json:"request"`
}

// Checkpoint starts an operation of kind "checkpoint" of a running
// instance of this node. One capture of an instance at a time: it excludes
// saves and forks of it.
func (pt *Checkpoints) Checkpoint(ctx context.Context, p types.Principal, id string, req types.CheckpointRequest, idempotencyKey string) (types.Operation, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return types.Operation{}, err
	}
	in, err := pt.store.GetInstance(ctx, p.Tenant, id)
	if err != nil {
		return types.Operation{}, err
	}
	if in.State != types.StateRunning {
		kind := errdefs.ErrFailedPrecondition
		if req.Memory {
			kind = errdefs.ErrMemoryUnsupported
		}
		return types.Operation{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s, checkpoint needs Running (its processes, for memory): %w", id, in.State, kind),
			map[string]any{"state": in.State, "reason": "state"})
	}
	if in.Node != pt.node {
		return types.Operation{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, pt.node, errdefs.ErrFailedPrecondition)
	}
	if len(req.Message) > 4096 {
		return types.Operation{}, fmt.Errorf("message: longer than 4096 bytes: %w", errdefs.ErrInvalidArgument)
	}
	proj, err := pt.store.GetProject(ctx, p.Tenant, in.Project)
	if err != nil {
		return types.Operation{}, err
	}
	if vols := projectVolumes(proj); len(vols) > 0 && (pt.freezer == nil || pt.objects == nil) {
		return types.Operation{}, fmt.Errorf("project %q has volumes, but this node has no volume or object storage to checkpoint them: %w", in.Project, errdefs.ErrFailedPrecondition)
	}
	if req.Memory {
		if err := pt.canCheckpointMemory(ctx, in); err != nil {
			return types.Operation{}, err
		}
	}
	job := checkpointJob{InstanceID: id, Generation: in.Generation, Expected: in.Version, Request: req}
	if in.LastSavedVersion > 0 {
		job.Expected = in.LastSavedVersion
	}
	return pt.ops.Start(ctx, p, ops.Spec{Kind: types.OpKindCheckpoint, Target: id, Scope: id, IdempotencyKey: idempotencyKey,
		Asked: req, Job: job, Exclusive: save.CaptureKinds,
		Run: func(ctx context.Context, op *ops.Op) (any, error) { return pt.capture(ctx, op, job, captureFor{}) }})
}

// canCheckpointMemory refuses, before anything is made, a memory
// checkpoint of an instance whose engine cannot give one.
func (pt *Checkpoints) canCheckpointMemory(ctx context.Context, in versions.Instance) error {
	var e MemoryEngine
	if pt.memImages != nil {
		e = pt.memory
	}
	return runtime.CheckMemoryCheckpoint(ctx, e, pt.node, in.ID, "memory checkpoints")
}

func projectVolumes(proj versions.Project) []types.Volume {
	ps, err := spec.Parse(proj.Spec)
	if err != nil {
		return nil
	}
	return ps.Volumes
}

// volumeCopy is one volume's point-in-time copy, then its archive.
type volumeCopy struct {
	vol    types.Volume
	frozen *workspace.Frozen
	path   string // the copied image
	info   workspace.ArchiveInfo
}

// captureFor is how a fork's checkpoint differs from a checkpoint asked
// for itself.
type captureFor struct {
	// fork: no volume archives (the fork's copies mount the project's
	// live volumes, as every instance of it does).
	fork bool
	// keepMemory: the memory image is moved to this directory after its
	// push instead of deleted (the fork's copies restore from it).
	keepMemory string
}

func (pt *Checkpoints) capture(ctx context.Context, op *ops.Op, job checkpointJob, how captureFor) (types.CheckpointResult, error) {
	start := time.Now()
	in, err := pt.store.GetInstance(ctx, "", job.InstanceID)
	if err != nil {
		return types.CheckpointResult{}, err
	}
	if in.Generation != job.Generation {
		return types.CheckpointResult{}, fmt.Errorf("instance %q generation %d, checkpoint was for %d: %w", in.ID, in.Generation, job.Generation, errdefs.ErrStaleGeneration)
	}
	if in.State != types.StateRunning {
		return types.CheckpointResult{}, fmt.Errorf("instance %q is %s: %w", in.ID, in.State, errdefs.ErrFailedPrecondition)
	}
	proj, err := pt.store.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return types.CheckpointResult{}, err
	}
	release, err := pt.saver.Guard(ctx, in.ID, op.ID)
	if err != nil {
		return types.CheckpointResult{}, err
	}
	defer release()

	dir := filepath.Join(pt.workDir, op.ID+"-volumes")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return types.CheckpointResult{}, err
	}
	defer os.RemoveAll(dir)
	owner := in.Tenant + "/" + in.Project
	copies := make([]*volumeCopy, 0)
	for _, v := range projectVolumes(proj) {
		if how.fork {
			break
		}
		copies = append(copies, &volumeCopy{vol: v, path: filepath.Join(dir, v.Name+".img")})
	}
	defer func() { // whatever failed, no volume stays frozen
		for _, c := range copies {
			if c.frozen != nil {
				c.frozen.Thaw()
			}
		}
	}()
	var volumeFreeze time.Duration
	cp := save.Capture{Work: op.ID, Instance: in, Freeze: true, Quota: versions.QuotaEnforced}
	if len(copies) > 0 {
		cp.WhileFrozen = func(ctx context.Context) error {
			for _, c := range copies {
				f, err := pt.freezer.Freeze(ctx, owner, workspace.Spec{Name: c.vol.Name, Path: c.vol.Path, UID: c.vol.UID,
					GID: c.vol.GID, SizeBytes: c.vol.SizeBytes, PathAdd: c.vol.PathAdd})
				if err != nil {
					return fmt.Errorf("volume %q: %w", c.vol.Name, err)
				}
				c.frozen = f
			}
			return nil
		}
		cp.Thawed = func(ctx context.Context) error {
			var first error
			for _, c := range copies {
				if c.frozen == nil {
					continue
				}
				d, err := c.frozen.Copy(ctx, c.path)
				c.frozen = nil
				volumeFreeze = max(volumeFreeze, d)
				if err != nil && first == nil {
					first = fmt.Errorf("volume %q: %w", c.vol.Name, err)
				}
			}
			return first
		}
	}
	// The memory image is written inside the one freeze, after the
	// rootfs's frozen pass and the volumes' freeze: the task is paused
	// (cgroup freezer through the runc shim, runsc's pause) across all
	// three, and runsc's checkpoint of a paused sandbox leaves it paused,
	// so rootfs, volumes and memory are of one instant.
	var memDir string
	var memFreeze, volumesFrozen time.Duration
	if job.Request.Memory {
		memDir = filepath.Join(pt.workDir, op.ID+"-memory")
		_ = os.RemoveAll(memDir) // left by an envd that died here
		defer os.RemoveAll(memDir)
		volumes := cp.WhileFrozen
		cp.WhileFrozen = func(ctx context.Context) error {
			if volumes != nil {
				start := time.Now()
				err := volumes(ctx)
				volumesFrozen = time.Since(start)
				if err != nil {
					return err
				}
			}
			start := time.Now()
			err := pt.memory.CheckpointMemory(ctx, in.ID, memDir)
			memFreeze = time.Since(start)
			if err != nil {
				return fmt.Errorf("memory image: %w", err)
			}
			return nil
		}
	}
	c, err := pt.saver.Capture(ctx, op, cp)
	if err != nil {
		return types.CheckpointResult{}, err
	}
	// Pushed under the capture's upload lease, which Commit ends: no sweep
	// runs between this push and the row that owns the artifact.
	var mem versions.CheckpointMemory
	var memPush time.Duration
	if job.Request.Memory {
		start := time.Now()
		mem, err = pt.memImages.PushMemory(ctx, memDir, c.Image.Repo, c.Image.Digest)
		if err != nil {
			pt.saver.Abandon(ctx, c)
			return types.CheckpointResult{}, fmt.Errorf("push memory image: %w", err)
		}
		memPush = time.Since(start)
		mem.FreezeMS = memFreeze.Milliseconds()
		if how.keepMemory != "" {
			if err := os.Rename(memDir, how.keepMemory); err != nil {
				pt.saver.Abandon(ctx, c)
				return types.CheckpointResult{}, fmt.Errorf("keep memory image: %w", err)
			}
		}
		_ = os.RemoveAll(memDir)
		// The freeze's parts, for the bench's table and anyone asking
		// where a long freeze went: pause, rootfs pass, volumes, the
		// engine's image, resume.
		op.Event(ctx, "memory", fmt.Sprintf("memory image %s: %d bytes, %d new, written in %s (frozen), pushed in %s; the freeze of %s: pause %s, rootfs %s, volumes %s, memory %s, resume %s",
			mem.Image, mem.Bytes, mem.NewBytes, memFreeze.Round(time.Millisecond), memPush.Round(time.Millisecond),
			c.Freeze.Round(time.Millisecond), c.Steps.Pause.Round(time.Millisecond), c.Steps.Rootfs.Round(time.Millisecond),
			volumesFrozen.Round(time.Millisecond), memFreeze.Round(time.Millisecond), c.Steps.Resume.Round(time.Millisecond)),
			map[string]any{"image": mem.Image, "bytes": mem.Bytes, "new_bytes": mem.NewBytes, "memory_freeze_ms": mem.FreezeMS, "push_ms": memPush.Milliseconds(),
				"freeze_ms": c.Freeze.Milliseconds(), "pause_ms": c.Steps.Pause.Milliseconds(), "rootfs_frozen_ms": c.Steps.Rootfs.Milliseconds(),
				"volumes_frozen_ms": volumesFrozen.Milliseconds(), "resume_ms": c.Steps.Resume.Milliseconds()})
	}
	if len(copies) > 0 {
		op.Event(ctx, "volumes", fmt.Sprintf("%d volume(s) copied at the freeze; their writes waited %s", len(copies), volumeFreeze.Round(time.Millisecond)),
			map[string]any{"volumes": len(copies), "volume_freeze_ms": volumeFreeze.Milliseconds()})
	}

	// Archives are written before the record; a failure deletes them.
	archiveStart := time.Now()
	var written []string
	dropArchives := func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, k := range written {
			if err := pt.objects.Delete(cctx, k); err != nil {
				pt.log.Warn("delete archive of failed checkpoint", "key", k, "err", err)
			}
		}
	}
	rec := &versions.CheckpointRecord{Message: job.Request.Message, Node: pt.node, FreezeMS: c.Freeze.Milliseconds(), Memory: mem}
	for _, vc := range copies {
		key := checkpointArchiveKey(in.Tenant, in.Project, vc.vol.Name)
		vc.info, err = workspace.ArchiveCopy(ctx, vc.path, pt.objects, key)
		if err != nil {
			dropArchives()
			pt.saver.Abandon(ctx, c)
			return types.CheckpointResult{}, fmt.Errorf("archive volume %q: %w", vc.vol.Name, err)
		}
		written = append(written, key)
		rec.Archives = append(rec.Archives, versions.Archive{Volume: vc.vol.Name, Key: key, SizeBytes: vc.info.Bytes, Files: vc.info.Files})
		op.Event(ctx, "archived", fmt.Sprintf("volume %s: %d entries, %d bytes", vc.vol.Name, vc.info.Files, vc.info.Bytes),
			map[string]any{"volume": vc.vol.Name, "bytes": vc.info.Bytes, "files": vc.info.Files})
	}
	archiveTime := time.Since(archiveStart)

	message := job.Request.Message
	if message == "" {
		message = "checkpoint of instance " + in.ID
	}
	v, switched, err := pt.saver.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, Expected: job.Expected, InstanceID: in.ID, Generation: job.Generation,
		NoSwitch: !job.Request.SetCurrent, Kind: "snapshot", Message: message, Checkpoint: rec,
	})
	if err != nil {
		dropArchives()
		return types.CheckpointResult{}, err
	}
	cps, err := pt.store.ListCheckpoints(ctx, in.Tenant, in.Project)
	if err != nil {
		return types.CheckpointResult{}, err
	}
	var got versions.Checkpoint
	for _, x := range cps {
		if x.Version == v.Number {
			got = x
			break
		}
	}
	res := types.CheckpointResult{Checkpoint: viewCheckpoint(got), Current: switched, Conflict: job.Request.SetCurrent && !switched,
		FreezeMS: c.Freeze.Milliseconds(), VolumeFreezeMS: volumeFreeze.Milliseconds(), ArchiveMS: archiveTime.Milliseconds(),
		TotalMS: time.Since(start).Milliseconds(), MemoryPushMS: memPush.Milliseconds()}
	op.Event(ctx, "committed", fmt.Sprintf("checkpoint %d: version %d and %d volume archive(s), %d bytes", got.Number, v.Number, len(got.Archives), got.Bytes()), res)
	return res, nil
}

// checkpointArchiveKey is a new object key for a checkpoint's archive of
// a project's volume.
func checkpointArchiveKey(tenant, project, volume string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("checkpoints/%s/%s/%s/%s.tar.zst", tenant, project, volume, hex.EncodeToString(b[:]))
}

func viewCheckpoint(c versions.Checkpoint) types.Checkpoint {
	out := types.Checkpoint{ID: c.Number, Project: c.Project, Version: c.Version, Instance: c.Instance, Message: c.Message,
		Volumes: []types.CheckpointVolume{}, VersionBytes: c.VersionBytes, Bytes: c.Bytes(), FreezeMS: c.FreezeMS, Node: c.Node, CreatedAt: c.CreatedAt}
	for _, a := range c.Archives {
		out.Volumes = append(out.Volumes, types.CheckpointVolume{Volume: a.Volume, Key: a.Key, Bytes: a.SizeBytes, Files: a.Files})
		out.VolumeBytes += a.SizeBytes
	}
	if m := c.Memory; m.Image != "" {
		out.Memory = &types.CheckpointMemory{Image: m.Image, Bytes: m.Bytes, NewBytes: m.NewBytes, FreezeMS: m.FreezeMS, ResumedBy: m.ResumedBy}
	}
	return out
}

// ListCheckpoints lists a project's checkpoints, newest first.
func (pt *Checkpoints) ListCheckpoints(ctx context.Context, p types.Principal, project string) ([]types.Checkpoint, error) {
	if err := names.Validate("project", project); err != nil {
		return nil, err
	}
	cs, err := pt.store.ListCheckpoints(ctx, p.Tenant, project)
	if err != nil {
		return nil, err
	}
	out := make([]types.Checkpoint, 0, len(cs))
	for _, c := range cs {
		out = append(out, viewCheckpoint(c))
	}
	return out, nil
}

// GetCheckpoint returns checkpoint id of a project.
func (pt *Checkpoints) GetCheckpoint(ctx context.Context, p types.Principal, project string, id int) (types.Checkpoint, error) {
	if err := names.Validate("project", project); err != nil {
		return types.Checkpoint{}, err
	}
	c, err := pt.store.GetCheckpoint(ctx, p.Tenant, project, id)
	if err != nil {
		return types.Checkpoint{}, err
	}
	return viewCheckpoint(c), nil
}

// DeleteCheckpoint deletes checkpoint id of a project and releases its
// parts together: its archives' objects are deleted, and its version is
// collected now (manifest, then row) unless something else keeps it
// (current, pinned, an instance uses it); its blobs go at the next GC
// sweep.
func (pt *Checkpoints) DeleteCheckpoint(ctx context.Context, p types.Principal, project string, id int) (types.Checkpoint, error) {
	if err := names.Validate("project", project); err != nil {
		return types.Checkpoint{}, err
	}
	c, released, err := pt.store.DeleteCheckpoint(ctx, p.Tenant, project, id)
	if err != nil {
		return types.Checkpoint{}, err
	}
	pt.archives.DeleteOrphanArchives(ctx)
	if c.Memory.Image != "" {
		// Its chunks that later images share are now theirs to count.
		pt.RecountMemory(ctx, p.Tenant, project)
	}
	if released {
		if err := pt.collectVersion(ctx, p.Tenant, project, c.Version); err != nil {
			pt.log.Warn("collect the version of a deleted checkpoint (the next gc does)", "project", project, "version", c.Version, "err", err)
		}
	}
	return viewCheckpoint(c), nil
}

// collectVersion deletes a version marked deleting: its manifest, unless
// another live version has the same image, then its row.
func (pt *Checkpoints) collectVersion(ctx context.Context, tenant, project string, n int) error {
	v, err := pt.store.GetVersion(ctx, tenant, project, n)
	if err != nil {
		return err
	}
	shared, err := pt.store.ImageInUse(ctx, v.Image)
	if err != nil {
		return err
	}
	if !shared {
		repo, digest, ok := strings.Cut(v.Image, "@")
		if !ok {
			return fmt.Errorf("version %d of %s: image %q is not repo@digest: %w", n, project, v.Image, errdefs.ErrFailedPrecondition)
		}
		if err := pt.reg.DeleteManifest(ctx, registry.Image{Repo: repo, Digest: digest}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	return pt.store.DeleteVersion(ctx, tenant, project, n)
}
