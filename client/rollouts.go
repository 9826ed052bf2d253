package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// CreateRollout starts a fleet upgrade (admin token): POST
// /v1/admin/rollouts. The answer lists the selected projects, all pending;
// follow the rollout's operation (OperationID) or poll GetRollout.
func (c *Client) CreateRollout(ctx context.Context, req types.CreateRolloutRequest, opts ...RequestOption) (types.Rollout, error) {
	var r types.Rollout
	err := c.call(ctx, http.MethodPost, "/v1/admin/rollouts", req, &r, headerOf(opts))
	return r, err
}

// ListRollouts lists rollouts with their totals, newest first: GET
// /v1/admin/rollouts.
func (c *Client) ListRollouts(ctx context.Context) ([]types.Rollout, error) {
	return get[[]types.Rollout](ctx, c, "/v1/admin/rollouts")
}

// GetRollout returns a rollout with its per-project report: GET
// /v1/admin/rollouts/{id}.
func (c *Client) GetRollout(ctx context.Context, id string) (types.Rollout, error) {
	return get[types.Rollout](ctx, c, "/v1/admin/rollouts/"+esc(id))
}

// PauseRollout: POST /v1/admin/rollouts/{id}/pause.
func (c *Client) PauseRollout(ctx context.Context, id string) (types.Rollout, error) {
	return c.rolloutAction(ctx, id, "pause")
}

// ResumeRollout: POST /v1/admin/rollouts/{id}/resume.
func (c *Client) ResumeRollout(ctx context.Context, id string) (types.Rollout, error) {
	return c.rolloutAction(ctx, id, "resume")
}

// CancelRollout: POST /v1/admin/rollouts/{id}/cancel.
func (c *Client) CancelRollout(ctx context.Context, id string) (types.Rollout, error) {
	return c.rolloutAction(ctx, id, "cancel")
}

// RollbackRollout starts switching the projects the rollout switched back
// to their old versions, by compare-and-swap: POST
// /v1/admin/rollouts/{id}/rollback. The answer is the rollback's operation
// (kind rollback; its result, once succeeded, the Rollout with its
// projects): follow it with WaitOperation. Calling it again is safe: it
// returns the rollback still running, or the one that finished it, and
// takes over one that failed or was canceled.
func (c *Client) RollbackRollout(ctx context.Context, id string) (types.Operation, error) {
	return post[types.Operation](ctx, c, http.MethodPost, "/v1/admin/rollouts/"+esc(id)+"/rollback", nil)
}

func (c *Client) rolloutAction(ctx context.Context, id, action string) (types.Rollout, error) {
	return post[types.Rollout](ctx, c, http.MethodPost, "/v1/admin/rollouts/"+esc(id)+"/"+action, nil)
}

// SetProjectValidation replaces the commands every migration of project
// runs in its trial instance: PUT /v1/projects/{p}/validation.
func (c *Client) SetProjectValidation(ctx context.Context, project string, validate [][]string) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/validation", types.ProjectValidation{Validate: validate})
}
