package checkpoint

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/registry/memimage"
	"github.com/envd-dev/envd/versions"
)

// Portable checkpoints: a checkpoint travels between installations as one
// OCI image layout tar holding its version's image (the descriptor with a
// platform, as a version export) and, for a checkpoint with memory, its
// memory image (the descriptor whose artifactType is memimage.ArtifactType,
// its subject the image's digest). Manifests keep their bytes, so the
// memory image's subject still names the image after an import, and runsc
// restores onto the rootfs it checkpointed. Volume archives do not travel:
// they are object-store objects of the node's volumes, not registry
// content.
//
// Annotations on the image's descriptor carry what the checkpoint row
// holds beside its content (annotation* below). A checkpoint's layout is
// also a version export: `envctl image import` takes it as a base image
// (the memory image is then ignored).

const (
	annotationRef          = "org.opencontainers.image.ref.name"
	annotationProject      = "dev.envd.checkpoint.project"
	annotationNumber       = "dev.envd.checkpoint.number"
	annotationMessage      = "dev.envd.checkpoint.message"
	annotationFreezeMS     = "dev.envd.checkpoint.freeze-ms"
	annotationMemFreezeMS  = "dev.envd.checkpoint.memory-freeze-ms"
	annotationVersionImage = "dev.envd.checkpoint.version-image"
)

// Portable moves content between the registry and layout tars
// (registry.Client).
type Portable interface {
	ExportManifests(ctx context.Context, ms []registry.LayoutManifest, w io.Writer) error
	MissingBytes(ctx context.Context, repo string, e registry.LayoutEntry) (int64, error)
	PushLayoutManifest(ctx context.Context, l *registry.Layout, e registry.LayoutEntry, repo string) (registry.Image, error)
	Get(ctx context.Context, ref string) (registry.Image, error)
}

// MemoryArtifacts reads stored memory images (memimage.Store).
type MemoryArtifacts interface {
	Get(ctx context.Context, repo, digest string) (memimage.Artifact, error)
}

// Content holds what an import pushes until its rows own it (gc.Content).
type Content interface {
	Upload(ctx context.Context, push func() error) (*versions.Upload, error)
	Drop(ctx context.Context, img registry.Image)
}

// errNoPortable is the error of a node that cannot move checkpoints.
func (pt *Checkpoints) errNoPortable() error {
	return fmt.Errorf("node %q has no registry client to export or import checkpoints with: %w", pt.node, errdefs.ErrUnavailable)
}

// ExportCheckpoint writes checkpoint id of project to w as a tar of an OCI
// image layout: its version's image and, if it holds memory, its memory
// image (index and chunk blobs). Nothing of the checkpoint changes.
func (pt *Checkpoints) ExportCheckpoint(ctx context.Context, p types.Principal, project string, id int, w io.Writer) error {
	if err := names.Validate("project", project); err != nil {
		return err
	}
	if pt.portable == nil {
		return pt.errNoPortable()
	}
	c, err := pt.store.GetCheckpoint(ctx, p.Tenant, project, id)
	if err != nil {
		return err
	}
	v, err := pt.store.GetVersion(ctx, p.Tenant, project, c.Version)
	if err != nil {
		return err
	}
	img, err := imageOf(v.Image)
	if err != nil {
		return err
	}
	ms := []registry.LayoutManifest{{Image: img, Platform: true, Annotations: map[string]string{
		annotationRef:          fmt.Sprintf("%s-checkpoint-%d", project, id),
		annotationProject:      project,
		annotationNumber:       strconv.Itoa(c.Number),
		annotationMessage:      c.Message,
		annotationFreezeMS:     strconv.FormatInt(c.FreezeMS, 10),
		annotationVersionImage: v.Image,
	}}}
	if c.Memory.Image != "" {
		mem, err := imageOf(c.Memory.Image)
		if err != nil {
			return err
		}
		ms = append(ms, registry.LayoutManifest{Image: mem, Annotations: map[string]string{
			annotationMemFreezeMS: strconv.FormatInt(c.Memory.FreezeMS, 10),
		}})
	}
	return pt.portable.ExportManifests(ctx, ms, w)
}

// imageOf splits "repo@digest".
func imageOf(ref string) (registry.Image, error) {
	repo, digest, ok := strings.Cut(ref, "@")
	if !ok {
		return registry.Image{}, fmt.Errorf("image %q is not repo@digest: %w", ref, errdefs.ErrFailedPrecondition)
	}
	return registry.Image{Repo: repo, Digest: digest}, nil
}

// importedLayout is what an import found in a checked layout.
type importedLayout struct {
	image    registry.LayoutEntry
	memory   *registry.LayoutEntry
	artifact memimage.Artifact // of memory, in the project's repository
}

// readCheckpointLayout picks the version image and the memory image of a
// checked layout and checks that they belong together.
func readCheckpointLayout(l *registry.Layout, repo string) (importedLayout, error) {
	var out importedLayout
	var images int
	for i := range l.Manifests {
		e := l.Manifests[i]
		switch e.Manifest.ArtifactType {
		case memimage.ArtifactType:
			if out.memory != nil {
				return out, corrupt("it holds two memory images")
			}
			out.memory = &e
		case "":
			images++
			out.image = e
		default:
			return out, corrupt("manifest %s has artifact type %q", e.Descriptor.Digest, e.Manifest.ArtifactType)
		}
	}
	if images != 1 {
		return out, corrupt("it holds %d version images, want 1", images)
	}
	if !out.image.Manifest.Config.MediaType.IsConfig() {
		return out, corrupt("the version image's config is %q", out.image.Manifest.Config.MediaType)
	}
	if out.memory == nil {
		return out, nil
	}
	m := out.memory
	rawIndex, err := l.Blob(m.Manifest.Config.Digest)
	if err != nil {
		return out, corrupt("memory index: %v", err)
	}
	a, err := memimage.Parse(repo, m.Raw, rawIndex)
	if err != nil {
		return out, corrupt("%v", err)
	}
	if a.Subject != out.image.Descriptor.Digest.String() {
		return out, corrupt("the memory image's subject is %q, not the version image %s", a.Subject, out.image.Descriptor.Digest)
	}
	out.artifact = a
	return out, nil
}

// corrupt is the error of an archive whose content does not make a
// checkpoint (registry.ReadLayout's code and reason).
func corrupt(format string, args ...any) error {
	return errdefs.WithDetails(fmt.Errorf("checkpoint archive: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...),
		map[string]any{"reason": "archive_corrupt"})
}

// ImportCheckpoint makes a checkpoint of project (which must exist) from an
// archive ExportCheckpoint wrote, on this or another installation:
//
//  1. the upload is spooled and checked whole (registry.ReadLayout: every
//     blob by size and digest; the memory image's index against its
//     chunks and its subject against the image); a truncated or corrupted
//     archive is refused (invalid_argument, reason archive_corrupt) with
//     nothing written;
//  2. what it adds to the project's repository (blobs the repository lacks,
//     manifests) is checked against the tenant's stored-bytes quota
//     before anything is pushed (quota_exceeded);
//  3. under an upload lease: the image, then the memory image, pushed as
//     they are (same digests) and verified;
//  4. one transaction records the version (kind snapshot, not current) and
//     the checkpoint owning the memory image, checked against the quota
//     again. A failure drops the manifests pushed; their blobs go at the
//     next sweep.
//
// The checkpoint gets the project's next number; its message, freeze and
// memory freeze come from the archive. It holds no volume archives.
func (pt *Checkpoints) ImportCheckpoint(ctx context.Context, p types.Principal, project string, archive io.Reader) (types.Checkpoint, error) {
	if err := names.Validate("project", project); err != nil {
		return types.Checkpoint{}, err
	}
	if pt.portable == nil {
		return types.Checkpoint{}, pt.errNoPortable()
	}
	if _, err := pt.store.GetProject(ctx, p.Tenant, project); err != nil {
		return types.Checkpoint{}, err
	}
	if err := os.MkdirAll(pt.workDir, 0o700); err != nil {
		return types.Checkpoint{}, err
	}
	dir, err := os.MkdirTemp(pt.workDir, "checkpoint-import-")
	if err != nil {
		return types.Checkpoint{}, err
	}
	defer os.RemoveAll(dir)

	// 1. Spool and check.
	spool, err := os.CreateTemp(dir, "archive-*.tar")
	if err != nil {
		return types.Checkpoint{}, err
	}
	_, err = io.Copy(spool, archive)
	if cerr := spool.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return types.Checkpoint{}, fmt.Errorf("receive checkpoint archive: %w", err)
	}
	layoutDir := filepath.Join(dir, "layout")
	if err := os.Mkdir(layoutDir, 0o700); err != nil {
		return types.Checkpoint{}, err
	}
	l, err := registry.ReadLayout(spool.Name(), layoutDir)
	if err != nil {
		return types.Checkpoint{}, err
	}
	_ = os.Remove(spool.Name())
	repo := names.ProjectRepo(p.Tenant, project)
	got, err := readCheckpointLayout(l, repo)
	if err != nil {
		return types.Checkpoint{}, err
	}

	// 2. The quota, before anything is written.
	imageNew, err := pt.portable.MissingBytes(ctx, repo, got.image)
	if err != nil {
		return types.Checkpoint{}, err
	}
	var memNew int64
	if got.memory != nil {
		if memNew, err = pt.portable.MissingBytes(ctx, repo, *got.memory); err != nil {
			return types.Checkpoint{}, err
		}
	}
	volumeBytes, err := pt.quota.Save(ctx, p.Tenant, project, imageNew+memNew)
	if err != nil {
		return types.Checkpoint{}, err
	}

	// 3. Push, image first: the memory image's subject.
	var img, mem registry.Image
	up, err := pt.content.Upload(ctx, func() error {
		var err error
		if img, err = pt.portable.PushLayoutManifest(ctx, l, got.image, repo); err != nil {
			return err
		}
		if got.memory != nil {
			if mem, err = pt.portable.PushLayoutManifest(ctx, l, *got.memory, repo); err != nil {
				pt.content.Drop(ctx, img)
				return err
			}
		}
		return nil
	})
	if err != nil {
		return types.Checkpoint{}, fmt.Errorf("import checkpoint into %q: %w", project, err)
	}
	defer up.End()
	described, err := pt.portable.Get(ctx, img.Ref())
	if err != nil {
		pt.drop(ctx, img, mem)
		return types.Checkpoint{}, corrupt("version image: %v", err)
	}

	// 4. Record.
	ann := got.image.Descriptor.Annotations
	rec := &versions.CheckpointRecord{Message: ann[annotationMessage], Node: pt.node, FreezeMS: annotationInt(ann, annotationFreezeMS)}
	if got.memory != nil {
		rec.Memory = versions.CheckpointMemory{Image: mem.Ref(), Bytes: got.artifact.Usage().Stored, NewBytes: memNew,
			FreezeMS: annotationInt(got.memory.Descriptor.Annotations, annotationMemFreezeMS)}
	}
	message := fmt.Sprintf("imported checkpoint %s of project %q", ann[annotationNumber], ann[annotationProject])
	if rec.Message != "" {
		message += ": " + rec.Message
	}
	v, _, err := up.CommitVersion(ctx, versions.Commit{
		Tenant: p.Tenant, Project: project, Kind: versions.KindSnapshot, Image: described.Ref(), Message: message,
		SizeBytes: described.Size, Layers: len(described.Layers), LayerBytes: imageNew, NoSwitch: true,
		Quota: versions.QuotaEnforced, OtherStoredBytes: volumeBytes, Checkpoint: rec,
	})
	if err != nil {
		pt.drop(ctx, img, mem)
		return types.Checkpoint{}, err
	}
	if got.memory != nil {
		pt.RecountMemory(ctx, p.Tenant, project)
	}
	cps, err := pt.store.ListCheckpoints(ctx, p.Tenant, project)
	if err != nil {
		return types.Checkpoint{}, err
	}
	for _, c := range cps {
		if c.Version == v.Number {
			return viewCheckpoint(c), nil
		}
	}
	return types.Checkpoint{}, fmt.Errorf("imported checkpoint of version %d of %q is not listed: %w", v.Number, project, errdefs.ErrNotFound)
}

// drop deletes the manifests of an import that did not commit.
func (pt *Checkpoints) drop(ctx context.Context, imgs ...registry.Image) {
	for i := len(imgs) - 1; i >= 0; i-- { // the memory image names the version image
		if imgs[i].Digest != "" {
			pt.content.Drop(ctx, imgs[i])
		}
	}
}

func annotationInt(ann map[string]string, key string) int64 {
	n, err := strconv.ParseInt(ann[key], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// RecountMemory sets what each memory image of project adds to the
// tenant's stored bytes (memory_new_bytes) to what it holds that no
// memory image of a lower-numbered checkpoint of the project holds
// (memimage.NewBytes), after a checkpoint was deleted or imported: a
// push's own count is what the repository lacked at that moment, so the
// later of two images sharing chunks was counted without them, and
// deleting the earlier one left them uncounted. A failure is logged: the
// counts stay as they were until the next recount.
func (pt *Checkpoints) RecountMemory(ctx context.Context, tenant, project string) {
	if pt.artifacts == nil {
		return
	}
	cps, err := pt.store.ListCheckpoints(ctx, tenant, project)
	if err != nil {
		pt.log.Warn("recount memory images", "project", project, "err", err)
		return
	}
	var prev [][]memimage.Blob
	for i := len(cps) - 1; i >= 0; i-- { // listed newest first
		c := cps[i]
		if c.Memory.Image == "" {
			continue
		}
		ref, err := imageOf(c.Memory.Image)
		if err != nil {
			pt.log.Warn("recount memory images", "project", project, "checkpoint", c.Number, "err", err)
			return
		}
		a, err := pt.artifacts.Get(ctx, ref.Repo, ref.Digest)
		if err != nil {
			pt.log.Warn("recount memory images", "project", project, "checkpoint", c.Number, "err", err)
			return
		}
		n := memimage.NewBytes(a, prev...)
		prev = append(prev, a.Blobs)
		if n == c.Memory.NewBytes {
			continue
		}
		if err := pt.store.SetCheckpointMemoryNewBytes(ctx, tenant, project, c.Number, n); err != nil {
			pt.log.Warn("recount memory images", "project", project, "checkpoint", c.Number, "err", err)
			return
		}
	}
}
