package envd

import (
	"context"
	"fmt"
	"time"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd/lifecycle"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Idle stop, as projects and admins set it. The idle reaper and the wake
// are lifecycle's (envd/lifecycle/idle.go); TouchInstance and WakeInstance
// are the instances part's (lifecycle.Instances).

// Reasons of idle stop: the instance's idle action ran (ReasonIdle), or
// failed and the instance runs on (ReasonIdleFailed, the error as its
// message).
const (
	ReasonIdle       = lifecycle.ReasonIdle
	ReasonIdleFailed = lifecycle.ReasonIdleFailed
)

// DefaultWakeWait is how long a wake on access waits for its instance to
// run before answering 503 waking.
const DefaultWakeWait = time.Minute

// MinIdleAfter is the shortest idle setting: shorter ones would stop
// instances between two keystrokes.
const MinIdleAfter = time.Second

// parseIdle checks an idle setting against the tenant's maximum: After ""
// = the node's default, "0" (or "never") = never idle, else a Go duration
// of at least MinIdleAfter; Action "", stop, hibernate or hibernate-memory. A setting above
// the maximum, or "never" under one, is refused (400, with the maximum in
// the details).
func (s *Service) parseIdle(ctx context.Context, tenant string, req types.IdleSetting) (versions.Idle, error) {
	var out versions.Idle
	switch req.Action {
	case "", types.IdleActionStop, types.IdleActionHibernate, types.IdleActionHibernateMemory:
		out.Action = req.Action
	default:
		return out, fmt.Errorf("idle action %q: must be stop, hibernate or hibernate-memory: %w", req.Action, errdefs.ErrInvalidArgument)
	}
	if req.After == "" {
		return out, nil
	}
	var d time.Duration
	if req.After != "0" && req.After != "never" {
		var err error
		if d, err = time.ParseDuration(req.After); err != nil || d < MinIdleAfter {
			return out, fmt.Errorf("idle after %q: a Go duration of at least %s (such as 30m), or 0 for never: %w", req.After, MinIdleAfter, errdefs.ErrInvalidArgument)
		}
	}
	maxIdle, err := s.store.Tenants.MaxIdleAfter(ctx, tenant)
	if err != nil {
		return out, err
	}
	if maxIdle > 0 && (d == 0 || d > maxIdle) {
		asked := req.After
		if d == 0 {
			asked = "never"
		}
		return out, errdefs.WithDetails(fmt.Errorf("idle after %s: above the tenant's maximum of %s: %w", asked, maxIdle, errdefs.ErrInvalidArgument),
			map[string]any{"max_idle_after": maxIdle.String(), "idle_after": req.After})
	}
	out.After = &d
	return out, nil
}

// SetProjectIdle sets a project's idle setting (PUT /v1/projects/{p}/idle).
// It applies to the project's running instances at the idle reaper's next
// look, on every node: an instance idle longer than a new, shorter
// setting is stopped then. An empty setting returns to the node's default.
func (s *Service) SetProjectIdle(ctx context.Context, p types.Principal, project string, req types.IdleSetting) (types.Project, error) {
	if err := ValidateName("project", project); err != nil {
		return types.Project{}, err
	}
	idle, err := s.parseIdle(ctx, p.Tenant, req)
	if err != nil {
		return types.Project{}, err
	}
	if _, err := s.store.Projects.SetProjectIdle(ctx, p.Tenant, project, idle); err != nil {
		return types.Project{}, err
	}
	return s.GetProject(ctx, p, project)
}

// withProjectIdle fills the project's own idle setting.
func (s *Service) withProjectIdle(ctx context.Context, tenant string, proj types.Project) (types.Project, error) {
	idle, err := s.store.Projects.ProjectIdle(ctx, tenant, proj.Name)
	if err != nil {
		return types.Project{}, err
	}
	proj.Idle = idleSetting(idle)
	return proj, nil
}

func idleSetting(idle versions.Idle) *types.IdleSetting {
	if idle.After == nil && idle.Action == "" {
		return nil
	}
	out := &types.IdleSetting{Action: idle.Action}
	if idle.After != nil {
		out.After = "0"
		if *idle.After > 0 {
			out.After = idle.After.String()
		}
	}
	return out
}

// setIdleMax sets the tenant's maximum idle setting from a quota.
func (s *Service) setIdleMax(ctx context.Context, tenant string, q types.Quota) (time.Duration, error) {
	var d time.Duration
	if q.MaxIdleAfter != "" {
		var err error
		if d, err = time.ParseDuration(q.MaxIdleAfter); err != nil || d < MinIdleAfter {
			return 0, fmt.Errorf("max_idle_after %q: a Go duration of at least %s: %w", q.MaxIdleAfter, MinIdleAfter, errdefs.ErrInvalidArgument)
		}
	}
	if err := s.store.Tenants.SetMaxIdleAfter(ctx, tenant, d); err != nil {
		return 0, err
	}
	return s.store.Tenants.MaxIdleAfter(ctx, tenant)
}

func withIdleMax(q types.Quota, d time.Duration) types.Quota {
	if d > 0 {
		q.MaxIdleAfter = d.String()
	}
	return q
}

// idleDefaults sets and checks the idle settings of cfg.
func idleDefaults(cfg *Config) error {
	if cfg.IdleAfter < 0 || (cfg.IdleAfter > 0 && cfg.IdleAfter < MinIdleAfter) {
		return fmt.Errorf("idle after %s: 0 (never) or at least %s: %w", cfg.IdleAfter, MinIdleAfter, errdefs.ErrInvalidArgument)
	}
	switch cfg.IdleAction {
	case "":
		cfg.IdleAction = types.IdleActionStop
	case types.IdleActionStop, types.IdleActionHibernate, types.IdleActionHibernateMemory:
	default:
		return fmt.Errorf("idle action %q: stop, hibernate or hibernate-memory: %w", cfg.IdleAction, errdefs.ErrInvalidArgument)
	}
	if cfg.IdleInterval <= 0 {
		cfg.IdleInterval = 10 * time.Second
	}
	if cfg.ActivityFlush <= 0 {
		cfg.ActivityFlush = 10 * time.Second
	}
	if cfg.WakeWait <= 0 {
		cfg.WakeWait = DefaultWakeWait
	}
	return nil
}
