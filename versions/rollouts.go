package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Rollout is a fleet upgrade (migration 0016): the projects whose current
// version sits on From move to To, wave by wave. Its projects are
// RolloutProject rows, written as each one moves.
type Rollout struct {
	ID             string
	OperationID    string
	Tenant         string // "" = every tenant
	Selector       string // project name glob; "" = all
	From, To       string // repo@digest
	FromName       string // as asked
	ToName         string
	Validate       [][]string
	WaveSize       int
	MaxFailures    int
	DryRun         bool
	AllowConflicts bool
	State          string // types.Rollout*
	Message        string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	FinishedAt     *time.Time

	// RollbackOperationID is the operation of its newest rollback ("" =
	// none asked).
	RollbackOperationID string
}

// RolloutProject is one selected project of a rollout; see
// types.RolloutProject for the fields.
type RolloutProject struct {
	Tenant           string
	Project          string
	Seq              int
	Status           string
	OldVersion       int
	NewVersion       int
	Conflicts        []string
	DatabaseConflict bool
	Message          string
	Output           string
	Trial            string // trial instance of the newest attempt
	StartedAt        *time.Time
	FinishedAt       *time.Time

	// SwitchingTo is the version a switch of the project's current is
	// about to make current (0 = none in flight): written before the
	// compare-and-swap, cleared with the record of its outcome.
	SwitchingTo int
}

const rolloutCols = `id, operation_id, tenant_filter, selector, from_image, to_image, from_name, to_name, validate,
	wave_size, max_failures, dry_run, allow_conflicts, state, message, created_at, updated_at, finished_at, rollback_operation_id`

func scanRollout(row pgx.Row) (Rollout, error) {
	var r Rollout
	err := row.Scan(&r.ID, &r.OperationID, &r.Tenant, &r.Selector, &r.From, &r.To, &r.FromName, &r.ToName, &r.Validate,
		&r.WaveSize, &r.MaxFailures, &r.DryRun, &r.AllowConflicts, &r.State, &r.Message, &r.CreatedAt, &r.UpdatedAt, &r.FinishedAt,
		&r.RollbackOperationID)
	return r, err
}

const rolloutProjectCols = `tenant_id, project, seq, status, old_version, new_version, conflicts, database_conflict,
	message, output, trial_instance, started_at, finished_at, switching_to`

func scanRolloutProject(row pgx.Row) (RolloutProject, error) {
	var p RolloutProject
	err := row.Scan(&p.Tenant, &p.Project, &p.Seq, &p.Status, &p.OldVersion, &p.NewVersion, &p.Conflicts,
		&p.DatabaseConflict, &p.Message, &p.Output, &p.Trial, &p.StartedAt, &p.FinishedAt, &p.SwitchingTo)
	return p, err
}

// finalRollout reports whether a rollout state is final.
func finalRollout(state string) bool {
	return state != types.RolloutRunning && state != types.RolloutPaused && state != types.RolloutRollingBack
}

// CreateRollout records a rollout in state running with its selected
// projects (status pending, in the order given). Fails with
// ErrAlreadyExists for a used id.
func (s Rollouts) CreateRollout(ctx context.Context, r Rollout, projects []RolloutProject) (Rollout, error) {
	validate, err := json.Marshal(r.Validate)
	if err != nil {
		return Rollout{}, fmt.Errorf("rollout %s: validate: %v: %w", r.ID, err, errdefs.ErrInvalidArgument)
	}
	if r.Validate == nil {
		validate = []byte("[]")
	}
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (Rollout, error) {
		out, err := scanRollout(tx.QueryRow(ctx, `INSERT INTO rollouts (id, operation_id, tenant_filter, selector, from_image, to_image,
			from_name, to_name, validate, wave_size, max_failures, dry_run, allow_conflicts, state)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $11, $12, $13, 'running') RETURNING `+rolloutCols,
			r.ID, r.OperationID, r.Tenant, r.Selector, r.From, r.To, r.FromName, r.ToName, string(validate),
			r.WaveSize, r.MaxFailures, r.DryRun, r.AllowConflicts))
		if err != nil {
			return Rollout{}, translate(err, fmt.Sprintf("rollout %s", r.ID))
		}
		for i, p := range projects {
			if _, err := tx.Exec(ctx, `INSERT INTO rollout_projects (rollout_id, tenant_id, project, seq, status, old_version)
				VALUES ($1, $2, $3, $4, 'pending', $5)`, r.ID, p.Tenant, p.Project, i+1, p.OldVersion); err != nil {
				return Rollout{}, translate(err, fmt.Sprintf("rollout %s: project %s/%s", r.ID, p.Tenant, p.Project))
			}
		}
		return out, nil
	})
}

// GetRollout returns a rollout; ErrNotFound if there is none.
func (s Rollouts) GetRollout(ctx context.Context, id string) (Rollout, error) {
	r, err := scanRollout(s.db.QueryRow(ctx, "SELECT "+rolloutCols+" FROM rollouts WHERE id = $1", id))
	if err != nil {
		return Rollout{}, translate(err, fmt.Sprintf("rollout %s", id))
	}
	return r, nil
}

// ListRollouts returns the rollouts, newest first.
func (s Rollouts) ListRollouts(ctx context.Context) ([]Rollout, error) {
	rows, err := s.db.Query(ctx, "SELECT "+rolloutCols+" FROM rollouts ORDER BY created_at DESC, id")
	if err != nil {
		return nil, translate(err, "list rollouts")
	}
	rs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Rollout, error) { return scanRollout(r) })
	return rs, translate(err, "list rollouts")
}

// RolloutProjects returns a rollout's projects in selection order.
func (s Rollouts) RolloutProjects(ctx context.Context, id string) ([]RolloutProject, error) {
	rows, err := s.db.Query(ctx, "SELECT "+rolloutProjectCols+" FROM rollout_projects WHERE rollout_id = $1 ORDER BY seq", id)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("projects of rollout %s", id))
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RolloutProject, error) { return scanRolloutProject(r) })
	return ps, translate(err, fmt.Sprintf("projects of rollout %s", id))
}

// RolloutTotals counts each rollout's projects by status.
func (s Rollouts) RolloutTotals(ctx context.Context, ids []string) (map[string]map[string]int, error) {
	rows, err := s.db.Query(ctx, `SELECT rollout_id, status, count(*) FROM rollout_projects
		WHERE rollout_id = ANY($1) GROUP BY rollout_id, status`, ids)
	if err != nil {
		return nil, translate(err, "rollout totals")
	}
	defer rows.Close()
	out := map[string]map[string]int{}
	for rows.Next() {
		var id, status string
		var n int
		if err := rows.Scan(&id, &status, &n); err != nil {
			return nil, translate(err, "rollout totals")
		}
		if out[id] == nil {
			out[id] = map[string]int{}
		}
		out[id][status] = n
	}
	return out, translate(rows.Err(), "rollout totals")
}

// SetRolloutState moves a rollout from one of the states in from to state
// (with message; "" keeps the old one). Fails with ErrNotFound for an
// unknown rollout and ErrFailedPrecondition when its state is not in from
// (the message names it).
func (s Rollouts) SetRolloutState(ctx context.Context, id string, from []string, state, message string) (Rollout, error) {
	r, err := scanRollout(s.db.QueryRow(ctx, `UPDATE rollouts SET state = $3,
			message = CASE WHEN $4 = '' THEN message ELSE $4 END, updated_at = now(),
			finished_at = CASE WHEN $5 THEN COALESCE(finished_at, now()) ELSE NULL END
		WHERE id = $1 AND state = ANY($2) RETURNING `+rolloutCols, id, from, state, message, finalRollout(state)))
	if err == nil {
		return r, nil
	}
	if err != pgx.ErrNoRows {
		return Rollout{}, translate(err, fmt.Sprintf("rollout %s", id))
	}
	cur, gerr := s.GetRollout(ctx, id)
	if gerr != nil {
		return Rollout{}, gerr
	}
	return Rollout{}, fmt.Errorf("rollout %s is %s, not %v: %w", id, cur.State, from, errdefs.ErrFailedPrecondition)
}

// StartRolloutProject marks a project running with the id of its trial
// instance (a resumed rollout may start one that was running again).
func (s Rollouts) StartRolloutProject(ctx context.Context, id, tenant, project, trial string) error {
	// Only a project not yet settled: a cancel's skip must not be undone
	// by a start whose statement landed after it (a canceled context
	// returns before the server has finished the statement).
	tag, err := s.db.Exec(ctx, `UPDATE rollout_projects SET status = 'running', trial_instance = $4, started_at = now(), finished_at = NULL
		WHERE rollout_id = $1 AND tenant_id = $2 AND project = $3 AND status IN ('pending', 'running')`, id, tenant, project, trial)
	if err != nil {
		return translate(err, fmt.Sprintf("rollout %s: project %s/%s", id, tenant, project))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("rollout %s: project %s/%s is not pending: %w", id, tenant, project, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// FinishRolloutProject records how a project's part of a rollout ended.
// A failure status (validation_failed, conflicts, failed) of a real run
// also marks the project (Project.RolloutFailure), in the same
// transaction.
func (s Rollouts) FinishRolloutProject(ctx context.Context, id string, p RolloutProject, markFailure bool) error {
	if p.Conflicts == nil {
		p.Conflicts = []string{}
	}
	return WithTx(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE rollout_projects SET status = $4, new_version = $5, conflicts = $6,
				database_conflict = $7, message = $8, output = $9, finished_at = now(), switching_to = 0
			WHERE rollout_id = $1 AND tenant_id = $2 AND project = $3`,
			id, p.Tenant, p.Project, p.Status, p.NewVersion, p.Conflicts, p.DatabaseConflict, p.Message, p.Output); err != nil {
			return translate(err, fmt.Sprintf("rollout %s: project %s/%s", id, p.Tenant, p.Project))
		}
		if !markFailure {
			return nil
		}
		mark, err := json.Marshal(types.RolloutFailure{Rollout: id, Status: p.Status, Message: p.Message, At: time.Now().UTC()})
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE projects SET rollout_failure = $3::jsonb WHERE tenant_id = $1 AND name = $2`,
			p.Tenant, p.Project, string(mark))
		return translate(err, fmt.Sprintf("project %q", p.Project))
	})
}

// SetRolloutProjectStatus sets a project's status and message only (a
// rollback, a canceled or stopped rollout's pending projects), if its
// status is fromStatus (else nothing changes), and ends its switch in
// flight (SwitchingTo 0): the status records that switch's outcome.
func (s Rollouts) SetRolloutProjectStatus(ctx context.Context, id, tenant, project, fromStatus, status, message string) error {
	_, err := s.db.Exec(ctx, `UPDATE rollout_projects SET status = $5, message = $6, switching_to = 0
		WHERE rollout_id = $1 AND tenant_id = $2 AND project = $3 AND status = $4`, id, tenant, project, fromStatus, status, message)
	return translate(err, fmt.Sprintf("rollout %s: project %s/%s", id, tenant, project))
}

// SetRolloutSwitching writes that the project's current is about to be
// switched to version to (RolloutProject.SwitchingTo), with p's
// new_version and conflicts (what its record will say), before the
// compare-and-swap, if its status is status. Fails with
// ErrFailedPrecondition when the status is another (nothing written).
func (s Rollouts) SetRolloutSwitching(ctx context.Context, id string, p RolloutProject, status string, to int) error {
	if p.Conflicts == nil {
		p.Conflicts = []string{}
	}
	tag, err := s.db.Exec(ctx, `UPDATE rollout_projects SET switching_to = $5, new_version = $6, conflicts = $7, database_conflict = $8
		WHERE rollout_id = $1 AND tenant_id = $2 AND project = $3 AND status = $4`,
		id, p.Tenant, p.Project, status, to, p.NewVersion, p.Conflicts, p.DatabaseConflict)
	if err != nil {
		return translate(err, fmt.Sprintf("rollout %s: project %s/%s", id, p.Tenant, p.Project))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("rollout %s: project %s/%s is not %s: %w", id, p.Tenant, p.Project, status, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// StartRollback records op as the rollback of rollout id, in one
// transaction with the rollout's move to rolling_back, unless a rollback
// operation already stands for it: the rollout's newest rollback
// operation when that one is unfinished, or finished the rollback
// (rolled_back). Then nothing is written and that operation is returned
// with created false. A rollback whose operation failed, was canceled or
// was never recorded is taken over by op. Fails with ErrNotFound for an
// unknown rollout and ErrFailedPrecondition for a dry run or a rollout
// still running or paused.
func (s Rollouts) StartRollback(ctx context.Context, id string, op Operation) (Rollout, Operation, bool, error) {
	type started struct {
		ro      Rollout
		op      Operation
		created bool
	}
	st, err := WithTxV(ctx, s.db, func(tx pgx.Tx) (started, error) {
		ro, err := scanRollout(tx.QueryRow(ctx, "SELECT "+rolloutCols+" FROM rollouts WHERE id = $1 FOR UPDATE", id))
		if err != nil {
			return started{}, translate(err, fmt.Sprintf("rollout %s", id))
		}
		switch {
		case ro.DryRun:
			return started{}, fmt.Errorf("rollout %s is a dry run: it moved nothing: %w", id, errdefs.ErrFailedPrecondition)
		case ro.State == types.RolloutRunning || ro.State == types.RolloutPaused:
			return started{}, fmt.Errorf("rollout %s is %s: cancel it (or let it end) before a rollback: %w", id, ro.State, errdefs.ErrFailedPrecondition)
		}
		if ro.RollbackOperationID != "" && (ro.State == types.RolloutRollingBack || ro.State == types.RolloutRolledBack) {
			prev, err := scanOperation(tx.QueryRow(ctx, "SELECT "+operationCols+" FROM operations o WHERE o.id = $1", ro.RollbackOperationID))
			switch {
			case err == nil && (ro.State == types.RolloutRolledBack || prev.State == OpPending || prev.State == OpRunning):
				return started{ro: ro, op: prev}, nil
			case err != nil && !errors.Is(err, pgx.ErrNoRows):
				return started{}, translate(err, fmt.Sprintf("operation %q", ro.RollbackOperationID))
			}
		}
		got, err := scanOperation(tx.QueryRow(ctx, `INSERT INTO operations AS o
				(id, tenant_id, kind, target, state, idempotency_key, request_hash, node, request)
			VALUES ($1, $2, $3, $4, $5, NULL, $6, $7, $8)
			RETURNING `+operationCols,
			op.ID, op.Tenant, op.Kind, op.Target, OpPending, op.RequestHash, op.Node, jsonOrEmpty(op.Request)))
		if err != nil {
			return started{}, translate(err, fmt.Sprintf("operation %q", op.ID))
		}
		ro, err = scanRollout(tx.QueryRow(ctx, `UPDATE rollouts SET state = $2, rollback_operation_id = $3, updated_at = now(),
				finished_at = NULL
			WHERE id = $1 RETURNING `+rolloutCols, id, types.RolloutRollingBack, got.ID))
		if err != nil {
			return started{}, translate(err, fmt.Sprintf("rollout %s", id))
		}
		return started{ro: ro, op: got, created: true}, nil
	})
	return st.ro, st.op, st.created, err
}

// SetRolloutOperation records the operation that runs a rollout.
func (s Rollouts) SetRolloutOperation(ctx context.Context, id, opID string) error {
	_, err := s.db.Exec(ctx, `UPDATE rollouts SET operation_id = $2 WHERE id = $1`, id, opID)
	return translate(err, fmt.Sprintf("rollout %s", id))
}

// DeleteRollout deletes a rollout and its projects' rows.
func (s Rollouts) DeleteRollout(ctx context.Context, id string) error {
	_, err := s.db.Exec(ctx, `DELETE FROM rollouts WHERE id = $1`, id)
	return translate(err, fmt.Sprintf("rollout %s", id))
}

// ListAllProjects returns the projects of tenant ("" = every tenant),
// ordered by tenant and name.
func (s Projects) ListAllProjects(ctx context.Context, tenant string) ([]Project, error) {
	rows, err := s.db.Query(ctx, "SELECT "+projectCols+" FROM projects p WHERE $1 = '' OR p.tenant_id = $1 ORDER BY p.tenant_id, p.name", tenant)
	if err != nil {
		return nil, translate(err, "list projects")
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Project, error) { return scanProject(r) })
	return ps, translate(err, "list projects")
}

// SetProjectValidation replaces the commands every migration of the
// project runs in its trial instance.
func (s Projects) SetProjectValidation(ctx context.Context, tenant, name string, validate [][]string) (Project, error) {
	if validate == nil {
		validate = [][]string{}
	}
	b, err := json.Marshal(validate)
	if err != nil {
		return Project{}, fmt.Errorf("validation of project %q: %v: %w", name, err, errdefs.ErrInvalidArgument)
	}
	p, err := scanProject(s.db.QueryRow(ctx, `UPDATE projects p SET validate = $3::jsonb, updated_at = now()
		WHERE p.tenant_id = $1 AND p.name = $2 RETURNING `+projectCols, tenant, name, string(b)))
	if err != nil {
		return Project{}, translate(err, fmt.Sprintf("project %q", name))
	}
	return p, nil
}
