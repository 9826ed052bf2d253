package builder

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder/buildkit"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/tarfs"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/versions"
)

// buildDockerfile starts a Dockerfile build (Build with req.Dockerfile, its
// request checked): the images it names are resolved now, so that an
// unknown one is refused before an operation starts and a retag meanwhile
// does not change what the operation builds.
func (b *Builder) buildDockerfile(ctx context.Context, p types.Principal, project string, req types.BuildRequest, idempotencyKey string) (types.Operation, error) {
	if b.d.BuildKit == nil {
		return types.Operation{}, fmt.Errorf("dockerfile builds: this node runs no BuildKit (scripts/setup.sh installs buildkitd): %w", errdefs.ErrFailedPrecondition)
	}
	if req.Context != "" && b.d.Objects == nil {
		return types.Operation{}, fmt.Errorf("this node has no object storage for build contexts: %w", errdefs.ErrFailedPrecondition)
	}
	refs, err := DockerfileImages(req.Dockerfile.Content, req.Dockerfile.Args)
	if err != nil {
		return types.Operation{}, err
	}
	bases := map[string]string{}
	for _, name := range refs.Images {
		img, err := b.d.Bases.ResolveBase(ctx, p.Tenant, baseName(name))
		if errors.Is(err, errdefs.ErrNotFound) || errors.Is(err, errdefs.ErrInvalidArgument) {
			return types.Operation{}, fmt.Errorf("dockerfile: image %q is neither an image imported on this node (envctl image import) nor an earlier stage: %w", name, errdefs.ErrInvalidArgument)
		}
		if err != nil {
			return types.Operation{}, err
		}
		bases[baseName(name)] = img.Ref() // as BuildKit names the context: no ":latest"
	}
	proj, err := b.d.Store.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return types.Operation{}, err
	}
	job := buildJob{Project: project, Request: req, Expected: proj.Current, Trial: names.NewID(project),
		Key: DockerfileKey(req, bases), Bases: bases}
	return b.d.Ops.Start(ctx, p, ops.Spec{Kind: types.OpKindBuild, Target: project, Scope: project, IdempotencyKey: idempotencyKey,
		Asked: req, Job: job, Run: func(ctx context.Context, op *ops.Op) (any, error) { return b.RunBuild(ctx, op, p, job) }})
}

// baseName is the imported image a Dockerfile's image name means: its
// ":latest" tag is the image itself.
func baseName(name string) string {
	if !strings.Contains(name, "@") {
		return strings.TrimSuffix(name, ":latest")
	}
	return name
}

// DockerfileKey is a Dockerfile build's key: the Dockerfile, its arguments
// and target, the context and the digests of the images it names, and the
// validation. Equal keys reuse a build's version.
func DockerfileKey(req types.BuildRequest, bases map[string]string) string {
	b, _ := json.Marshal(struct {
		Dockerfile *types.DockerfileBuild `json:"dockerfile"`
		Context    string                 `json:"context"`
		Bases      map[string]string      `json:"bases"` // json sorts map keys
		Validate   [][]string             `json:"validate"`
	}{req.Dockerfile, req.Context, bases, req.Validate})
	h := sha256.Sum256(append([]byte("dockerfile\x00"), b...))
	return "sha256:" + hex.EncodeToString(h[:])
}

// runDockerfile does a Dockerfile build: BuildKit builds it (its cache, on
// the node, serves unchanged steps; its progress is the build's log) and
// pushes the image, layers as eStargz, to the project's repository under
// an upload lease; the image is committed as a version of kind build (or
// an earlier build of the same key is reused), validated in a trial
// instance, and with Switch made current.
func (b *Builder) runDockerfile(ctx context.Context, op *ops.Op, p types.Principal, job buildJob) (types.BuildResult, error) {
	start := time.Now()
	res := types.BuildResult{Project: job.Project, Key: job.Key}
	blog := b.newLog(ctx, op, p.Tenant, op.ID)
	defer blog.close()
	v, cached, validated, err := b.dockerfileVersion(ctx, op, blog, p, job, nil)
	res.Cached, res.Validated = cached, validated
	if err != nil {
		if v.Number != 0 {
			res.Version = v.Number
		}
		return res, err
	}
	return b.switchBuilt(ctx, op, p, job, v, res, start)
}

// dockerfileVersion builds job's Dockerfile and commits the image as a
// version of kind build (the request kept as its declared spec), or finds
// the version an earlier build of the same key made (cached); a new
// version is validated with the request's commands and then also (a
// migration's) more. A version that failed validation is answered with the
// error.
func (b *Builder) dockerfileVersion(ctx context.Context, op Events, blog *buildLog, p types.Principal, job buildJob, more [][]string) (v versions.Version, cached bool, validated int, err error) {
	req := job.Request
	dir, err := os.MkdirTemp("", "envd-dockerfile-")
	if err != nil {
		return v, false, 0, err
	}
	defer os.RemoveAll(dir)
	spec := buildkit.Spec{Context: filepath.Join(dir, "context"), Dockerfile: filepath.Join(dir, "dockerfile"),
		Target: req.Dockerfile.Target, Args: req.Dockerfile.Args, Bases: job.Bases, Repo: names.ProjectRepo(p.Tenant, job.Project),
		CacheNamespace: "envd/" + p.Tenant + "/" + job.Project}
	// RUN steps reach what an instance of the project reaches (its
	// egress policy, read now: a change during the build applies to the
	// next), in a group of their own, "build:<id>", like build
	// containers: isolated, and never given a tenant's brokered secrets.
	proj, err := b.d.Store.GetProject(ctx, p.Tenant, job.Project)
	if err != nil {
		return v, false, 0, err
	}
	spec.Network = &buildkit.Grant{Group: "build:" + strconv.FormatInt(proj.ID, 10), Egress: proj.Egress}
	for _, d := range []string{spec.Context, spec.Dockerfile} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return v, false, 0, err
		}
	}
	if err := os.WriteFile(filepath.Join(spec.Dockerfile, "Dockerfile"), []byte(req.Dockerfile.Content), 0o600); err != nil {
		return v, false, 0, err
	}
	if req.Context != "" {
		if err := b.extractContext(ctx, p.Tenant, job.Project, req.Context, spec.Context); err != nil {
			return v, false, 0, err
		}
	}
	if b.d.BuildKit == nil {
		return v, false, 0, fmt.Errorf("dockerfile builds: this node runs no BuildKit: %w", errdefs.ErrFailedPrecondition)
	}
	op.Event(ctx, "buildkit", fmt.Sprintf("BuildKit builds the Dockerfile (%d images from the node's registry; RUN steps' egress: %s)", len(job.Bases), egressText(proj.Egress)),
		map[string]any{"bases": job.Bases, "egress": egressText(proj.Egress)})
	var img registry.Image
	up, err := b.d.Content.Upload(ctx, func() error {
		bctx, cancel := context.WithTimeout(ctx, buildTimeout)
		defer cancel()
		blog.step("buildctl build (BuildKit)")
		digest, err := b.d.BuildKit.Build(bctx, spec, blog)
		blog.flush(ctx)
		if err != nil {
			if d := errdefs.Details(err); d != nil {
				op.Event(ctx, "step_failed", "the Dockerfile build failed", d)
			}
			return err
		}
		img, err = b.d.Reg.Get(ctx, spec.Repo+"@"+digest)
		return err
	})
	if err != nil {
		return v, false, 0, err
	}
	defer up.End()
	v, err = b.d.Store.FindBuild(ctx, p.Tenant, job.Project, job.Key)
	switch {
	case err == nil:
		b.d.Content.Drop(ctx, img) // only if no row owns it
		op.Event(ctx, "cached", fmt.Sprintf("version %d was built from the same Dockerfile, context and images", v.Number), nil)
		return v, true, 0, nil
	case !errors.Is(err, errdefs.ErrNotFound):
		return v, false, 0, err
	}
	volumeBytes, err := b.d.Quota.Save(ctx, p.Tenant, job.Project, 0)
	if err != nil {
		b.d.Content.Drop(ctx, img)
		return v, false, 0, err
	}
	declared := req
	declared.Switch = false
	specJSON, err := json.Marshal(declared)
	if err != nil {
		return v, false, 0, err
	}
	v, _, err = up.CommitVersion(ctx, versions.Commit{
		Tenant: p.Tenant, Project: job.Project, NoSwitch: true, Kind: "build", Image: img.Ref(),
		SizeBytes: img.Size, Layers: len(img.Layers), Validated: len(req.Validate)+len(more) == 0, Quota: versions.QuotaEnforced,
		OtherStoredBytes: volumeBytes, Spec: specJSON,
		Message: fmt.Sprintf("build %s Dockerfile%s", job.Key, targetNote(req.Dockerfile.Target)),
	})
	up.End()
	if err != nil {
		b.d.Content.Drop(ctx, img)
		return v, false, 0, err
	}
	op.Event(ctx, "built", fmt.Sprintf("version %d: %d layers (eStargz), %d bytes", v.Number, len(img.Layers), img.Size), nil)
	validated, err = b.validateIn(ctx, op, blog, p, job.Project, job.Trial, slices.Concat(req.Validate, more), v)
	return v, false, validated, err
}

func egressText(e string) string {
	if e == "" {
		return "open"
	}
	return e
}

func targetNote(target string) string {
	if target == "" {
		return ""
	}
	return ", target " + target
}

// extractContext writes build context digest into dir, confined to it.
func (b *Builder) extractContext(ctx context.Context, tenant, project, digest, dir string) error {
	rc, err := b.d.Objects.Get(ctx, contextKey(tenant, project, digest))
	if err != nil {
		return fmt.Errorf("build context %s: %w", digest, err)
	}
	defer rc.Close()
	if _, err := tarfs.Extract(ctx, dir, rc, tarfs.ExtractOptions{What: "the build context"}); err != nil {
		return fmt.Errorf("build context %s: %w", digest, err)
	}
	return nil
}
