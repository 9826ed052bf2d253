package lifecycle

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// resumeImage is where a resume's memory image is: pulled whole (the
// default) or mounted lazily (Deps.LazyMemory). The caller restores from
// dir, calls started once the restore returned (nil error) or failed, and
// removes scratch at the end.
type resumeImage struct {
	dir     string // the image directory to restore from
	scratch string // to remove once the resume is over
	lazy    MountedMemory
}

// claimMemory makes in the one instance resuming plan's checkpoint (a
// second resume of it, on any node, is refused while in lives: fencing of
// the checkpoint's processes) and makes its memory image local: pulled
// whole into a new directory, or mounted so that the restore starts before
// it is local.
func (m *Manager) claimMemory(ctx context.Context, in versions.Instance, plan instancePlan) (resumeImage, error) {
	if err := m.Store.ClaimCheckpointMemory(ctx, in.Tenant, plan.proj.Name, plan.checkpoint, in.ID); err != nil {
		return resumeImage{}, err
	}
	if err := os.MkdirAll(m.WorkDir, 0o700); err != nil {
		return resumeImage{}, err
	}
	dir, err := os.MkdirTemp(m.WorkDir, "resume-"+in.ID+"-")
	if err != nil {
		return resumeImage{}, err
	}
	start := time.Now()
	if m.LazyMemory != nil {
		lz, err := m.LazyMemory.MountMemory(ctx, plan.memory, dir)
		if err != nil {
			_ = os.RemoveAll(dir)
			return resumeImage{}, fmt.Errorf("mount memory image %s: %w", plan.memory, err)
		}
		// runsc restores from it with --background: the sandbox runs once
		// the kernel state is loaded, its pages read as they come.
		if err := os.WriteFile(filepath.Join(lz.Image(), runtime.RestoreInBackground), nil, 0o600); err != nil {
			_ = lz.Close()
			_ = os.RemoveAll(dir)
			return resumeImage{}, err
		}
		m.Log.Debug("mounted memory image", "instance", in.ID, "image", plan.memory, "ms", time.Since(start).Milliseconds())
		return resumeImage{dir: lz.Image(), scratch: dir, lazy: lz}, nil
	}
	if err := m.Memory.PullMemory(ctx, plan.memory, filepath.Join(dir, "image")); err != nil {
		_ = os.RemoveAll(dir)
		return resumeImage{}, fmt.Errorf("pull memory image %s: %w", plan.memory, err)
	}
	m.Log.Debug("pulled memory image", "instance", in.ID, "image", plan.memory, "ms", time.Since(start).Milliseconds())
	return resumeImage{dir: filepath.Join(dir, "image"), scratch: dir}, nil
}

// started ends the image's part in a restore that returned err. A lazy
// mount leaves the mount table either way; on success its fetches go on
// for the sandbox, which runsc's background page loading kills if one
// fails later (the reconciler then finds the task gone); on failure they
// stop, and a fetch error, which says more than the engine's, is returned.
func (ri resumeImage) started(m *Manager, id string, err error) error {
	if ri.lazy == nil {
		return err
	}
	if err != nil {
		_ = ri.lazy.Close()
		if ferr := ri.lazy.Err(); ferr != nil {
			return fmt.Errorf("memory image read from the registry: %w (restore: %v)", ferr, err)
		}
		return err
	}
	if derr := ri.lazy.Detach(); derr != nil {
		m.Log.Warn("detach memory image", "instance", id, "err", derr)
	}
	lz := ri.lazy
	go func() {
		<-lz.Prefetched()
		if ferr := lz.Err(); ferr != nil {
			m.Log.Warn("memory image fetch failed after the restore began: the sandbox cannot load its pages", "instance", id, "err", ferr)
		}
	}()
	return nil
}
