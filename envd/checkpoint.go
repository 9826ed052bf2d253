package envd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
	"github.com/envd-dev/envd/workspace"
)

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
func (s *Service) Checkpoint(ctx context.Context, p types.Principal, id string, req types.CheckpointRequest, idempotencyKey string) (types.Operation, error) {
	if err := names.ValidateInstanceID(id); err != nil {
		return types.Operation{}, err
	}
	in, err := s.store.Instances.GetInstance(ctx, p.Tenant, id)
	if err != nil {
		return types.Operation{}, err
	}
	if in.State != types.StateRunning {
		return types.Operation{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s, checkpoint needs Running: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	if in.Node != s.cfg.Node {
		return types.Operation{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, s.cfg.Node, errdefs.ErrFailedPrecondition)
	}
	if len(req.Message) > 4096 {
		return types.Operation{}, fmt.Errorf("message: longer than 4096 bytes: %w", errdefs.ErrInvalidArgument)
	}
	proj, err := s.store.Projects.GetProject(ctx, p.Tenant, in.Project)
	if err != nil {
		return types.Operation{}, err
	}
	if vols := projectVolumes(proj); len(vols) > 0 && (s.cfg.Volumes == nil || s.cfg.Objects == nil) {
		return types.Operation{}, fmt.Errorf("project %q has volumes, but this node has no volume or object storage to checkpoint them: %w", in.Project, errdefs.ErrFailedPrecondition)
	}
	job := checkpointJob{InstanceID: id, Generation: in.Generation, Expected: in.Version, Request: req}
	if in.LastSavedVersion > 0 {
		job.Expected = in.LastSavedVersion
	}
	return s.ops.Start(ctx, p, ops.Spec{Kind: types.OpKindCheckpoint, Target: id, Scope: id, IdempotencyKey: idempotencyKey,
		Asked: req, Job: job, Exclusive: save.CaptureKinds,
		Run: func(ctx context.Context, op *ops.Op) (any, error) { return s.runCheckpoint(ctx, op, job) }})
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

func (s *Service) runCheckpoint(ctx context.Context, op *ops.Op, job checkpointJob) (types.CheckpointResult, error) {
	start := time.Now()
	in, err := s.store.Instances.GetInstance(ctx, "", job.InstanceID)
	if err != nil {
		return types.CheckpointResult{}, err
	}
	if in.Generation != job.Generation {
		return types.CheckpointResult{}, fmt.Errorf("instance %q generation %d, checkpoint was for %d: %w", in.ID, in.Generation, job.Generation, errdefs.ErrStaleGeneration)
	}
	if in.State != types.StateRunning {
		return types.CheckpointResult{}, fmt.Errorf("instance %q is %s: %w", in.ID, in.State, errdefs.ErrFailedPrecondition)
	}
	proj, err := s.store.Projects.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return types.CheckpointResult{}, err
	}
	release, err := s.saver.Guard(ctx, in.ID, op.ID)
	if err != nil {
		return types.CheckpointResult{}, err
	}
	defer release()

	dir := filepath.Join(s.cfg.WorkDir, op.ID+"-volumes")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return types.CheckpointResult{}, err
	}
	defer os.RemoveAll(dir)
	owner := in.Tenant + "/" + in.Project
	copies := make([]*volumeCopy, 0)
	for _, v := range projectVolumes(proj) {
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
				f, err := s.cfg.Volumes.Freeze(ctx, owner, workspace.Spec{Name: c.vol.Name, Path: c.vol.Path, UID: c.vol.UID,
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
	c, err := s.saver.Capture(ctx, op, cp)
	if err != nil {
		return types.CheckpointResult{}, err
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
			if err := s.cfg.Objects.Delete(cctx, k); err != nil {
				s.log.Warn("delete archive of failed checkpoint", "key", k, "err", err)
			}
		}
	}
	rec := &versions.CheckpointRecord{Message: job.Request.Message, Node: s.cfg.Node, FreezeMS: c.Freeze.Milliseconds()}
	for _, vc := range copies {
		key := checkpointArchiveKey(in.Tenant, in.Project, vc.vol.Name)
		vc.info, err = workspace.ArchiveCopy(ctx, vc.path, s.cfg.Objects, key)
		if err != nil {
			dropArchives()
			s.saver.Abandon(ctx, c)
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
	v, switched, err := s.saver.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, Expected: job.Expected, InstanceID: in.ID, Generation: job.Generation,
		NoSwitch: !job.Request.SetCurrent, Kind: "snapshot", Message: message, Checkpoint: rec,
	})
	if err != nil {
		dropArchives()
		return types.CheckpointResult{}, err
	}
	cps, err := s.store.Versions.ListCheckpoints(ctx, in.Tenant, in.Project)
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
		TotalMS: time.Since(start).Milliseconds()}
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

// settleCheckpoint ends a checkpoint a previous envd left unfinished:
// committed, it is listed; otherwise nothing of it is (archives it wrote
// without a record are objects no row names).
func (s *Service) settleCheckpoint(ctx context.Context, op versions.Operation) {
	s.ops.Settle(ctx, op, fmt.Errorf("envd restarted during the checkpoint; one that committed is listed (envctl checkpoints): %w", errdefs.ErrFailedPrecondition))
}

func viewCheckpoint(c versions.Checkpoint) types.Checkpoint {
	out := types.Checkpoint{ID: c.Number, Project: c.Project, Version: c.Version, Instance: c.Instance, Message: c.Message,
		Volumes: []types.CheckpointVolume{}, VersionBytes: c.VersionBytes, Bytes: c.Bytes(), FreezeMS: c.FreezeMS, Node: c.Node, CreatedAt: c.CreatedAt}
	for _, a := range c.Archives {
		out.Volumes = append(out.Volumes, types.CheckpointVolume{Volume: a.Volume, Key: a.Key, Bytes: a.SizeBytes, Files: a.Files})
		out.VolumeBytes += a.SizeBytes
	}
	return out
}

// ListCheckpoints lists a project's checkpoints, newest first.
func (s *Service) ListCheckpoints(ctx context.Context, p types.Principal, project string) ([]types.Checkpoint, error) {
	if err := ValidateName("project", project); err != nil {
		return nil, err
	}
	cs, err := s.store.Versions.ListCheckpoints(ctx, p.Tenant, project)
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
func (s *Service) GetCheckpoint(ctx context.Context, p types.Principal, project string, id int) (types.Checkpoint, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Checkpoint{}, err
	}
	c, err := s.store.Versions.GetCheckpoint(ctx, p.Tenant, project, id)
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
func (s *Service) DeleteCheckpoint(ctx context.Context, p types.Principal, project string, id int) (types.Checkpoint, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Checkpoint{}, err
	}
	c, released, err := s.store.Versions.DeleteCheckpoint(ctx, p.Tenant, project, id)
	if err != nil {
		return types.Checkpoint{}, err
	}
	s.vols.DeleteOrphanArchives(ctx)
	if released {
		if err := s.collectVersion(ctx, p.Tenant, project, c.Version); err != nil {
			s.log.Warn("collect the version of a deleted checkpoint (the next gc does)", "project", project, "version", c.Version, "err", err)
		}
	}
	return viewCheckpoint(c), nil
}

// collectVersion deletes a version marked deleting: its manifest, unless
// another live version has the same image, then its row.
func (s *Service) collectVersion(ctx context.Context, tenant, project string, n int) error {
	v, err := s.store.Versions.GetVersion(ctx, tenant, project, n)
	if err != nil {
		return err
	}
	shared, err := s.store.Content.ImageInUse(ctx, v.Image)
	if err != nil {
		return err
	}
	if !shared {
		repo, digest, ok := strings.Cut(v.Image, "@")
		if !ok {
			return fmt.Errorf("version %d of %s: image %q is not repo@digest: %w", n, project, v.Image, errdefs.ErrFailedPrecondition)
		}
		if err := s.reg.DeleteManifest(ctx, registry.Image{Repo: repo, Digest: digest}); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	return s.store.Versions.DeleteVersion(ctx, tenant, project, n)
}

// restoreVolumeFromCheckpoint restores a volume to its checkpoint's
// archive on this node, also under running instances: this node's running
// (and paused) instances of the project are held frozen while the content
// is replaced in place, then thawed; they see the checkpoint's files when
// they run again. An instance between states refuses the restore.
func (s *Service) restoreVolumeFromCheckpoint(ctx context.Context, p types.Principal, project, name string, req types.VolumeArchiveRequest) (types.Volume, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Volume{}, err
	}
	if _, err := s.store.Versions.GetCheckpoint(ctx, p.Tenant, project, req.Checkpoint); err != nil {
		return types.Volume{}, err
	}
	ins, err := s.store.Instances.ListInstances(ctx, p.Tenant, project)
	if err != nil {
		return types.Volume{}, err
	}
	holder := fmt.Sprintf("restore:%s/%s", project, name)
	var held []string
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, id := range held {
			if err := s.gate.Release(rctx, s.rt, id, holder, false); err != nil {
				s.log.Warn("thaw instance after a volume restore", "instance", id, "err", err)
			}
		}
	}()
	for _, in := range ins {
		if in.Node != s.cfg.Node || !in.State.Live() || in.State == types.StateStopped {
			continue
		}
		if in.State != types.StateRunning && in.State != types.StatePaused {
			return types.Volume{}, errdefs.WithDetails(fmt.Errorf("instance %s of project %q is %s: restore the volume when it is not changing state: %w",
				in.ID, project, in.State, errdefs.ErrFailedPrecondition), map[string]any{"state": in.State})
		}
		if err := s.gate.Hold(ctx, s.rt, in.ID, holder); err != nil {
			return types.Volume{}, err
		}
		held = append(held, in.ID)
	}
	return s.vols.RestoreFromCheckpoint(ctx, p, project, name, req)
}
