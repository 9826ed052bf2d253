package envd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/envd-dev/envd/api/errdefs"
	"github.com/envd-dev/envd/builder"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// buildJob is what a build operation does. The ids of its containers are
// chosen up front, so that a build interrupted by a restart can remove them.
type buildJob struct {
	Project  string             `json:"project"`
	Request  types.BuildRequest `json:"request"`
	Expected int                `json:"expected_current"`
	Builder  string             `json:"builder_instance"`
	Trial    string             `json:"trial_instance"`
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
func (s *Service) Build(ctx context.Context, p types.Principal, project string, req types.BuildRequest, idempotencyKey string) (types.Operation, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Operation{}, err
	}
	if err := builder.Check(req.Manager, req.Packages); err != nil {
		return types.Operation{}, err
	}
	if err := checkCommands(req.Validate); err != nil {
		return types.Operation{}, err
	}
	if req.From < 0 {
		return types.Operation{}, fmt.Errorf("from %d: %w", req.From, errdefs.ErrInvalidArgument)
	}
	if req.From == 0 {
		req.From = 1
	}
	if _, err := s.planInstance(ctx, p, project, types.CreateInstanceRequest{Version: req.From}); err != nil {
		return types.Operation{}, err
	}
	proj, err := s.store.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return types.Operation{}, err
	}
	job := buildJob{Project: project, Request: req, Expected: proj.Current, Builder: newID(project), Trial: newID(project)}
	return s.startOp(ctx, p, types.OpKindBuild, project, project, idempotencyKey, req, job, func(ctx context.Context, oc *opCtx) (any, error) {
		return s.runBuild(ctx, oc, p, job)
	})
}

func (s *Service) runBuild(ctx context.Context, oc *opCtx, p types.Principal, job buildJob) (types.BuildResult, error) {
	start := time.Now()
	req := job.Request
	res := types.BuildResult{Project: job.Project, From: req.From}
	from, err := s.store.GetVersion(ctx, p.Tenant, job.Project, req.From)
	if err != nil {
		return res, err
	}
	res.Key = builder.Key(from.Image, req.Manager, req.Packages, req.Validate)
	v, err := s.store.FindBuild(ctx, p.Tenant, job.Project, res.Key)
	switch {
	case err == nil:
		res.Cached = true
		oc.event(ctx, "cached", fmt.Sprintf("version %d was built from the same base and spec", v.Number), nil)
	case errors.Is(err, errdefs.ErrNotFound):
		if v, err = s.buildVersion(ctx, oc, p, job, from, res.Key); err != nil {
			return res, err
		}
		if res.Validated, err = s.validateIn(ctx, oc, p, job.Project, job.Trial, job.Request.Validate, v); err != nil {
			return res, err
		}
	default:
		return res, err
	}
	res.Version = v.Number
	res.BuildMS = time.Since(start).Milliseconds()
	if !req.Switch {
		return res, nil
	}
	_, err = s.store.SetCurrent(ctx, p.Tenant, job.Project, v.Number, job.Expected)
	switch {
	case err == nil:
		res.Current = true
		oc.event(ctx, "switched", fmt.Sprintf("version %d is current", v.Number), nil)
	case errors.Is(err, errdefs.ErrConflict):
		res.Conflict = true
		oc.event(ctx, "conflict", fmt.Sprintf("current moved from %d during the build; version %d is kept, not current", job.Expected, v.Number), nil)
	default:
		return res, err
	}
	return res, nil
}

// buildVersion installs the packages in a build container on from and
// saves the change as a version of kind build (not current).
func (s *Service) buildVersion(ctx context.Context, oc *opCtx, p types.Principal, job buildJob, from versions.Version, key string) (versions.Version, error) {
	in, err := s.startIsolated(ctx, p, job.Builder, job.Project, from.Number)
	if err != nil {
		return versions.Version{}, fmt.Errorf("build container: %w", err)
	}
	defer s.removeIsolated(job.Builder)
	oc.event(ctx, "container", fmt.Sprintf("build container %s runs version %d", in.ID, from.Number), nil)
	for _, step := range builder.Steps(job.Request.Manager, job.Request.Packages) {
		if err := s.runStep(ctx, oc, in.ID, step.Args, step.Env); err != nil {
			return versions.Version{}, err
		}
	}
	c, err := s.capture(ctx, oc, oc.id, in, true, versions.QuotaEnforced)
	if err != nil {
		return versions.Version{}, err
	}
	pkgs := strings.Join(builder.Normalize(job.Request.Packages), " ")
	v, _, err := s.commitCaptured(ctx, c, versions.Commit{
		Tenant: in.Tenant, Project: in.Project, InstanceID: in.ID, Generation: in.Generation, NoSwitch: true,
		Kind: "build", Message: fmt.Sprintf("build %s %s: %s", key, job.Request.Manager, pkgs),
		Validated: len(job.Request.Validate) == 0,
	})
	if err != nil {
		return versions.Version{}, err
	}
	oc.event(ctx, "built", fmt.Sprintf("version %d: %s layer of %d bytes", v.Number, c.compression, c.layer.Size), nil)
	return v, nil
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
func (s *Service) validateIn(ctx context.Context, oc *opCtx, p types.Principal, project, id string, commands [][]string, v versions.Version) (int, error) {
	if len(commands) == 0 {
		return 0, nil // committed validated
	}
	passed, err := s.runValidation(ctx, oc, p, project, id, commands, v)
	if err != nil {
		if ferr := s.store.FailVersion(context.WithoutCancel(ctx), p.Tenant, project, v.Number); ferr != nil {
			s.log.Warn("mark version failed", "project", project, "version", v.Number, "err", ferr)
		}
		return passed, fmt.Errorf("validation of version %d (marked failed): %w", v.Number, err)
	}
	if err := s.store.MarkValidated(ctx, p.Tenant, project, v.Number); err != nil {
		return passed, err
	}
	oc.event(ctx, "validated", fmt.Sprintf("%d commands passed in version %d", len(commands), v.Number), nil)
	return passed, nil
}

func (s *Service) runValidation(ctx context.Context, oc *opCtx, p types.Principal, project, id string, commands [][]string, v versions.Version) (int, error) {
	in, err := s.startIsolated(ctx, p, id, project, v.Number)
	if err != nil {
		return 0, fmt.Errorf("trial instance: %w", err)
	}
	defer s.removeIsolated(id)
	for i, args := range commands {
		if err := s.runStep(ctx, oc, in.ID, args, nil); err != nil {
			return i, err
		}
	}
	return len(commands), nil
}

// startIsolated starts a build or trial container: an instance of project
// from version n, without volumes, with a TTL that outlives no build.
func (s *Service) startIsolated(ctx context.Context, p types.Principal, id, project string, n int) (versions.Instance, error) {
	plan, err := s.planInstance(ctx, p, project, types.CreateInstanceRequest{Version: n})
	if err != nil {
		return versions.Instance{}, err
	}
	plan.isolated = true
	plan.expires = nil // the build removes it; a tenant's short max TTL must not cut a long install
	if _, err := s.startPlanned(ctx, p, id, plan); err != nil {
		return versions.Instance{}, err
	}
	return s.store.GetInstance(ctx, p.Tenant, id)
}

// removeIsolated terminates a build or trial container, whatever happened.
func (s *Service) removeIsolated(id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), time.Minute)
	defer cancel()
	in, err := s.store.GetInstance(ctx, "", id)
	if err != nil {
		return // never recorded
	}
	if in.State == types.StateTerminated {
		return
	}
	if _, err := s.terminate(ctx, in, types.ReasonBuildFinished, "removed when its build ended"); err != nil {
		s.log.Warn("remove build container", "instance", id, "err", err)
	}
}

// runStep runs one command in a build or trial container; a non-zero exit
// is an error carrying the end of its output.
func (s *Service) runStep(ctx context.Context, oc *opCtx, id string, args, env []string) error {
	sctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	out := &tailBuffer{max: 2000}
	start := time.Now()
	code, err := s.rt.Exec(sctx, id, runtime.ExecSpec{Args: args, Env: env, Stdout: out, Stderr: out})
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Join(args, " "), err)
	}
	tail := out.String()
	if code != 0 {
		oc.event(ctx, "step_failed", fmt.Sprintf("%s exited %d", strings.Join(args, " "), code), map[string]any{"output": tail})
		return errdefs.WithDetails(fmt.Errorf("%s exited %d: %s: %w", strings.Join(args, " "), code, tail, errdefs.ErrFailedPrecondition),
			map[string]any{"exit_code": code, "output": tail})
	}
	oc.event(ctx, "step", fmt.Sprintf("%s (%s)", strings.Join(args, " "), time.Since(start).Round(time.Millisecond)), nil)
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

// settleBuild ends a build that a previous envd left unfinished: its
// containers are removed and the operation settled (a half-made install is
// not resumed; asking again builds anew or reuses a finished version).
func (s *Service) settleBuild(ctx context.Context, op versions.Operation) {
	var job buildJob
	if err := json.Unmarshal(op.Request, &job); err == nil {
		s.removeIsolated(job.Builder)
		s.removeIsolated(job.Trial)
		// A version it committed but did not validate must not be reused.
		if from, err := s.store.GetVersion(ctx, op.Tenant, job.Project, job.Request.From); err == nil {
			key := builder.Key(from.Image, job.Request.Manager, job.Request.Packages, job.Request.Validate)
			if err := s.store.FailUnvalidatedBuilds(ctx, op.Tenant, job.Project, key); err != nil {
				s.log.Warn("fail interrupted build", "op", op.ID, "err", err)
			}
		}
	}
	s.settle(ctx, op, fmt.Errorf("envd restarted during the build; ask again: %w", errdefs.ErrFailedPrecondition))
}
