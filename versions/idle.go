package versions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// Idle actions (migrations 0014, 0036).
const (
	IdleStop      = "stop"
	IdleHibernate = "hibernate"
	// IdleHibernateMemory hibernates with the instance's processes (a
	// memory image), or as IdleHibernate when memory cannot be kept.
	IdleHibernateMemory = "hibernate-memory"
)

// Idle is a project's idle setting as stored. After nil = the node's
// default, 0 = never idle; Action "" = the node's default.
type Idle struct {
	After  *time.Duration
	Action string
}

// SetProjectIdle sets a project's idle setting and returns it as stored.
// The caller validates it. Fails with ErrNotFound for an unknown project.
func (s Projects) SetProjectIdle(ctx context.Context, tenant, project string, idle Idle) (Idle, error) {
	var after *int64
	if idle.After != nil {
		secs := int64((*idle.After + time.Second - 1) / time.Second)
		after = &secs
	}
	var action *string
	if idle.Action != "" {
		action = &idle.Action
	}
	out, err := scanIdle(s.db.QueryRow(ctx, `UPDATE projects SET idle_after_s = $3, idle_action = $4, updated_at = now()
		WHERE tenant_id = $1 AND name = $2 RETURNING idle_after_s, idle_action`, tenant, project, after, action))
	if err != nil {
		return Idle{}, translate(err, fmt.Sprintf("idle setting of project %q", project))
	}
	return out, nil
}

// ProjectIdle returns a project's idle setting.
func (s Projects) ProjectIdle(ctx context.Context, tenant, project string) (Idle, error) {
	out, err := scanIdle(s.db.QueryRow(ctx, `SELECT idle_after_s, idle_action FROM projects WHERE tenant_id = $1 AND name = $2`, tenant, project))
	if err != nil {
		return Idle{}, translate(err, fmt.Sprintf("idle setting of project %q", project))
	}
	return out, nil
}

// ProjectIdles returns the idle settings of tenant's projects that have
// one, by project name.
func (s Projects) ProjectIdles(ctx context.Context, tenant string) (map[string]Idle, error) {
	rows, err := s.db.Query(ctx, `SELECT name, idle_after_s, idle_action FROM projects
		WHERE tenant_id = $1 AND (idle_after_s IS NOT NULL OR idle_action IS NOT NULL)`, tenant)
	if err != nil {
		return nil, translate(err, "list idle settings")
	}
	defer rows.Close()
	out := map[string]Idle{}
	for rows.Next() {
		var (
			name   string
			after  *int64
			action *string
		)
		if err := rows.Scan(&name, &after, &action); err != nil {
			return nil, translate(err, "list idle settings")
		}
		out[name] = idleOf(after, action)
	}
	return out, translate(rows.Err(), "list idle settings")
}

func scanIdle(row pgx.Row) (Idle, error) {
	var (
		after  *int64
		action *string
	)
	if err := row.Scan(&after, &action); err != nil {
		return Idle{}, err
	}
	return idleOf(after, action), nil
}

func idleOf(after *int64, action *string) Idle {
	var out Idle
	if after != nil {
		d := time.Duration(*after) * time.Second
		out.After = &d
	}
	if action != nil {
		out.Action = *action
	}
	return out
}

// SetMaxIdleAfter sets the longest idle setting of tenant's projects (0 =
// no maximum), creating the tenant if needed.
func (s Tenants) SetMaxIdleAfter(ctx context.Context, tenant string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("max idle of %q: negative: %w", tenant, errdefs.ErrInvalidArgument)
	}
	secs := int64(0)
	if d > 0 {
		secs = max(1, int64(d/time.Second)) // never longer than asked
	}
	return WithTx(ctx, s.db, func(tx pgx.Tx) error {
		if err := ensureTenant(ctx, tx, tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE tenants SET max_idle_after_s = NULLIF($2::bigint, 0) WHERE id = $1`, tenant, secs)
		return translate(err, fmt.Sprintf("max idle of %q", tenant))
	})
}

// MaxIdleAfter returns tenant's longest idle setting; 0 = no maximum.
func (s Tenants) MaxIdleAfter(ctx context.Context, tenant string) (time.Duration, error) {
	var secs *int64
	err := s.db.QueryRow(ctx, "SELECT max_idle_after_s FROM tenants WHERE id = $1", tenant).Scan(&secs)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && secs == nil) {
		return 0, nil
	}
	if err != nil {
		return 0, translate(err, fmt.Sprintf("max idle of %q", tenant))
	}
	return time.Duration(*secs) * time.Second, nil
}

// RecordActivity raises the last activity of each instance in at to the
// time given, never lowering it (nodes flush in any order). Unknown ids
// are ignored.
func (s Instances) RecordActivity(ctx context.Context, at map[string]time.Time) error {
	if len(at) == 0 {
		return nil
	}
	ids := make([]string, 0, len(at))
	times := make([]time.Time, 0, len(at))
	for id, t := range at {
		ids, times = append(ids, id), append(times, t)
	}
	_, err := s.db.Exec(ctx, `UPDATE instances i SET last_activity_at = GREATEST(i.last_activity_at, a.at)
		FROM unnest($1::text[], $2::timestamptz[]) AS a(id, at) WHERE i.id = a.id`, ids, times)
	return translate(err, "record instance activity")
}

// IdleState is what decides an instance's idle action: its row, the newest
// flushed activity, its project's setting and its tenant's maximum.
type IdleState struct {
	Instance     Instance
	LastActivity *time.Time // nil = none flushed
	Idle         Idle
	MaxIdleAfter time.Duration // 0 = none
}

const idleCols = "SELECT " + instanceCols + `, i.last_activity_at, p.idle_after_s, p.idle_action, t.max_idle_after_s` +
	instanceFrom + "LEFT JOIN tenants t ON t.id = i.tenant_id "

func collectIdle(rows pgx.Rows, err error) ([]IdleState, error) {
	if err != nil {
		return nil, translate(err, "list idle states")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (IdleState, error) {
		var (
			st     IdleState
			in     = &st.Instance
			after  *int64
			action *string
			maxS   *int64
		)
		err := r.Scan(&in.ID, &in.Tenant, &in.Project, &in.Node, &in.Version, &in.LastSavedVersion, &in.Generation,
			&in.State, &in.Reason, &in.Message, &in.Retain, &in.ExpiresAt, &in.CreatedAt, &in.LastTransitionAt, &in.Spec,
			&in.LayerVersion, &in.HibernatedVersion, &in.Placement, &in.HibernatedCheckpoint, &in.MemoryNotKept,
			&st.LastActivity, &after, &action, &maxS)
		st.Idle = idleOf(after, action)
		if maxS != nil {
			st.MaxIdleAfter = time.Duration(*maxS) * time.Second
		}
		return st, err
	})
	return out, translate(err, "list idle states")
}

// IdleCandidates lists node's Running instances with what decides their
// idle action.
func (s Instances) IdleCandidates(ctx context.Context, node string) ([]IdleState, error) {
	return collectIdle(s.db.Query(ctx, idleCols+"WHERE i.node = $1 AND i.state = 'Running' AND "+notPooled+" ORDER BY i.id", node))
}

// IdleStates returns what decides the idle action of each of ids, by id.
func (s Instances) IdleStates(ctx context.Context, ids []string) (map[string]IdleState, error) {
	sts, err := collectIdle(s.db.Query(ctx, idleCols+"WHERE i.id = ANY($1)", ids))
	if err != nil {
		return nil, err
	}
	out := make(map[string]IdleState, len(sts))
	for _, st := range sts {
		out[st.Instance.ID] = st
	}
	return out, nil
}
