package builder

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/builder/buildkit"
	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/ops"
	"github.com/envd-dev/envd/envd/save"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/objstore"
	"github.com/envd-dev/envd/internal/shellwords"
	"github.com/envd-dev/envd/registry"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Store is what builds and migrations need of the store.
type Store interface {
	GetProject(ctx context.Context, tenant, name string) (versions.Project, error)
	GetVersion(ctx context.Context, tenant, project string, n int) (versions.Version, error)
	SetCurrent(ctx context.Context, tenant, project string, n, expected int) (versions.Project, error)
	FindBuild(ctx context.Context, tenant, project, key string) (versions.Version, error)
	FailVersion(ctx context.Context, tenant, project string, n int) error
	MarkValidated(ctx context.Context, tenant, project string, n int) error
	FailUnvalidatedBuilds(ctx context.Context, tenant, project, key string) error
	ListImages(ctx context.Context) ([]versions.Image, error)
	ListVersions(ctx context.Context, tenant, project string) ([]versions.Version, error)
	// VersionSpec is the declared spec version n was built from
	// (ErrNotFound: none).
	VersionSpec(ctx context.Context, tenant, project string, n int) (json.RawMessage, error)
}

// Registry is what a migration needs of the registry.
type Registry interface {
	Get(ctx context.Context, ref string) (registry.Image, error)
	Rebase(ctx context.Context, img registry.Image, baseLayers int, newBase registry.Image, targetRepo string, annotations map[string]string) (registry.Image, error)
	OpenLayer(ctx context.Context, img registry.Image, i int) (io.ReadCloser, error)
}

// Runtime runs the build's and validation's commands.
type Runtime interface {
	Exec(ctx context.Context, id string, spec runtime.ExecSpec) (int, error)
}

// Capturer is the save path's capture and commit (save.Saver).
type Capturer interface {
	Capture(ctx context.Context, ev save.Events, cp save.Capture) (save.Captured, error)
	Commit(ctx context.Context, c save.Captured, commit versions.Commit) (versions.Version, bool, error)
}

// Instances starts and removes the isolated build and trial containers
// (lifecycle.Manager).
type Instances interface {
	// CheckStart refuses what starting an instance of project from
	// version n would refuse; it changes nothing.
	CheckStart(ctx context.Context, p types.Principal, project string, n int) error
	// StartIsolated starts instance id of project from version n, without
	// volumes, its network the node's build policy, no TTL.
	StartIsolated(ctx context.Context, p types.Principal, id, project string, n int) (versions.Instance, error)
	// RemoveIsolated terminates it, whatever happened, even after the
	// caller's context ended.
	RemoveIsolated(id string)
}

// Quota is the early quota check of a new version (quota.Checker.Save).
type Quota interface {
	Save(ctx context.Context, tenant, project string, layerBytes int64) (volumeBytes int64, err error)
}

// Content is the upload lease and the drop of an uncommitted manifest
// (gc.Content).
type Content interface {
	Upload(ctx context.Context, push func() error) (*versions.Upload, error)
	Drop(ctx context.Context, img registry.Image)
}

// Bases resolves a base image given by name or repo@digest, within what
// tenant may use.
type Bases interface {
	ResolveBase(ctx context.Context, tenant, base string) (registry.Image, error)
}

// Operations starts operations and settles interrupted ones (ops.Runner).
type Operations interface {
	Start(ctx context.Context, p types.Principal, spec ops.Spec) (types.Operation, error)
	Settle(ctx context.Context, op versions.Operation, err error)
}

// Events is an operation's event log as the work sees it (*ops.Op).
type Events interface {
	Event(ctx context.Context, typ, msg string, data any)
}

// Deps are what a Builder works with.
type Deps struct {
	Store     Store
	Reg       Registry
	Runtime   Runtime
	Capturer  Capturer
	Instances Instances
	Quota     Quota
	Content   Content
	Bases     Bases
	Ops       Operations
	Log       *slog.Logger
	// Objects keeps build logs and build contexts; nil = logs are kept
	// only as the operation's events, and contexts cannot be used.
	Objects objstore.Store
	// BuildKit runs Dockerfile builds; nil = the node has none, and they
	// are refused.
	BuildKit BuildKit
}

// BuildKit runs a Dockerfile build and pushes its image (*buildkit.BuildKit).
type BuildKit interface {
	Build(ctx context.Context, s buildkit.Spec, log io.Writer) (string, error)
}

// Builder runs builds and migrations.
type Builder struct{ d Deps }

// New makes a Builder.
func New(d Deps) *Builder { return &Builder{d: d} }

// buildJob is what a build operation does. The ids of its containers are
// chosen up front, so that a build interrupted by a restart can remove them.
type buildJob struct {
	Project  string             `json:"project"`
	Request  types.BuildRequest `json:"request"`
	Expected int                `json:"expected_current"`
	Builder  string             `json:"builder_instance"`
	Trial    string             `json:"trial_instance"`
	// Key and Bases of a Dockerfile build: the images it names, resolved
	// when it was asked for (name -> repo@digest).
	Key   string            `json:"key,omitempty"`
	Bases map[string]string `json:"bases,omitempty"`
}

// buildTimeout bounds each step of a build (a package install, a
// validation command).
const buildTimeout = 30 * time.Minute

// Build starts an operation of kind "build": req.Packages are installed
// with req.Manager on version req.From in a build container (no volumes;
// the network reaches package sources as any instance's does), the change
// is saved as a version of kind build, the validation commands run in a
// trial instance of it, and only then may it become current (req.Switch).
// A failed install leaves no version; a failed validation leaves the
// version marked failed. The current version is never touched by a failure.
func (b *Builder) Build(ctx context.Context, p types.Principal, project string, req types.BuildRequest, idempotencyKey string) (types.Operation, error) {
	if err := names.Validate("project", project); err != nil {
		return types.Operation{}, err
	}
	if err := CheckSpec(req); err != nil {
		return types.Operation{}, err
	}
	if err := checkCommands(req.Validate); err != nil {
		return types.Operation{}, err
	}
	if err := b.checkContext(ctx, p.Tenant, project, req.Context); err != nil {
		return types.Operation{}, err
	}
	if req.Dockerfile != nil {
		return b.buildDockerfile(ctx, p, project, req, idempotencyKey)
	}
	if req.From < 0 {
		return types.Operation{}, fmt.Errorf("from %d: %w", req.From, errdefs.ErrInvalidArgument)
	}
	if req.From == 0 {
		req.From = 1
	}
	if err := b.d.Instances.CheckStart(ctx, p, project, req.From); err != nil {
		return types.Operation{}, err
	}
	proj, err := b.d.Store.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return types.Operation{}, err
	}
	job := buildJob{Project: project, Request: req, Expected: proj.Current, Builder: names.NewID(project), Trial: names.NewID(project)}
	return b.d.Ops.Start(ctx, p, ops.Spec{Kind: types.OpKindBuild, Target: project, Scope: project, IdempotencyKey: idempotencyKey,
		Asked: req, Job: job, Run: func(ctx context.Context, op *ops.Op) (any, error) { return b.RunBuild(ctx, op, p, job) }})
}

// RunBuild does a build.
func (b *Builder) RunBuild(ctx context.Context, op *ops.Op, p types.Principal, job buildJob) (types.BuildResult, error) {
	if job.Request.Dockerfile != nil {
		return b.runDockerfile(ctx, op, p, job)
	}
	start := time.Now()
	req := job.Request
	res := types.BuildResult{Project: job.Project, From: req.From}
	from, err := b.d.Store.GetVersion(ctx, p.Tenant, job.Project, req.From)
	if err != nil {
		return res, err
	}
	blog := b.newLog(ctx, op, p.Tenant, op.ID)
	defer blog.close()
	res.Key = SpecKey(from.Image, req)
	v, err := b.d.Store.FindBuild(ctx, p.Tenant, job.Project, res.Key)
	switch {
	case err == nil:
		res.Cached = true
		op.Event(ctx, "cached", fmt.Sprintf("version %d was built from the same base and spec", v.Number), nil)
	case errors.Is(err, errdefs.ErrNotFound):
		if v, err = b.buildVersion(ctx, op, blog, p, job.Project, job.Builder, from, req, res.Key); err != nil {
			return res, err
		}
		if res.Validated, err = b.validateIn(ctx, op, blog, p, job.Project, job.Trial, job.Request.Validate, v); err != nil {
			return res, err
		}
	default:
		return res, err
	}
	return b.switchBuilt(ctx, op, p, job, v, res, start)
}

// switchBuilt ends a build that made (or reused) v: with Switch, v becomes
// current if current is still what it was when the build was asked for.
func (b *Builder) switchBuilt(ctx context.Context, op *ops.Op, p types.Principal, job buildJob, v versions.Version, res types.BuildResult, start time.Time) (types.BuildResult, error) {
	res.Version = v.Number
	res.BuildMS = time.Since(start).Milliseconds()
	if !job.Request.Switch {
		return res, nil
	}
	_, err := b.d.Store.SetCurrent(ctx, p.Tenant, job.Project, v.Number, job.Expected)
	switch {
	case err == nil:
		res.Current = true
		op.Event(ctx, "switched", fmt.Sprintf("version %d is current", v.Number), nil)
	case errors.Is(err, errdefs.ErrConflict):
		res.Conflict = true
		op.Event(ctx, "conflict", fmt.Sprintf("current moved from %d during the build; version %d is kept, not current", job.Expected, v.Number), nil)
	default:
		return res, err
	}
	return res, nil
}

// buildVersion runs the build's steps (Plan: sources, packages,
// files, run) in a build container (id) on from and saves the change as a
// version of kind build (not current) that keeps req as its declared spec.
func (b *Builder) buildVersion(ctx context.Context, op Events, blog *buildLog, p types.Principal, project, id string, from versions.Version, req types.BuildRequest, key string) (versions.Version, error) {
	steps, err := Plan(req, b.contextReader(ctx, p.Tenant, project, req.Context))
	if err != nil {
		return versions.Version{}, err
	}
	in, err := b.d.Instances.StartIsolated(ctx, p, id, project, from.Number)
	if err != nil {
		return versions.Version{}, fmt.Errorf("build container: %w", err)
	}
	defer b.d.Instances.RemoveIsolated(id)
	op.Event(ctx, "container", fmt.Sprintf("build container %s runs version %d", in.ID, from.Number), nil)
	for _, step := range steps {
		if err := b.runStep(ctx, op, blog, in.ID, step); err != nil {
			return versions.Version{}, err
		}
	}
	work := id
	if o, ok := op.(*ops.Op); ok {
		work = o.ID
	}
	c, err := b.d.Capturer.Capture(ctx, op, save.Capture{Work: work, Instance: in, Freeze: true, Quota: versions.QuotaEnforced})
	if err != nil {
		return versions.Version{}, err
	}
	declared := req
	declared.Switch, declared.From = false, from.Number
	spec, err := json.Marshal(declared)
	if err != nil {
		return versions.Version{}, err
	}
	v, _, err := b.d.Capturer.Commit(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, InstanceID: in.ID, Generation: in.Generation, NoSwitch: true,
		Kind: "build", Message: buildMessage(key, req), Spec: spec,
		Validated: len(req.Validate) == 0,
	})
	if err != nil {
		return versions.Version{}, err
	}
	op.Event(ctx, "built", fmt.Sprintf("version %d: %s layer of %d bytes", v.Number, c.Compression, c.Layer.Size), nil)
	return v, nil
}

// buildMessage is a build version's message; it starts with the build key,
// by which an equal build is found (FindBuild).
func buildMessage(key string, req types.BuildRequest) string {
	what := []string{}
	if len(req.Packages) > 0 {
		what = append(what, req.Manager+": "+strings.Join(Normalize(req.Packages), " "))
	}
	if n := len(req.Files); n > 0 {
		what = append(what, fmt.Sprintf("%d files", n))
	}
	if n := len(req.Run); n > 0 {
		what = append(what, fmt.Sprintf("%d run steps", n))
	}
	if len(req.Packages) > 0 && len(what) == 1 {
		return fmt.Sprintf("build %s %s", key, what[0]) // as builds were named before specs had more parts
	}
	return fmt.Sprintf("build %s %s", key, strings.Join(what, "; "))
}

// checkCommands refuses an empty validation command.
func checkCommands(cmds [][]string) error {
	for _, c := range cmds {
		if len(c) == 0 || c[0] == "" {
			return fmt.Errorf("validate: an empty command: %w", errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// validateIn runs validation commands in a trial instance (id) of v and
// marks v validated when they pass; any failure, the trial's start
// included, marks v failed. It returns how many passed.
func (b *Builder) validateIn(ctx context.Context, op Events, blog *buildLog, p types.Principal, project, id string, commands [][]string, v versions.Version) (int, error) {
	if len(commands) == 0 {
		return 0, nil // committed validated
	}
	passed, err := b.runValidation(ctx, op, blog, p, project, id, commands, v)
	if err != nil {
		if ferr := b.d.Store.FailVersion(context.WithoutCancel(ctx), p.Tenant, project, v.Number); ferr != nil {
			b.d.Log.Warn("mark version failed", "project", project, "version", v.Number, "err", ferr)
		}
		return passed, fmt.Errorf("validation of version %d (marked failed): %w", v.Number, err)
	}
	if err := b.d.Store.MarkValidated(ctx, p.Tenant, project, v.Number); err != nil {
		return passed, err
	}
	op.Event(ctx, "validated", fmt.Sprintf("%d commands passed in version %d", len(commands), v.Number), nil)
	return passed, nil
}

func (b *Builder) runValidation(ctx context.Context, op Events, blog *buildLog, p types.Principal, project, id string, commands [][]string, v versions.Version) (int, error) {
	in, err := b.d.Instances.StartIsolated(ctx, p, id, project, v.Number)
	if err != nil {
		return 0, fmt.Errorf("trial instance: %w", err)
	}
	defer b.d.Instances.RemoveIsolated(id)
	for i, args := range commands {
		if err := b.runStep(ctx, op, blog, in.ID, Step{Args: args}); err != nil {
			return i, err
		}
	}
	return len(commands), nil
}

// runStep runs one command in a build or trial container; its output goes
// to the build log (blog, nil = none) unless the step is quiet. A non-zero
// exit is an error carrying the end of its output.
func (b *Builder) runStep(ctx context.Context, op Events, blog *buildLog, id string, step Step) error {
	sctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	out := &tailBuffer{max: 2000}
	var w io.Writer = out
	cmd := shellwords.Join(step.Args) // as a shell would take it back
	name := cmd
	if step.What != "" {
		name = step.What
	}
	if blog != nil {
		blog.step(name)
		if !step.Quiet {
			w = io.MultiWriter(out, blog)
		}
	}
	spec := runtime.ExecSpec{Args: step.Args, Env: step.Env, Cwd: step.Dir, Stdout: w, Stderr: w}
	if step.Stdin != nil {
		spec.Stdin = bytes.NewReader(step.Stdin)
	}
	start := time.Now()
	code, err := b.d.Runtime.Exec(sctx, id, spec)
	if blog != nil {
		blog.flush(ctx)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	tail := out.String()
	if code != 0 {
		op.Event(ctx, "step_failed", fmt.Sprintf("%s exited %d", name, code), map[string]any{"output": tail})
		return errdefs.WithDetails(fmt.Errorf("%s exited %d: %s: %w", name, code, tail, errdefs.ErrFailedPrecondition),
			map[string]any{"exit_code": code, "output": tail, "command": step.Args})
	}
	op.Event(ctx, "step", fmt.Sprintf("%s (%s)", name, time.Since(start).Round(time.Millisecond)), nil)
	return nil
}

// tailBuffer keeps the last max bytes written to it, from both output
// streams at once: the end of a failed install says why it failed.
type tailBuffer struct {
	mu   sync.Mutex
	buf  []byte
	max  int
	more bool
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
		b.more = true
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.more {
		return "..." + string(b.buf)
	}
	return string(b.buf)
}

// SettleBuild ends a build that a previous envd left unfinished: its
// containers are removed and the operation settled (a half-made install is
// not resumed; asking again builds anew or reuses a finished version).
func (b *Builder) SettleBuild(ctx context.Context, op versions.Operation) {
	var job buildJob
	if err := json.Unmarshal(op.Request, &job); err == nil {
		if job.Builder != "" { // a Dockerfile build has no build container
			b.d.Instances.RemoveIsolated(job.Builder)
		}
		b.d.Instances.RemoveIsolated(job.Trial)
		// A version it committed but did not validate must not be reused.
		if job.Request.Dockerfile != nil {
			if err := b.d.Store.FailUnvalidatedBuilds(ctx, op.Tenant, job.Project, job.Key); err != nil {
				b.d.Log.Warn("fail interrupted build", "op", op.ID, "err", err)
			}
		} else if from, err := b.d.Store.GetVersion(ctx, op.Tenant, job.Project, job.Request.From); err == nil {
			key := SpecKey(from.Image, job.Request)
			if err := b.d.Store.FailUnvalidatedBuilds(ctx, op.Tenant, job.Project, key); err != nil {
				b.d.Log.Warn("fail interrupted build", "op", op.ID, "err", err)
			}
		}
	}
	b.d.Ops.Settle(ctx, op, fmt.Errorf("envd restarted during the build; ask again: %w", errdefs.ErrFailedPrecondition))
}
