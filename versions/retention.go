package versions

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// Retention is a project's policy: a version is kept while it is among the newest KeepLast
// or newer than KeepNewerThan; zero means no limit of that kind, and both zero keep everything.
//
// Whatever the policy, a version is never collected while it is a base
// (its image is the imported base image, shared with other projects),
// pinned, current, referenced by an instance of the project that is not
// Terminated (as its version, last saved, layer or hibernated version), or
// the version a migration moved (kept for rollback).
// A version a checkpoint holds is neither collected nor counted among
// the newest KeepLast: checkpoints are units of their own
// (ExpireCheckpoints).
// Failed versions are collected whatever the policy (and without one),
// unless pinned or used by an instance that is not Terminated: until then
// they count against the tenant's quota. Creating ones are left alone.
//
// GC runs in two steps, so that an interrupted run is finished by the next:
// MarkCollectable moves the versions the policy does not keep from ready to
// deleting (nothing can make them current, pinned or restored again), the
// caller deletes their images, then DeleteVersion deletes each row.
type Retention struct {
	KeepLast      int
	KeepNewerThan time.Duration
}

// hasPolicy is true for a project (as p) whose policy may collect anything.
// keep_newer_than_s = 0 keeps nothing by age, as NULL does, and reads back
// as a zero Retention: it is no policy on its own.
const hasPolicy = `(p.keep_last IS NOT NULL OR p.keep_newer_than_s > 0)`

// collectableNumbers selects the numbers of the versions of project $1 that
// its policy does not keep at time $2.
const collectableNumbers = `SELECT r.number
	FROM (SELECT v.number, v.kind, v.pinned, v.created_at,
	             row_number() OVER (ORDER BY v.number DESC) AS newest
	      FROM versions v WHERE v.project_id = $1 AND v.state = 'ready'
	        AND NOT EXISTS (SELECT 1 FROM checkpoints c WHERE c.project_id = $1 AND c.version = v.number)) r
	JOIN projects p ON p.id = $1
	WHERE ` + hasPolicy + `
	  AND r.kind <> 'base'
	  AND NOT r.pinned
	  AND r.number IS DISTINCT FROM p.current_version
	  AND (p.keep_last IS NULL OR r.newest > p.keep_last)
	  AND (p.keep_newer_than_s IS NULL
	       OR r.created_at <= $2::timestamptz - make_interval(secs => p.keep_newer_than_s))
	  AND NOT EXISTS (SELECT 1 FROM instances i
	                  WHERE i.project_id = $1 AND i.state <> 'Terminated'
	                    AND r.number IN (i.version, i.last_saved_version, i.layer_version, i.hibernated_version, i.checkpoint_version))
	  AND NOT EXISTS (SELECT 1 FROM versions d
	                  WHERE d.project_id = $1 AND d.kind = 'migration' AND d.parent = r.number
	                    AND d.state <> 'deleting')`

// collectableFailed selects the numbers of project $1's failed versions
// that GC collects.
const collectableFailed = `SELECT f.number FROM versions f
	WHERE f.project_id = $1 AND f.state = 'failed' AND NOT f.pinned
	  AND NOT EXISTS (SELECT 1 FROM instances i
	                  WHERE i.project_id = $1 AND i.state <> 'Terminated'
	                    AND f.number IN (i.version, i.last_saved_version, i.layer_version, i.hibernated_version))`

// SetRetention sets a project's retention policy; a zero r removes it.
// KeepNewerThan is stored in whole seconds, rounded up (so a policy never
// keeps less than asked). Fails with ErrNotFound for an unknown project,
// ErrInvalidArgument for negative values.
func (s Projects) SetRetention(ctx context.Context, tenant, project string, r Retention) (Project, error) {
	if r.KeepLast < 0 || r.KeepNewerThan < 0 {
		return Project{}, fmt.Errorf("retention of project %q: keep last %d, newer than %s: negative: %w",
			project, r.KeepLast, r.KeepNewerThan, errdefs.ErrInvalidArgument)
	}
	p, err := scanProject(s.db.QueryRow(ctx, `UPDATE projects p SET keep_last = $3, keep_newer_than_s = $4, updated_at = now()
		WHERE p.tenant_id = $1 AND p.name = $2 RETURNING `+projectCols,
		tenant, project, nullInt(r.KeepLast), ceilSeconds(r.KeepNewerThan)))
	if err != nil {
		return Project{}, translate(err, fmt.Sprintf("retention of project %q", project))
	}
	return p, nil
}

// ceilSeconds is d in whole seconds rounded up; nil for 0 (no age limit).
func ceilSeconds(d time.Duration) *int64 {
	if d <= 0 {
		return nil
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return &s
}

// secondsDuration is s seconds, saturated at the longest Duration.
func secondsDuration(s int64) time.Duration {
	if s > math.MaxInt64/int64(time.Second) {
		return math.MaxInt64
	}
	return time.Duration(s) * time.Second
}

// RetainedProjects returns every project, of all tenants, that has a
// retention policy, ordered by id.
func (s Projects) RetainedProjects(ctx context.Context) ([]Project, error) {
	rows, err := s.db.Query(ctx, "SELECT "+projectCols+" FROM projects p WHERE "+hasPolicy+" ORDER BY p.id")
	if err != nil {
		return nil, translate(err, "list retained projects")
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Project, error) { return scanProject(r) })
	return ps, translate(err, "list retained projects")
}

// GCProjects returns every project, of all tenants, that a GC may collect
// from: those with a retention policy, with failed versions, or with
// versions left deleting by an interrupted GC; ordered by id.
func (s Projects) GCProjects(ctx context.Context) ([]Project, error) {
	rows, err := s.db.Query(ctx, "SELECT "+projectCols+" FROM projects p WHERE "+hasPolicy+`
		OR EXISTS (SELECT 1 FROM versions v WHERE v.project_id = p.id AND v.state IN ('failed', 'deleting'))
		ORDER BY p.id`)
	if err != nil {
		return nil, translate(err, "list projects to collect")
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Project, error) { return scanProject(r) })
	return ps, translate(err, "list projects to collect")
}

// MarkCollectable marks, in one transaction that holds the project's row lock (so it
// serializes with SetCurrent and CommitVersion), the project's versions the policy does not
// keep as state 'deleting', and returns every version of the project in state 'deleting'
// (those just marked and any left by an interrupted GC), ordered by number. With dryRun it
// marks nothing and returns what it would mark (plus those already deleting).
//
// In a dry run the versions it would mark are returned as they are, ready.
// now is the time the age rule measures from.
func (s Versions) MarkCollectable(ctx context.Context, tenant, project string, now time.Time, dryRun bool) ([]Version, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) ([]Version, error) {
		var id int64
		// FOR UPDATE, not NO KEY UPDATE: it also blocks instance inserts
		// (their foreign key takes KEY SHARE), so every instance that can
		// reference a version is visible to the statements below.
		err := tx.QueryRow(ctx, "SELECT id FROM projects WHERE tenant_id = $1 AND name = $2 FOR UPDATE",
			tenant, project).Scan(&id)
		if err != nil {
			return nil, translate(err, fmt.Sprintf("project %q", project))
		}
		if !dryRun {
			// Pin does not lock the project: state and pinned are tested
			// again on the row itself, after any wait for it.
			_, err := tx.Exec(ctx, `UPDATE versions SET state = 'deleting'
				WHERE project_id = $1 AND NOT pinned
				  AND ((state = 'ready' AND number IN (`+collectableNumbers+`))
				       OR (state = 'failed' AND number IN (`+collectableFailed+`)))`, id, now)
			if err != nil {
				return nil, err
			}
		}
		rows, err := tx.Query(ctx, "SELECT "+versionCols+` FROM versions v JOIN projects p ON p.id = v.project_id
			WHERE v.project_id = $1 AND (v.state = 'deleting'
			      OR ($3 AND (v.number IN (`+collectableNumbers+`) OR v.number IN (`+collectableFailed+`))))
			ORDER BY v.number`, id, now, dryRun)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Version, error) { return scanVersion(r) })
	})
}

// DeleteVersion deletes a version row that is in state 'deleting' (ErrFailedPrecondition
// otherwise, ErrNotFound if absent). Its number is never reused.
func (s Versions) DeleteVersion(ctx context.Context, tenant, project string, number int) error {
	tag, err := s.db.Exec(ctx, `DELETE FROM versions v USING projects p
		WHERE p.id = v.project_id AND p.tenant_id = $1 AND p.name = $2 AND v.number = $3 AND v.state = 'deleting'`,
		tenant, project, number)
	if err != nil {
		return translate(err, fmt.Sprintf("version %d of project %q", number, project))
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	v, err := s.GetVersion(ctx, tenant, project, number)
	if err != nil {
		return err
	}
	return fmt.Errorf("version %d of project %q is %s, not %s: %w",
		number, project, v.State, StateDeleting, errdefs.ErrFailedPrecondition)
}

// whyNotPinned is the error of a Pin that changed no row: the version is
// missing or being deleted.
func (s Versions) whyNotPinned(ctx context.Context, tenant, project string, n int) error {
	v, err := s.GetVersion(ctx, tenant, project, n)
	if err != nil {
		return err
	}
	return fmt.Errorf("version %d of project %q is %s: %w", n, project, v.State, errdefs.ErrFailedPrecondition)
}
