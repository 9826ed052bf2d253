package api

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// RolloutCore runs fleet upgrades (admin only) and holds what projects
// declare for them.
type RolloutCore interface {
	// CreateRollout selects the projects and starts the rollout's
	// operation. A repeated call with the same non-empty idempotencyKey
	// and request returns the same rollout.
	CreateRollout(ctx context.Context, p types.Principal, req types.CreateRolloutRequest, idempotencyKey string) (types.Rollout, error)
	ListRollouts(ctx context.Context, p types.Principal) ([]types.Rollout, error)
	GetRollout(ctx context.Context, p types.Principal, id string) (types.Rollout, error)
	// RolloutAction is "pause", "resume" or "cancel".
	RolloutAction(ctx context.Context, p types.Principal, id, action string) (types.Rollout, error)
	// RollbackRollout starts the rollback of an ended rollout as an
	// operation of kind rollback, or returns the one that stands for it
	// (still running, or the one that finished it): a retry is safe.
	RollbackRollout(ctx context.Context, p types.Principal, id string) (types.Operation, error)
	// SetProjectValidation replaces the commands every migration of the
	// project runs in its trial instance.
	SetProjectValidation(ctx context.Context, p types.Principal, project string, req types.ProjectValidation) (types.Project, error)
}

type rollouts struct{ core RolloutCore }

func (g rollouts) routes() []route {
	out := []route{
		{http.MethodPost, "/admin/rollouts", handle(http.StatusCreated, func(r in, req types.CreateRolloutRequest) (types.Rollout, error) {
			ro, err := g.core.CreateRollout(r.ctx, r.p, req, r.key())
			if err == nil {
				r.c.Header("Location", "/v1/admin/rollouts/"+ro.ID)
			}
			return ro, err
		})},
		{http.MethodGet, "/admin/rollouts", handle(http.StatusOK, func(r in, _ none) ([]types.Rollout, error) {
			return items(g.core.ListRollouts(r.ctx, r.p))
		})},
		{http.MethodGet, "/admin/rollouts/:id", handle(http.StatusOK, func(r in, _ none) (types.Rollout, error) {
			return g.core.GetRollout(r.ctx, r.p, r.param("id"))
		})},
		{http.MethodPut, "/projects/:p/validation", handle(http.StatusOK, func(r in, req types.ProjectValidation) (types.Project, error) {
			return g.core.SetProjectValidation(r.ctx, r.p, r.param("p"), req)
		})},
	}
	out = append(out, route{http.MethodPost, "/admin/rollouts/:id/rollback", started(func(r in, _ none) (types.Operation, error) {
		return g.core.RollbackRollout(r.ctx, r.p, r.param("id"))
	})})
	for _, action := range []string{"pause", "resume", "cancel"} {
		out = append(out, route{http.MethodPost, "/admin/rollouts/:id/" + action, handle(http.StatusOK, func(r in, _ none) (types.Rollout, error) {
			return g.core.RolloutAction(r.ctx, r.p, r.param("id"), action)
		})})
	}
	return out
}
