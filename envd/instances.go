package envd

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/envd-dev/envd/internal/errdefs"
	"github.com/envd-dev/envd/runtime"
	"github.com/envd-dev/envd/versions"
)

// Labels envd puts on containers, so the reconciler can tell its own.
const (
	LabelGeneration = "envd.generation"
	LabelProject    = "envd.project"
	LabelTenant     = "envd.tenant"
)

func toInstance(in versions.Instance) Instance {
	return Instance{ID: in.ID, Project: in.Project, Node: in.Node, Version: in.Version,
		LastSavedVersion: in.LastSavedVersion, Generation: in.Generation, State: in.State,
		Reason: in.Reason, Message: in.Message, Retain: in.Retain, ExpiresAt: in.ExpiresAt,
		CreatedAt: in.CreatedAt, LastTransitionAt: in.LastTransitionAt}
}

// CreateInstance starts an instance of project from req.Version or the
// current version. It returns when the instance runs (or has failed).
func (s *Service) CreateInstance(ctx context.Context, p Principal, project string, req CreateInstanceRequest) (Instance, error) {
	if err := ValidateName("project", project); err != nil {
		return Instance{}, err
	}
	if req.Version < 0 {
		return Instance{}, fmt.Errorf("version %d: %w", req.Version, errdefs.ErrInvalidArgument)
	}
	if req.Retain {
		return Instance{}, fmt.Errorf("retained writable layers: %w (not yet)", errdefs.ErrFailedPrecondition)
	}
	expires, err := parseTTL(req.TTL, time.Now(), s.cfg.DefaultTTL, s.cfg.MaxTTL)
	if err != nil {
		return Instance{}, err
	}
	proj, err := s.store.GetProject(ctx, p.Tenant, project)
	if err != nil {
		return Instance{}, err
	}
	n := req.Version
	if n == 0 {
		n = proj.Current
	}
	v, err := s.store.GetVersion(ctx, p.Tenant, project, n)
	if err != nil {
		return Instance{}, err
	}
	if v.State != "ready" {
		return Instance{}, fmt.Errorf("version %d of project %q is %s, only ready versions can be started: %w", n, project, v.State, errdefs.ErrFailedPrecondition)
	}
	in, err := s.store.CreateInstance(ctx, versions.Instance{
		ID: newID(project), Tenant: p.Tenant, Project: project, Node: s.cfg.Node, Version: n,
		State: StatePending, Reason: ReasonCreated, Message: fmt.Sprintf("starting from version %d", n),
		ExpiresAt: expires,
	})
	if err != nil {
		return Instance{}, err
	}
	if err := s.provision(ctx, in, v.Image); err != nil {
		cctx, cancel := detach(ctx, time.Minute)
		defer cancel()
		if rmErr := s.rt.Remove(cctx, in.ID); rmErr != nil {
			s.log.Warn("remove failed instance", "instance", in.ID, "err", rmErr)
		}
		if _, terr := s.store.Transition(cctx, in.ID, []string{StatePending}, StateFailed, ReasonProvisionFailed, err.Error()); terr != nil {
			s.log.Warn("record failed instance", "instance", in.ID, "err", terr)
		}
		return Instance{}, fmt.Errorf("start instance of %q from version %d: %w", project, n, err)
	}
	in, err = s.store.Transition(ctx, in.ID, []string{StatePending}, StateRunning, ReasonStarted, fmt.Sprintf("running version %d", n))
	if err != nil {
		return Instance{}, err
	}
	return toInstance(in), nil
}

// provision pulls the version's image and creates the running container.
func (s *Service) provision(ctx context.Context, in versions.Instance, image string) error {
	ref := s.reg.Addr() + "/" + image
	if err := s.rt.Pull(ctx, ref); err != nil {
		return fmt.Errorf("pull %s: %w", image, err)
	}
	return s.rt.Create(ctx, runtime.InstanceSpec{
		ID: in.ID, Image: ref, Hostname: in.Project,
		Labels: map[string]string{
			LabelGeneration: strconv.FormatInt(in.Generation, 10),
			LabelProject:    in.Project,
			LabelTenant:     in.Tenant,
		},
	})
}

// ListInstances lists the tenant's instances, of one project or all.
func (s *Service) ListInstances(ctx context.Context, p Principal, project string) ([]Instance, error) {
	if project != "" {
		if err := ValidateName("project", project); err != nil {
			return nil, err
		}
	}
	ins, err := s.store.ListInstances(ctx, p.Tenant, project)
	if err != nil {
		return nil, err
	}
	out := make([]Instance, 0, len(ins))
	for _, in := range ins {
		out = append(out, toInstance(in))
	}
	return out, nil
}

// GetInstance returns one instance.
func (s *Service) GetInstance(ctx context.Context, p Principal, id string) (Instance, error) {
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return Instance{}, err
	}
	return toInstance(in), nil
}

func (s *Service) instance(ctx context.Context, p Principal, id string) (versions.Instance, error) {
	if err := validateInstanceID(id); err != nil {
		return versions.Instance{}, err
	}
	return s.store.GetInstance(ctx, p.Tenant, id)
}

// DeleteInstance terminates an instance: its container and writable layer
// are removed; saved versions and volumes stay.
func (s *Service) DeleteInstance(ctx context.Context, p Principal, id string) (Instance, error) {
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return Instance{}, err
	}
	if in.State == StateTerminated {
		return toInstance(in), nil
	}
	if err := s.rt.Remove(ctx, id); err != nil {
		return Instance{}, fmt.Errorf("remove instance %q: %w", id, err)
	}
	in, err = s.store.Transition(ctx, id, []string{StatePending, StateRunning, StatePaused, StateStopped, StateFailed},
		StateTerminated, ReasonUserDelete, "deleted by the user")
	if err != nil {
		return Instance{}, err
	}
	return toInstance(in), nil
}

// Exec runs a command in a running instance and returns its output, each
// stream cut at MaxExecOutput.
func (s *Service) Exec(ctx context.Context, p Principal, id string, req ExecRequest) (ExecResult, error) {
	if len(req.Args) == 0 || req.Args[0] == "" {
		return ExecResult{}, fmt.Errorf("exec: args: at least the command is required: %w", errdefs.ErrInvalidArgument)
	}
	timeout := 10 * time.Minute
	if req.Timeout != "" {
		d, err := time.ParseDuration(req.Timeout)
		if err != nil || d <= 0 {
			return ExecResult{}, fmt.Errorf("exec: timeout %q: %w", req.Timeout, errdefs.ErrInvalidArgument)
		}
		timeout = d
	}
	in, err := s.instance(ctx, p, id)
	if err != nil {
		return ExecResult{}, err
	}
	if in.State != StateRunning {
		return ExecResult{}, fmt.Errorf("instance %q is %s, exec needs Running: %w", id, in.State, errdefs.ErrFailedPrecondition)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	stdout := &limitedBuffer{max: MaxExecOutput}
	stderr := &limitedBuffer{max: MaxExecOutput}
	var code int
	// A save may freeze the task between our check and the exec: containerd
	// then refuses to exec in a paused task before starting anything, and
	// the exec waits for the thaw and tries again.
	for attempt := 0; ; attempt++ {
		if err := s.frozen.wait(ctx, id); err != nil {
			return ExecResult{}, fmt.Errorf("exec in %q: waiting for a save's freeze to end: %w", id, err)
		}
		code, err = s.rt.Exec(ctx, id, runtime.ExecSpec{
			Args: req.Args, Env: req.Env, Cwd: req.Cwd,
			Stdin: strings.NewReader(req.Stdin), Stdout: stdout, Stderr: stderr,
		})
		if err == nil {
			break
		}
		if attempt < 50 {
			if st, serr := s.rt.Status(ctx, id); serr == nil && st.Task == "paused" {
				select {
				case <-time.After(100 * time.Millisecond):
					continue
				case <-ctx.Done():
				}
			}
		}
		return ExecResult{}, fmt.Errorf("exec in %q: %w", id, err)
	}
	return ExecResult{ExitCode: code, Stdout: stdout.String(), Stderr: stderr.String(),
		Truncated: stdout.truncated || stderr.truncated}, nil
}

// limitedBuffer keeps the first max bytes written and drops the rest, so a
// chatty command cannot exhaust the server's memory.
type limitedBuffer struct {
	bytes.Buffer
	max       int
	truncated bool
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		b.truncated = true
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}
