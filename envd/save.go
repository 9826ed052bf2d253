package envd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/snapshotter"
	"github.com/envd-dev/envd/versions"
)

// injectedFiles are bind-mounted into every instance by the runtime; runc
// creates empty files for them in the upper dir when the image lacks them.
// They belong to the node, not to the environment.
var injectedFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/hostname"}

// saveJob is everything a save needs, fixed when it is requested, so that a
// resumed save does exactly what was asked.
type saveJob struct {
	InstanceID string `json:"instance_id"`
	Generation int64  `json:"generation"`
	Expected   int    `json:"expected_current"`
	Message    string `json:"message,omitempty"`
}

// Save starts a save of the instance's changes as a new version (step 1 of
// the save path: record the expected current and the generation).
func (s *Service) Save(ctx context.Context, p types.Principal, id string, req types.SaveRequest, idempotencyKey string) (types.Operation, error) {
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return types.Operation{}, err
	}
	if err := checkGeneration(in, req.Generation); err != nil {
		return types.Operation{}, err
	}
	if in.State != types.StateRunning {
		return types.Operation{}, errdefs.WithDetails(fmt.Errorf("instance %q is %s, save needs Running: %w", id, in.State, errdefs.ErrFailedPrecondition),
			map[string]any{"state": in.State})
	}
	if in.Node != s.cfg.Node {
		return types.Operation{}, fmt.Errorf("instance %q runs on node %q, not on %q: %w", id, in.Node, s.cfg.Node, errdefs.ErrFailedPrecondition)
	}
	if len(req.Message) > 4096 {
		return types.Operation{}, fmt.Errorf("message: longer than 4096 bytes: %w", errdefs.ErrInvalidArgument)
	}
	job := saveJob{InstanceID: id, Generation: in.Generation, Message: req.Message, Expected: in.Version}
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
	return s.startExclusiveOp(ctx, p, types.OpKindSave, id, idempotencyKey, req, job, func(ctx context.Context, oc *opCtx) (any, error) {
		return s.runSave(ctx, oc, job)
	})
}

// runSave is steps 2-7 of the save path in DESIGN.md.
func (s *Service) runSave(ctx context.Context, oc *opCtx, job saveJob) (types.SaveResult, error) {
	start := time.Now()
	in, err := s.store.GetInstance(ctx, "", job.InstanceID)
	if err != nil {
		return types.SaveResult{}, err
	}
	if in.Generation != job.Generation {
		return types.SaveResult{}, fmt.Errorf("instance %q generation %d, save was for %d: %w", in.ID, in.Generation, job.Generation, errdefs.ErrStaleGeneration)
	}
	if in.State != types.StateRunning {
		return types.SaveResult{}, fmt.Errorf("instance %q is %s: %w", in.ID, in.State, errdefs.ErrFailedPrecondition)
	}
	release, err := s.captureGuard(ctx, in.ID, oc.id)
	if err != nil {
		return types.SaveResult{}, err
	}
	defer release()
	c, err := s.capture(ctx, oc, oc.id, in, true, versions.QuotaEnforced)
	if err != nil {
		return types.SaveResult{}, err
	}
	commitStart := time.Now()
	v, switched, err := s.commitCaptured(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, Expected: job.Expected, InstanceID: in.ID, Generation: job.Generation,
		Kind: "snapshot", Message: job.Message,
	})
	if err != nil {
		return types.SaveResult{}, err
	}
	res := types.SaveResult{
		Project: in.Project, Version: v.Number, Current: switched, Conflict: !switched, Expected: job.Expected,
		Image: c.img.Ref(), FreezeMS: c.freeze.Milliseconds(), SpoolMS: c.stats.Duration.Milliseconds(),
		EncodeMS: c.encode.Milliseconds(), PushMS: c.push.Milliseconds(), CommitMS: time.Since(commitStart).Milliseconds(),
		TotalMS: time.Since(start).Milliseconds(), LayerBytes: c.layer.Size, Entries: c.stats.Entries, Compression: c.compression,
	}
	s.saves.add(res)
	if switched {
		oc.event(ctx, "committed", fmt.Sprintf("version %d is current", v.Number), res)
	} else {
		oc.event(ctx, "conflict", fmt.Sprintf("version %d is ready but not current: current is no longer %d", v.Number, job.Expected), res)
	}
	return res, nil
}

// captured is an instance's rootfs changes pushed as an image, under an
// upload lease that commitCaptured ends.
type captured struct {
	img                  registry.Image
	base                 versions.Version // the version whose layers the image extends
	stats                snapshotter.SpoolStats
	layer                snapshotter.Layer
	compression          string
	freeze, encode, push time.Duration
	upload               *versions.Upload
	quota                versions.QuotaPolicy
	volumeBytes          int64 // the tenant's declared volume sizes, for the commit's quota check
}

// commitCaptured is step 6 for a captured image: c's image, parent and
// sizes are recorded as the version commit describes, under c's upload
// lease (ended here) and checked against the quota as capture was asked.
// A failed commit deletes the pushed manifest.
func (s *Service) commitCaptured(ctx context.Context, c captured, commit versions.Commit) (versions.Version, bool, error) {
	defer c.upload.End()
	commit.Image, commit.Parent, commit.SizeBytes, commit.Layers = c.img.Ref(), c.base.Number, c.img.Size, len(c.img.Layers)
	commit.LayerBytes, commit.Quota, commit.OtherStoredBytes = c.layer.Size, c.quota, c.volumeBytes
	v, switched, err := c.upload.CommitVersion(ctx, commit)
	if err != nil {
		s.dropManifest(ctx, c.img)
	}
	return v, switched, err
}

// capture is steps 2-5 of the save path: read the instance's upper dir
// (frozen when freeze is set; a stopped instance has nothing to freeze),
// encode it, check it against the tenant's quota (unless quota is
// QuotaExempt), and push it on top of the version the rootfs sits on. work
// names the spool directory. The caller must pass the result to
// commitCaptured.
func (s *Service) capture(ctx context.Context, oc *opCtx, work string, in versions.Instance, freeze bool, quota versions.QuotaPolicy) (captured, error) {
	var c captured
	proj, err := s.store.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return c, err
	}
	// The new image is the layers the rootfs sits on plus one layer of
	// everything changed since: repeated saves replace that layer.
	layerVersion := in.Version
	if in.LayerVersion > 0 {
		layerVersion = in.LayerVersion
	}
	if c.base, err = s.store.GetVersion(ctx, in.Tenant, in.Project, layerVersion); err != nil {
		return c, err
	}
	mounts, err := s.rt.Mounts(ctx, in.ID)
	if err != nil {
		return c, fmt.Errorf("rootfs of %q: %w", in.ID, err)
	}
	upper, err := snapshotter.UpperDir(mounts)
	if err != nil {
		return c, fmt.Errorf("rootfs of %q: %w", in.ID, err)
	}

	dir := s.spoolDir(work)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return c, err
	}
	defer os.RemoveAll(dir)

	excludes := append(append(append([]string{}, snapshotter.DefaultExcludes...), injectedFiles...), proj.Excludes...)
	ps, err := parseProjectSpec(proj.Spec)
	if err != nil {
		return c, err
	}
	for _, v := range ps.Volumes {
		excludes = append(excludes, v.Path) // volumes are never part of a snapshot
	}
	spoolPath := filepath.Join(dir, "layer.tar")
	c.stats, c.freeze, err = s.spool(ctx, in.ID, work, upper, spoolPath, excludes, freeze)
	if err != nil {
		return c, err
	}
	oc.event(ctx, "spooled", fmt.Sprintf("read %d entries (%d bytes) while frozen for %s", c.stats.Entries, c.stats.Bytes, c.freeze.Round(time.Millisecond)),
		map[string]any{"entries": c.stats.Entries, "bytes": c.stats.Bytes, "whiteouts": c.stats.Whiteouts, "freeze_ms": c.freeze.Milliseconds()})

	encStart := time.Now()
	c.compression = proj.Compression
	c.layer, err = snapshotter.Encode(ctx, spoolPath, dir, snapshotter.EncodeOptions{
		Compression: snapshotter.Compression(proj.Compression), PrioritizedFiles: proj.Prefetch})
	if err != nil {
		return c, fmt.Errorf("encode layer: %w", err)
	}
	c.encode = time.Since(encStart)
	_ = os.Remove(spoolPath)
	oc.event(ctx, "encoded", fmt.Sprintf("%s layer of %d bytes in %s", proj.Compression, c.layer.Size, c.encode.Round(time.Millisecond)),
		map[string]any{"layer_bytes": c.layer.Size, "encode_ms": c.encode.Milliseconds()})

	// The quota is checked on the encoded size before anything is
	// uploaded, and again, atomically, by the commit.
	c.quota = quota
	if quota != versions.QuotaExempt {
		if c.volumeBytes, err = s.checkSaveQuota(ctx, in.Tenant, in.Project, c.layer.Size); err != nil {
			return c, err
		}
	}
	pushStart := time.Now()
	parent, err := s.reg.Get(ctx, c.base.Image)
	if err != nil {
		return c, fmt.Errorf("parent image of version %d: %w", c.base.Number, err)
	}
	c.upload, err = s.upload(ctx, func() (err error) {
		c.img, err = s.reg.Append(ctx, parent, registry.LayerFile{
			Path: c.layer.Path, MediaType: c.layer.MediaType, Digest: c.layer.Digest.String(), DiffID: c.layer.DiffID.String(),
			Size: c.layer.Size, Annotations: c.layer.Annotations,
		}, projectRepo(in.Tenant, in.Project), "", map[string]string{
			"org.envd.project": in.Project, "org.envd.instance": in.ID, "org.envd.parent-version": fmt.Sprint(c.base.Number),
		})
		return err
	})
	if err != nil {
		return c, fmt.Errorf("push version image: %w", err)
	}
	c.push = time.Since(pushStart)
	oc.event(ctx, "pushed", fmt.Sprintf("pushed and verified %s in %s", c.img.Ref(), c.push.Round(time.Millisecond)),
		map[string]any{"image": c.img.Ref(), "push_ms": c.push.Milliseconds()})
	return c, nil
}

// spool writes the layer tar of the instance's upper dir to path. A running
// instance is frozen only for the second pass of a two-pass spool (step 2):
// the first pass copies every file while the instance runs, the frozen one
// re-reads metadata and copies only what changed meanwhile, so the freeze
// grows with what changed during the save, not with the size of the change.
// The thaw always runs, even when ctx is canceled. work names the save
// (its operation) as a holder of the freeze.
func (s *Service) spool(ctx context.Context, id, work, upper, path string, excludes []string, freeze bool) (snapshotter.SpoolStats, time.Duration, error) {
	opts := snapshotter.SpoolOptions{Excludes: excludes}
	var err error
	if opts.IDShift, err = s.idShift(ctx, id); err != nil {
		return snapshotter.SpoolStats{}, 0, err
	}
	if !freeze { // a stopped instance: nothing runs, one pass
		f, err := os.Create(path)
		if err != nil {
			return snapshotter.SpoolStats{}, 0, err
		}
		defer f.Close()
		stats, err := snapshotter.Spool(ctx, upper, f, opts)
		if err == nil {
			err = f.Close()
		}
		return stats, 0, err
	}
	tp, err := snapshotter.Prepare(ctx, upper, filepath.Dir(path), opts)
	if err != nil {
		return snapshotter.SpoolStats{}, 0, fmt.Errorf("read changes of %q: %w", id, err)
	}
	defer tp.Close()

	// The freeze is held for this save alone: a user's pause during it
	// stays in force after it (see freezeGate).
	rctx, cancel := detach(ctx, 30*time.Second)
	defer cancel()
	holder := saveHolder(work)
	frozen := time.Now()
	if err := s.frozen.hold(ctx, s.rt, id, holder); err != nil {
		return snapshotter.SpoolStats{}, 0, err
	}
	fs, frozenErr := tp.Frozen(ctx)
	resumeErr := s.frozen.release(rctx, s.rt, id, holder, false)
	window := time.Since(frozen)
	if frozenErr != nil {
		return fs.SpoolStats, window, fmt.Errorf("read changes of %q: %w", id, frozenErr)
	}
	if resumeErr != nil {
		return fs.SpoolStats, window, resumeErr
	}

	f, err := os.Create(path)
	if err != nil {
		return fs.SpoolStats, window, err
	}
	defer f.Close()
	if err := tp.WriteTar(ctx, f); err != nil {
		return fs.SpoolStats, window, fmt.Errorf("write layer tar of %q: %w", id, err)
	}
	return fs.SpoolStats, window, f.Close()
}
