package versions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// Warm pools. Terms:
//   - pool size: a project's number of started instances of its current
//     version kept ready (projects.pool_size);
//   - pooled instance: an instance row with a pool_instances row. It is
//     invisible to the tenant's reads (GetInstance with a tenant,
//     ListInstances), so nothing can run in it before it is claimed;
//   - claim: a create of the current version takes a Running pooled
//     instance of it, atomically (its pool row deleted), and sets its TTL.

// notPooled is the SQL condition that instance i is not in a pool.
const notPooled = `NOT EXISTS (SELECT 1 FROM pool_instances pi WHERE pi.instance_id = i.id)`

// SetPoolSize sets a project's pool size.
func (s Projects) SetPoolSize(ctx context.Context, tenant, project string, size int) error {
	if size < 0 || size > MaxPoolSize {
		return fmt.Errorf("pool size %d: must be 0 to %d: %w", size, MaxPoolSize, errdefs.ErrInvalidArgument)
	}
	tag, err := s.db.Exec(ctx, `UPDATE projects SET pool_size = $3, updated_at = now() WHERE tenant_id = $1 AND name = $2`, tenant, project, size)
	if err != nil {
		return translate(err, fmt.Sprintf("project %q", project))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("project %q: %w", project, errdefs.ErrNotFound)
	}
	return nil
}

// MaxPoolSize bounds a project's pool.
const MaxPoolSize = 20

// PoolSize returns a project's pool size.
func (s Projects) PoolSize(ctx context.Context, tenant, project string) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT pool_size FROM projects WHERE tenant_id = $1 AND name = $2`, tenant, project).Scan(&n)
	return n, translate(err, fmt.Sprintf("project %q", project))
}

// PoolState is what a node's pool filler needs of one project.
type PoolState struct {
	Tenant, Project string
	Size            int
	Current         int
	// Ready counts the pooled instances of the current version in any
	// state but Terminated and Failed, on every node.
	Ready int
	// Stale are this node's pooled instances that are not of the current
	// version, or Failed: they are to be removed.
	Stale []string
}

// PoolStates lists the projects that have a pool or pooled instances.
func (s Instances) PoolStates(ctx context.Context, node string) ([]PoolState, error) {
	rows, err := s.db.Query(ctx, `SELECT p.tenant_id, p.name, p.pool_size, COALESCE(p.current_version, 0),
			(SELECT count(*) FROM pool_instances pi JOIN instances i ON i.id = pi.instance_id
			  WHERE pi.project_id = p.id AND pi.version = p.current_version AND i.state NOT IN ('Terminated', 'Failed')),
			ARRAY(SELECT pi.instance_id FROM pool_instances pi JOIN instances i ON i.id = pi.instance_id
			  WHERE pi.project_id = p.id AND pi.node = $1
			    AND (pi.version IS DISTINCT FROM p.current_version OR i.state IN ('Failed', 'Terminated') OR p.pool_size = 0))
		FROM projects p
		WHERE p.pool_size > 0 OR EXISTS (SELECT 1 FROM pool_instances pi WHERE pi.project_id = p.id)
		ORDER BY p.id`, node)
	if err != nil {
		return nil, translate(err, "pool states")
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (PoolState, error) {
		var st PoolState
		err := r.Scan(&st.Tenant, &st.Project, &st.Size, &st.Current, &st.Ready, &st.Stale)
		return st, err
	})
}

// AddToPool records that instance id (about to be created on node) is a
// pooled instance of project's version.
func (s Instances) AddToPool(ctx context.Context, tenant, project, id, node string, version int) error {
	_, err := s.db.Exec(ctx, `INSERT INTO pool_instances (instance_id, project_id, version, node)
		SELECT $3, p.id, $5, $4 FROM projects p WHERE p.tenant_id = $1 AND p.name = $2`, tenant, project, id, node, version)
	return translate(err, fmt.Sprintf("pool instance %q", id))
}

// RemoveFromPool forgets a pooled instance (after it was removed, or when
// its creation failed).
func (s Instances) RemoveFromPool(ctx context.Context, id string) error {
	_, err := s.db.Exec(ctx, `DELETE FROM pool_instances WHERE instance_id = $1`, id)
	return translate(err, fmt.Sprintf("pool instance %q", id))
}

// ClaimPooled takes a Running pooled instance of project's version on node
// for the tenant, sets its expiry and returns it. None is ErrNotFound.
// Two claims never take the same instance. alive, when not nil, is asked
// about each candidate while its pool row is locked: one it rejects (its
// task is gone, though its row still says Running) is passed over and
// stays in the pool for its node to settle.
func (s Instances) ClaimPooled(ctx context.Context, tenant, project string, version int, node string, expires *time.Time, alive func(id string) bool) (Instance, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (Instance, error) {
		passed := []string{}
		for {
			var id string
			err := tx.QueryRow(ctx, `SELECT pi.instance_id FROM pool_instances pi
				JOIN instances i ON i.id = pi.instance_id JOIN projects p ON p.id = pi.project_id
				WHERE p.tenant_id = $1 AND p.name = $2 AND pi.version = $3 AND pi.node = $4 AND i.state = 'Running'
				  AND pi.instance_id <> ALL($5)
				ORDER BY pi.created_at LIMIT 1 FOR UPDATE OF pi SKIP LOCKED`, tenant, project, version, node, passed).Scan(&id)
			if errors.Is(err, pgx.ErrNoRows) {
				return Instance{}, fmt.Errorf("no pooled instance of %q version %d: %w", project, version, errdefs.ErrNotFound)
			}
			if err != nil {
				return Instance{}, translate(err, "claim a pooled instance")
			}
			if alive != nil && !alive(id) {
				passed = append(passed, id)
				continue
			}
			if _, err := tx.Exec(ctx, `DELETE FROM pool_instances WHERE instance_id = $1`, id); err != nil {
				return Instance{}, translate(err, "claim a pooled instance")
			}
			if _, err := tx.Exec(ctx, `UPDATE instances SET expires_at = $2, message = 'claimed from the pool', last_transition_at = now()
				WHERE id = $1`, id, expires); err != nil {
				return Instance{}, translate(err, fmt.Sprintf("instance %q", id))
			}
			return scanInstance(tx.QueryRow(ctx, "SELECT "+instanceCols+instanceFrom+"WHERE i.id = $1", id))
		}
	})
}
