package versions

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// putVersionSpec keeps a version's declared spec, in the commit's
// transaction; an empty spec keeps nothing.
func putVersionSpec(ctx context.Context, tx pgx.Tx, projectID int64, n int, spec json.RawMessage) error {
	if len(spec) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO version_specs (project_id, number, spec) VALUES ($1, $2, $3)`, projectID, n, []byte(spec))
	return translate(err, fmt.Sprintf("spec of version %d", n))
}

// VersionSpec returns the declared spec version n of project was built
// from; ErrNotFound when the version does not exist or kept none.
func (s Versions) VersionSpec(ctx context.Context, tenant, project string, n int) (json.RawMessage, error) {
	var spec []byte
	err := s.db.QueryRow(ctx, `SELECT vs.spec FROM version_specs vs JOIN projects p ON p.id = vs.project_id
		WHERE p.tenant_id = $1 AND p.name = $2 AND vs.number = $3`, tenant, project, n).Scan(&spec)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("declared spec of version %d of project %q", n, project))
	}
	return spec, nil
}
