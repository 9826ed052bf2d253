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
	"os"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/freeze"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/snapshotter"
	"github.com/envd-dev/envd/versions"
)

// injectedFiles are bind-mounted into every instance by the runtime; runc
// creates empty files for them in the upper dir when the image lacks them.
// They belong to the node, not to the environment.
var injectedFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/hostname"}

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

// Run is steps 2-7 of the save path in DESIGN.md, and tells the Observer
// how the save ended (a canceled save is neither saved nor failed).
func (s *Saver) Run(ctx context.Context, op *ops.Op, job Job) (types.SaveResult, error) {
	res, err := s.run(ctx, op, job)
	switch {
	case err == nil:
		s.Observer.Saved(res)
	case ctx.Err() == nil:
		s.Observer.SaveFailed(err)
	}
	return res, err
}

func (s *Saver) run(ctx context.Context, op *ops.Op, job Job) (types.SaveResult, error) {
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
	if switched {
		op.Event(ctx, "committed", fmt.Sprintf("version %d is current", v.Number), res)
	} else {
		op.Event(ctx, "conflict", fmt.Sprintf("version %d is ready but not current: current is no longer %d", v.Number, job.Expected), res)
	}
	return res, nil
}

// Capture says what to capture and how.
type Capture struct {
	// Work names the spool directory under the work dir and the holder of
	// the freeze: a save's operation id, "hibernate-<instance>".
	Work     string
	Instance versions.Instance
	// Freeze: the instance runs and is frozen for the second spool pass;
	// a stopped instance has nothing to freeze and is read without one.
	Freeze bool
	// Quota says whether the tenant's quota applies, checked here before
	// the upload and by Commit again, atomically. Only the node's own idle
	// hibernation is exempt.
	Quota versions.QuotaPolicy
	// WhileFrozen, if set, runs while the instance is frozen, right after
	// the rootfs's frozen pass (a checkpoint freezes its volumes there, so
	// both are read at one moment); an error fails the capture. Thawed, if
	// set, runs right after the thaw, whatever happened (only with Freeze);
	// its error fails the capture too.
	WhileFrozen func(ctx context.Context) error
	Thawed      func(ctx context.Context) error
}

// FreezeSteps divides a capture's freeze window: the pause (the gate's
// hold, the runtime's freezer), the rootfs's frozen spool pass, the
// caller's WhileFrozen (a checkpoint's volumes and memory image) and the
// resume. Their sum is the window but for the bookkeeping between them.
type FreezeSteps struct {
	Pause, Rootfs, WhileFrozen, Resume time.Duration
}

// Captured is an instance's rootfs changes pushed as an image, under an
// upload lease that Commit ends.
type Captured struct {
	Image                registry.Image
	Base                 versions.Version // the version whose layers the image extends
	Stats                snapshotter.SpoolStats
	Layer                snapshotter.Layer
	Compression          string
	Freeze, Encode, Push time.Duration
	// Steps is where the freeze went (zero without one).
	Steps FreezeSteps

	upload      *versions.Upload
	quota       versions.QuotaPolicy
	volumeBytes int64 // the tenant's declared volume sizes, for the commit's quota check
}

// Capture is steps 2-5 of the save path: read the instance's upper dir,
// encode it, check it against the tenant's quota (unless exempt), and push
// it on top of the version the rootfs sits on. The caller must pass the
// result to Commit.
func (s *Saver) Capture(ctx context.Context, ev Events, cp Capture) (Captured, error) {
	var c Captured
	in := cp.Instance
	proj, err := s.Store.GetProject(ctx, in.Tenant, in.Project)
	if err != nil {
		return c, err
	}
	// The new image is the layers the rootfs sits on plus one layer of
	// everything changed since: repeated saves replace that layer.
	layerVersion := in.Version
	if in.LayerVersion > 0 {
		layerVersion = in.LayerVersion
	}
	if c.Base, err = s.Store.GetVersion(ctx, in.Tenant, in.Project, layerVersion); err != nil {
		return c, err
	}
	mounts, err := s.Runtime.Mounts(ctx, in.ID)
	if err != nil {
		return c, fmt.Errorf("rootfs of %q: %w", in.ID, err)
	}
	upper, err := snapshotter.UpperDir(mounts)
	if err != nil {
		return c, fmt.Errorf("rootfs of %q: %w", in.ID, err)
	}

	dir := filepath.Join(s.WorkDir, cp.Work)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return c, err
	}
	defer os.RemoveAll(dir)

	excl, err := Exclusions(proj)
	if err != nil {
		return c, err
	}
	excludes := make([]string, len(excl))
	for i, e := range excl {
		excludes[i] = e.Path
	}
	if cp.Freeze {
		s.reportSandboxFIFOs(ctx, ev, in.ID, excludes)
	}
	c.Compression = proj.Compression
	encOpts := snapshotter.EncodeOptions{Compression: snapshotter.Compression(proj.Compression), PrioritizedFiles: proj.Prefetch}
	// The first spool pass holds large files open instead of copying them
	// and the encode reads them after the thaw (snapshotter's "Held
	// files"). If one changed after the thaw, its frozen content is gone:
	// the capture is done again, copying every file, which cannot fail so.
	// A capture with callbacks around the freeze (a checkpoint's volumes)
	// copies every file at once, so that they run once.
	copyAll := cp.WhileFrozen != nil || cp.Thawed != nil
	var encStart time.Time
	for again := false; ; again = true {
		var tp *snapshotter.TwoPass
		c.Stats, c.Freeze, tp, err = s.spool(ctx, in.ID, cp.Work, upper, dir, excludes, cp, copyAll, &c.Steps)
		if tp != nil {
			defer tp.Close()
		}
		if err != nil {
			return c, err
		}
		msg := fmt.Sprintf("read %d entries (%d bytes) while frozen for %s", c.Stats.Entries, c.Stats.Bytes, c.Freeze.Round(time.Millisecond))
		if again {
			msg += ", again, copying every file: one changed after the thaw"
		}
		ev.Event(ctx, "spooled", msg,
			map[string]any{"entries": c.Stats.Entries, "bytes": c.Stats.Bytes, "whiteouts": c.Stats.Whiteouts, "freeze_ms": c.Freeze.Milliseconds(),
				"pause_ms": c.Steps.Pause.Milliseconds(), "rootfs_frozen_ms": c.Steps.Rootfs.Milliseconds(),
				"while_frozen_ms": c.Steps.WhileFrozen.Milliseconds(), "resume_ms": c.Steps.Resume.Milliseconds()})

		encStart = time.Now()
		c.Layer, err = snapshotter.EncodeTwoPass(ctx, tp, dir, encOpts)
		_ = tp.Close() // frees the copies and held files before the upload
		if err != nil && !copyAll && errors.Is(err, snapshotter.ErrChangedAfterThaw) && ctx.Err() == nil {
			copyAll = true
			continue
		}
		if err != nil {
			return c, fmt.Errorf("encode layer: %w", err)
		}
		break
	}
	c.Encode = time.Since(encStart)
	msg := fmt.Sprintf("%s layer of %d bytes in %s", proj.Compression, c.Layer.Size, c.Encode.Round(time.Millisecond))
	if over := c.Layer.PrioritizedOver; len(over) > 0 {
		msg += fmt.Sprintf("; %d first-read files left out of the prefetch range by its bounds (first: %s)", len(over), over[0])
	}
	ev.Event(ctx, "encoded", msg,
		map[string]any{"layer_bytes": c.Layer.Size, "encode_ms": c.Encode.Milliseconds(), "prefetch_left_out": len(c.Layer.PrioritizedOver)})

	// The quota is checked on the encoded size before anything is
	// uploaded, and again, atomically, by the commit.
	c.quota = cp.Quota
	if cp.Quota != versions.QuotaExempt {
		if c.volumeBytes, err = s.Quota.Save(ctx, in.Tenant, in.Project, c.Layer.Size); err != nil {
			return c, err
		}
	}
	pushStart := time.Now()
	parent, err := s.Reg.Get(ctx, c.Base.Image)
	if err != nil {
		return c, fmt.Errorf("parent image of version %d: %w", c.Base.Number, err)
	}
	c.upload, err = s.Content.Upload(ctx, func() (err error) {
		c.Image, err = s.Reg.Append(ctx, parent, registry.LayerFile{
			Path: c.Layer.Path, MediaType: c.Layer.MediaType, Digest: c.Layer.Digest.String(), DiffID: c.Layer.DiffID.String(),
			Size: c.Layer.Size, Annotations: c.Layer.Annotations,
		}, names.ProjectRepo(in.Tenant, in.Project), "", map[string]string{
			"org.envd.project": in.Project, "org.envd.instance": in.ID, "org.envd.parent-version": fmt.Sprint(c.Base.Number),
		})
		return err
	})
	if ctx.Err() == nil {
		s.Observer.Pushed(err)
	}
	if err != nil {
		return c, fmt.Errorf("push version image: %w", err)
	}
	c.Push = time.Since(pushStart)
	ev.Event(ctx, "pushed", fmt.Sprintf("pushed and verified %s in %s", c.Image.Ref(), c.Push.Round(time.Millisecond)),
		map[string]any{"image": c.Image.Ref(), "push_ms": c.Push.Milliseconds()})
	return c, nil
}

// spool reads the instance's upper dir with a two-pass spool (step 2) into
// dir and returns it (tp, which the caller closes, also after an error) to
// encode from; no tar is written. A running instance is frozen only for the
// second pass: the first copies small files and holds large ones while the
// instance runs, the frozen one re-reads metadata and copies only what
// changed meanwhile, so the freeze grows with what changed during the save,
// not with the size of the change. A stopped instance is not frozen: nothing
// runs (a held file changed anyway fails the encode as after a thaw). The
// thaw always runs, even when ctx is canceled. work names the save (its
// operation) as a holder of the freeze; steps gets the freeze's parts.
func (s *Saver) spool(ctx context.Context, id, work, upper, dir string, excludes []string, cp Capture, copyAll bool, steps *FreezeSteps) (_ snapshotter.SpoolStats, _ time.Duration, tp *snapshotter.TwoPass, _ error) {
	opts := snapshotter.SpoolOptions{Excludes: excludes, CopyContent: copyAll}
	var err error
	if opts.IDShift, err = s.idShift(ctx, id); err != nil {
		return snapshotter.SpoolStats{}, 0, nil, err
	}
	tp, err = snapshotter.Prepare(ctx, upper, dir, opts)
	if err != nil {
		return snapshotter.SpoolStats{}, 0, nil, fmt.Errorf("read changes of %q: %w", id, err)
	}
	if !cp.Freeze { // a stopped instance
		fs, err := tp.Frozen(ctx)
		if err != nil {
			return fs.SpoolStats, 0, tp, fmt.Errorf("read changes of %q: %w", id, err)
		}
		return fs.SpoolStats, 0, tp, nil
	}

	// The freeze is held for this save alone: a user's pause during it
	// stays in force after it (see freeze.Gate).
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	holder := freeze.SaveHolder(work)
	frozen := time.Now()
	if err := s.Gate.Hold(ctx, s.Runtime, id, holder); err != nil {
		return snapshotter.SpoolStats{}, 0, tp, err
	}
	paused := time.Now()
	fs, frozenErr := tp.Frozen(ctx)
	spooled := time.Now()
	if frozenErr == nil && cp.WhileFrozen != nil {
		frozenErr = cp.WhileFrozen(ctx)
	}
	resuming := time.Now()
	resumeErr := s.Gate.Release(rctx, s.Runtime, id, holder, false)
	window := time.Since(frozen)
	*steps = FreezeSteps{Pause: paused.Sub(frozen), Rootfs: spooled.Sub(paused), WhileFrozen: resuming.Sub(spooled), Resume: time.Since(resuming)}
	if cp.Thawed != nil {
		if err := cp.Thawed(ctx); err != nil && frozenErr == nil {
			frozenErr = err
		}
	}
	if frozenErr != nil {
		return fs.SpoolStats, window, tp, fmt.Errorf("read changes of %q: %w", id, frozenErr)
	}
	if resumeErr != nil {
		return fs.SpoolStats, window, tp, resumeErr
	}
	return fs.SpoolStats, window, tp, nil
}

// idShift is how a save maps instance id's upper dir ids back to the
// container's: nil unless it runs in a user namespace (the node's --userns).
func (s *Saver) idShift(ctx context.Context, id string) (*snapshotter.IDShift, error) {
	st, err := s.Runtime.Status(ctx, id)
	if err != nil {
		return nil, err
	}
	v := st.Labels[runtime.LabelUserNS]
	if v == "" {
		return nil, nil
	}
	m, err := runtime.ParseUserNSLabel(v)
	if err != nil {
		return nil, fmt.Errorf("instance %q: %w", id, err)
	}
	return &snapshotter.IDShift{HostBase: m[0].HostID, Size: m[0].Size}, nil
}

// Commit is step 6 for a captured image: c's image, parent and sizes are
// recorded as the version commit describes, under c's upload lease (ended
// here) and checked against the quota as Capture was asked. A failed
// commit drops the pushed manifest.
func (s *Saver) Commit(ctx context.Context, c Captured, commit versions.Commit) (versions.Version, bool, error) {
	defer c.upload.End()
	commit.Image, commit.Parent, commit.SizeBytes, commit.Layers = c.Image.Ref(), c.Base.Number, c.Image.Size, len(c.Image.Layers)
	commit.LayerBytes, commit.Quota, commit.OtherStoredBytes = c.Layer.Size, c.quota, c.volumeBytes
	v, switched, err := c.upload.CommitVersion(ctx, commit)
	if err != nil {
		s.Content.Drop(ctx, c.Image)
	}
	return v, switched, err
}

// Abandon ends c's upload lease without a commit and drops its manifest:
// for a capture whose caller fails before Commit.
func (s *Saver) Abandon(ctx context.Context, c Captured) {
	s.Content.Drop(ctx, c.Image)
	c.upload.End()
}
