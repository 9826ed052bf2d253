package apitest

import (
	"context"

	"github.com/envd-dev/envd/api/types"
)

// Rollouts is the fake RolloutCore: a rollout "ro-1" from "v1" to "v2"
// that switched project "web" of tenant "t1" (version 2 -> 3).
type Rollouts struct {
	*Recorder
	ops *Operations
}

func fakeRollout(id, state string) types.Rollout {
	return types.Rollout{ID: id, OperationID: "op-ro", State: state, From: "envd/images/v1@sha256:1", To: "envd/images/v2@sha256:2",
		FromName: "v1", ToName: "v2", WaveSize: 5, Totals: map[string]int{types.RolloutProjectSwitched: 1},
		Projects: []types.RolloutProject{{Tenant: "t1", Project: "web", Status: types.RolloutProjectSwitched, OldVersion: 2, NewVersion: 3,
			Conflicts: []string{}}},
		CreatedAt: Epoch, UpdatedAt: Epoch}
}

func (c *Rollouts) CreateRollout(ctx context.Context, p types.Principal, req types.CreateRolloutRequest, key string) (types.Rollout, error) {
	return echo(c, "CreateRollout", p, fakeRollout("ro-1", types.RolloutRunning), req, key)
}

func (c *Rollouts) ListRollouts(ctx context.Context, p types.Principal) ([]types.Rollout, error) {
	r := fakeRollout("ro-1", types.RolloutSucceeded)
	r.Projects = nil
	return echo(c, "ListRollouts", p, []types.Rollout{r})
}

func (c *Rollouts) GetRollout(ctx context.Context, p types.Principal, id string) (types.Rollout, error) {
	return echo(c, "GetRollout", p, fakeRollout(id, types.RolloutSucceeded), id)
}

func (c *Rollouts) RolloutAction(ctx context.Context, p types.Principal, id, action string) (types.Rollout, error) {
	state := map[string]string{"pause": types.RolloutPaused, "resume": types.RolloutRunning, "cancel": types.RolloutCanceled}[action]
	return echo(c, "RolloutAction", p, fakeRollout(id, state), id, action)
}

// RollbackRollout answers an operation that has finished the rollback
// already (its result the rollout, rolled_back).
func (c *Rollouts) RollbackRollout(ctx context.Context, p types.Principal, id string) (types.Operation, error) {
	op := c.ops.NewOperation(types.OpKindRollback, id)
	ro := fakeRollout(id, types.RolloutRolledBack)
	ro.RollbackOperationID = op.ID
	ro.Projects[0].Status = types.RolloutProjectRolledBack
	ro.Totals = map[string]int{types.RolloutProjectRolledBack: 1}
	c.ops.Finish(op.ID, types.OpSucceeded, ro, nil)
	return echo(c, "RollbackRollout", p, op, id)
}

func (c *Rollouts) SetProjectValidation(ctx context.Context, p types.Principal, project string, req types.ProjectValidation) (types.Project, error) {
	return echo(c, "SetProjectValidation", p, types.Project{Name: project, Current: 1, Validate: req.Validate, CreatedAt: Epoch}, project, req)
}
