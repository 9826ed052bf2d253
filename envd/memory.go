package envd

import (
	"context"
	"fmt"
	"strings"

	"github.com/envd-dev/envd/envd/checkpoint"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry/memimage"
	"github.com/envd-dev/envd/registry/memimage/lazyfs"
	"github.com/envd-dev/envd/versions"
)

// memImages stores checkpoints' memory images in the node's registry
// (registry/memimage); it is checkpoint.MemoryImages and
// lifecycle.MemoryImages.
type memImages struct {
	st    *memimage.Store
	local *localMemory // the images this node wrote; nil: none kept
}

// newMemImages is nil (no memory checkpoints) when reg is not a registry
// client (a test's fake) or rt has no memory engine.
func newMemImages(reg ImageStore, rt Runtime, local *localMemory) (*memImages, checkpoint.MemoryEngine) {
	engine, ok := rt.(checkpoint.MemoryEngine)
	st := memoryArtifacts(reg)
	if !ok || st == nil {
		return nil, nil
	}
	return &memImages{st: st, local: local}, engine
}

// memoryArtifacts reads memory images in reg, also on a node without a
// memory engine (an export or a recount of imported ones); nil when reg is
// not a registry client.
func memoryArtifacts(reg ImageStore) *memimage.Store {
	c, ok := reg.(memimage.Registry)
	if !ok {
		return nil
	}
	st, err := memimage.New(c)
	if err != nil {
		return nil
	}
	return st
}

// PushMemory pushes dir as the memory image of the version whose manifest
// is subject in repo. Chunks an earlier image of repo holds are not sent
// again, nor counted in NewBytes.
func (m *memImages) PushMemory(ctx context.Context, dir, repo, subject string) (versions.CheckpointMemory, error) {
	res, err := m.st.Push(ctx, memimage.PushRequest{Dir: dir, Repo: repo, Subject: subject,
		Annotations: map[string]string{"dev.envd.memory.engine": "runsc"}})
	if err != nil {
		return versions.CheckpointMemory{}, err
	}
	m.local.keep(res.Artifact.Digest, dir)
	return versions.CheckpointMemory{Image: res.Artifact.Ref(), Bytes: res.Artifact.Usage().Stored, NewBytes: res.Uploaded}, nil
}

// PullMemory pulls memory image ("repo@digest") whole into dir, which must
// not exist; an image this node wrote and still keeps is linked from its
// cache instead (localMemory).
func (m *memImages) PullMemory(ctx context.Context, image, dir string) error {
	repo, digest, ok := strings.Cut(image, "@")
	if !ok {
		return fmt.Errorf("memory image %q is not repo@digest: %w", image, errdefs.ErrFailedPrecondition)
	}
	a, err := m.st.Get(ctx, repo, digest)
	if err != nil {
		return err
	}
	if m.local.take(a, dir) {
		return nil
	}
	return m.st.Pull(ctx, a, dir)
}

// How a resume gets its memory image (Config.MemoryRestore).
const (
	MemoryRestoreFull = "full"
	MemoryRestoreLazy = "lazy"
)

// lazyMemoryOf is the lifecycle's LazyMemory for mode: nil for the full
// pull (or a node that resumes nothing).
func lazyMemoryOf(mode string, mem lifecycle.MemoryImages) (lifecycle.LazyMemory, error) {
	switch mode {
	case "", MemoryRestoreFull:
		return nil, nil
	case MemoryRestoreLazy:
		if m, ok := mem.(*memImages); ok {
			return m, nil
		}
		return nil, nil
	}
	return nil, fmt.Errorf("memory restore %q: one of %q, %q: %w", mode, MemoryRestoreFull, MemoryRestoreLazy, errdefs.ErrInvalidArgument)
}

// MountMemory mounts memory image ("repo@digest") under dir for a restore
// that starts before it is local (registry/memimage/lazyfs). The fetches
// are not bound to ctx: the sandbox reads on after the request that
// resumed it; Close stops them.
func (m *memImages) MountMemory(ctx context.Context, image, dir string) (lifecycle.MountedMemory, error) {
	repo, digest, ok := strings.Cut(image, "@")
	if !ok {
		return nil, fmt.Errorf("memory image %q is not repo@digest: %w", image, errdefs.ErrFailedPrecondition)
	}
	a, err := m.st.Get(ctx, repo, digest)
	if err != nil {
		return nil, err
	}
	return lazyfs.Open(context.WithoutCancel(ctx), m.st, a, dir)
}

// lifecycleMemory is newMemImages for the lifecycle (resumes, and
// hibernations with memory); nil interfaces when there is none.
func lifecycleMemory(reg ImageStore, rt Runtime, local *localMemory) (lifecycle.MemoryImages, lifecycle.MemoryEngine) {
	if mem, engine := newMemImages(reg, rt, local); mem != nil {
		return mem, engine
	}
	return nil, nil
}
