package versions

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// FindBuild returns the newest ready build version of project whose
// message starts with "build KEY" (a build records its key there), and
// ErrNotFound when there is none: a build with the same key can reuse it.
func (s Versions) FindBuild(ctx context.Context, tenant, project, key string) (Version, error) {
	v, err := scanVersion(s.db.QueryRow(ctx, "SELECT "+versionCols+` FROM versions v JOIN projects p ON p.id = v.project_id
		WHERE p.tenant_id = $1 AND p.name = $2 AND v.kind = 'build' AND v.state = 'ready' AND v.validated
		  AND starts_with(v.message, 'build ' || $3 || ' ')
		ORDER BY v.number DESC LIMIT 1`, tenant, project, key))
	if errors.Is(err, pgx.ErrNoRows) {
		return Version{}, fmt.Errorf("build %s of project %q: %w", key, project, errdefs.ErrNotFound)
	}
	if err != nil {
		return Version{}, translate(err, fmt.Sprintf("build of project %q", project))
	}
	return v, nil
}

// FailVersion marks a ready version that is not current as failed (its
// validation failed): it can no longer be started or made current.
func (s Versions) FailVersion(ctx context.Context, tenant, project string, n int) error {
	tag, err := s.db.Exec(ctx, `UPDATE versions v SET state = 'failed' FROM projects p
		WHERE p.id = v.project_id AND p.tenant_id = $1 AND p.name = $2 AND v.number = $3
		  AND v.state = 'ready' AND v.number IS DISTINCT FROM p.current_version`, tenant, project, n)
	if err != nil {
		return translate(err, fmt.Sprintf("version %d of project %q", n, project))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("version %d of project %q: not a ready, non-current version: %w", n, project, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// MarkValidated records that version n passed its validation.
func (s Versions) MarkValidated(ctx context.Context, tenant, project string, n int) error {
	tag, err := s.db.Exec(ctx, `UPDATE versions v SET validated = true FROM projects p
		WHERE p.id = v.project_id AND p.tenant_id = $1 AND p.name = $2 AND v.number = $3 AND v.state = 'ready'`, tenant, project, n)
	if err != nil {
		return translate(err, fmt.Sprintf("version %d of project %q", n, project))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("version %d of project %q: not ready: %w", n, project, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// FailUnvalidatedBuilds marks failed the ready, unvalidated, non-current
// builds of key (an interrupted build's): they are not reused or started.
func (s Versions) FailUnvalidatedBuilds(ctx context.Context, tenant, project, key string) error {
	_, err := s.db.Exec(ctx, `UPDATE versions v SET state = 'failed' FROM projects p
		WHERE p.id = v.project_id AND p.tenant_id = $1 AND p.name = $2 AND v.kind = 'build' AND v.state = 'ready'
		  AND NOT v.validated AND v.number IS DISTINCT FROM p.current_version
		  AND starts_with(v.message, 'build ' || $3 || ' ')`, tenant, project, key)
	return translate(err, fmt.Sprintf("builds of project %q", project))
}
