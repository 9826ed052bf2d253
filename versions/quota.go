package versions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Quota limits what a tenant may use; a zero field is no limit.
type Quota struct {
	MaxInstances   int           // live instances at once
	MaxVersions    int           // versions of any one project
	MaxStoredBytes int64         // layers added by versions + declared volume sizes
	MaxTTL         time.Duration // longest TTL; with it, "none" is refused
}

// SetQuota sets tenant's quota, creating the tenant if needed, and returns
// it as stored.
func (s Tenants) SetQuota(ctx context.Context, tenant string, q Quota) (Quota, error) {
	if q.MaxInstances < 0 || q.MaxVersions < 0 || q.MaxStoredBytes < 0 || q.MaxTTL < 0 {
		return Quota{}, fmt.Errorf("quota of %q: negative limit: %w", tenant, errdefs.ErrInvalidArgument)
	}
	ttl := int64(0)
	if q.MaxTTL > 0 {
		ttl = max(1, int64((q.MaxTTL+time.Second-1)/time.Second)) // never shorter than asked
	}
	err := WithTx(ctx, s.db, func(tx pgx.Tx) error {
		if err := ensureTenant(ctx, tx, tenant); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE tenants SET max_instances = NULLIF($2::int, 0), max_versions = NULLIF($3::int, 0),
			max_stored_bytes = NULLIF($4::bigint, 0), max_ttl_s = NULLIF($5::bigint, 0) WHERE id = $1`,
			tenant, q.MaxInstances, q.MaxVersions, q.MaxStoredBytes, ttl)
		return translate(err, fmt.Sprintf("quota of %q", tenant))
	})
	if err != nil {
		return Quota{}, err
	}
	return s.Quota(ctx, tenant)
}

// Quota returns tenant's quota; a tenant without a row has no limits.
func (s Tenants) Quota(ctx context.Context, tenant string) (Quota, error) {
	var (
		inst, vers *int32
		bytes, ttl *int64
	)
	err := s.db.QueryRow(ctx, "SELECT max_instances, max_versions, max_stored_bytes, max_ttl_s FROM tenants WHERE id = $1", tenant).
		Scan(&inst, &vers, &bytes, &ttl)
	if errors.Is(err, pgx.ErrNoRows) {
		return Quota{}, nil
	}
	if err != nil {
		return Quota{}, translate(err, fmt.Sprintf("quota of %q", tenant))
	}
	var q Quota
	if inst != nil {
		q.MaxInstances = int(*inst)
	}
	if vers != nil {
		q.MaxVersions = int(*vers)
	}
	if bytes != nil {
		q.MaxStoredBytes = *bytes
	}
	if ttl != nil {
		q.MaxTTL = time.Duration(*ttl) * time.Second
	}
	return q, nil
}

// computeStates are the instance states that hold compute: they count
// against MaxInstances.
var computeStates = []types.InstanceState{types.StatePending, types.StateRunning, types.StatePausing, types.StatePaused, types.StateResuming, types.StateStopping}

// Usage is what a tenant uses of its quota, from the database (volume sizes
// live in project specs and are added by the caller).
type Usage struct {
	Instances  int            // live instances
	LayerBytes int64          // layers added by versions not being deleted (failed ones too)
	Versions   map[string]int // per project, versions not being deleted (failed ones too)
	// CheckpointBytes is what the archives of its checkpoints store (their
	// versions' layers are in LayerBytes).
	CheckpointBytes int64
}

// Usage returns tenant's usage.
func (s Tenants) Usage(ctx context.Context, tenant string) (Usage, error) {
	u := Usage{Versions: map[string]int{}}
	err := s.db.QueryRow(ctx, "SELECT count(*) FROM instances WHERE tenant_id = $1 AND state = ANY($2)", tenant, stateNames(computeStates)).Scan(&u.Instances)
	if err != nil {
		return Usage{}, translate(err, fmt.Sprintf("usage of %q", tenant))
	}
	rows, err := s.db.Query(ctx, `SELECT p.name, count(v.number), COALESCE(sum(v.layer_bytes), 0)::bigint
		FROM projects p LEFT JOIN versions v ON v.project_id = p.id AND v.state <> 'deleting'
		WHERE p.tenant_id = $1 GROUP BY p.name`, tenant)
	if err != nil {
		return Usage{}, translate(err, fmt.Sprintf("usage of %q", tenant))
	}
	defer rows.Close()
	for rows.Next() {
		var (
			name  string
			n     int
			bytes int64
		)
		if err := rows.Scan(&name, &n, &bytes); err != nil {
			return Usage{}, translate(err, fmt.Sprintf("usage of %q", tenant))
		}
		u.Versions[name] = n
		u.LayerBytes += bytes
	}
	if err := rows.Err(); err != nil {
		return Usage{}, translate(err, fmt.Sprintf("usage of %q", tenant))
	}
	rows.Close()
	err = s.db.QueryRow(ctx, checkpointArchiveBytes, tenant).Scan(&u.CheckpointBytes)
	return u, translate(err, fmt.Sprintf("usage of %q", tenant))
}

// checkInstanceQuota refuses one more live instance of tenant beyond its
// MaxInstances. The tenant's row, locked, serializes concurrent creations,
// so two cannot both take the last place.
func checkInstanceQuota(ctx context.Context, tx pgx.Tx, tenant string) error {
	var limit *int32
	err := tx.QueryRow(ctx, "SELECT max_instances FROM tenants WHERE id = $1 FOR UPDATE", tenant).Scan(&limit)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && limit == nil) {
		return nil
	}
	if err != nil {
		return translate(err, fmt.Sprintf("quota of %q", tenant))
	}
	var used int
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM instances WHERE tenant_id = $1 AND state = ANY($2)", tenant, stateNames(computeStates)).Scan(&used); err != nil {
		return translate(err, fmt.Sprintf("usage of %q", tenant))
	}
	if used >= int(*limit) {
		return QuotaError("instances", int64(*limit), int64(used), 1)
	}
	return nil
}

// QuotaPolicy says whether a commit is checked against the tenant's quota.
type QuotaPolicy int

const (
	// QuotaEnforced checks the commit: every save, build, migration and
	// user-requested hibernation.
	QuotaEnforced QuotaPolicy = iota
	// QuotaExempt skips the check: only for the node's own idle
	// hibernation, which frees the node's disk rather than asking for more
	// (a refusal would make it re-read the layer on every pass).
	QuotaExempt
)

// checkCommitQuota refuses one more version of project pid beyond the
// tenant's MaxVersions, or c.LayerBytes beyond its MaxStoredBytes (what
// its versions not being deleted added, failed ones included, plus
// c.OtherStoredBytes). The tenant's row, locked, serializes concurrent
// commits (and creations, checkInstanceQuota) of the tenant.
func checkCommitQuota(ctx context.Context, tx pgx.Tx, c Commit, pid int64) error {
	var maxVersions *int32
	var maxBytes *int64
	err := tx.QueryRow(ctx, "SELECT max_versions, max_stored_bytes FROM tenants WHERE id = $1 FOR NO KEY UPDATE", c.Tenant).
		Scan(&maxVersions, &maxBytes)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && maxVersions == nil && maxBytes == nil) {
		return nil
	}
	if err != nil {
		return translate(err, fmt.Sprintf("quota of %q", c.Tenant))
	}
	if maxVersions != nil {
		var n int
		if err := tx.QueryRow(ctx, "SELECT count(*) FROM versions WHERE project_id = $1 AND state <> 'deleting'", pid).Scan(&n); err != nil {
			return translate(err, fmt.Sprintf("usage of %q", c.Tenant))
		}
		if n >= int(*maxVersions) {
			return QuotaError("versions", int64(*maxVersions), int64(n), 1)
		}
	}
	if maxBytes != nil {
		var used int64
		err := tx.QueryRow(ctx, `SELECT COALESCE(sum(v.layer_bytes), 0)::bigint FROM versions v JOIN projects p ON p.id = v.project_id
			WHERE p.tenant_id = $1 AND v.state <> 'deleting'`, c.Tenant).Scan(&used)
		if err != nil {
			return translate(err, fmt.Sprintf("usage of %q", c.Tenant))
		}
		var archived int64
		if err := tx.QueryRow(ctx, checkpointArchiveBytes, c.Tenant).Scan(&archived); err != nil {
			return translate(err, fmt.Sprintf("usage of %q", c.Tenant))
		}
		used += c.OtherStoredBytes + archived
		if asked := c.LayerBytes + c.Checkpoint.archiveBytes(); used+asked > *maxBytes {
			return QuotaError("stored_bytes", *maxBytes, used, asked)
		}
	}
	return nil
}

// QuotaError is the error of a request that would exceed a quota: code
// quota_exceeded (507) with the numbers in its details.
func QuotaError(what string, limit, used, requested int64) error {
	return errdefs.WithDetails(fmt.Errorf("quota exceeded: %s: %d used of %d, %d more asked: %w", what, used, limit, requested, errdefs.ErrQuotaExceeded),
		map[string]any{"quota": what, "limit": limit, "used": used, "requested": requested})
}
