package versions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// Archive is the record of one volume archive in the object store.
//
// Terms: an archive is named per project volume (Name); its object Key is
// chosen by envd and unique. A restore finds the archive through this
// record, by (tenant, project, volume, name) or by (tenant, project, key):
// a key of another tenant or project is simply not found.
type Archive struct {
	ID        int64
	Tenant    string
	Project   string // project name
	Volume    string
	Name      string
	Key       string
	SizeBytes int64
	Files     int
	Node      string // the node that wrote it
	CreatedAt time.Time
}

const archiveCols = "a.id, a.tenant_id, a.project, a.volume, a.name, a.key, a.size_bytes, a.files, a.node, a.created_at"

func scanArchive(row pgx.Row) (Archive, error) {
	var a Archive
	err := row.Scan(&a.ID, &a.Tenant, &a.Project, &a.Volume, &a.Name, &a.Key, &a.SizeBytes, &a.Files, &a.Node, &a.CreatedAt)
	return a, err
}

func collectArchives(rows pgx.Rows, err error) ([]Archive, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Archive, error) { return scanArchive(r) })
}

// PutArchive records a.Key (already written to the object store) as the
// archive a.Name of the project's volume. With an archive of that name
// already recorded it fails with ErrAlreadyExists, unless replace: then
// the record moves to the new key and the replaced key is returned, for the
// caller to delete its object. Of concurrent first archives of one name,
// one is recorded and the others fail with ErrAlreadyExists, replace or
// not. ErrNotFound when the project does not exist (also when it was
// deleted while the archive was written).
func (s Volumes) PutArchive(ctx context.Context, a Archive, replace bool) (stored Archive, replaced string, err error) {
	what := fmt.Sprintf("archive %q of volume %q of project %q", a.Name, a.Volume, a.Project)
	err = WithTx(ctx, s.db, func(tx pgx.Tx) error {
		var projectID int64
		// FOR KEY SHARE: the project cannot be deleted before we commit.
		err := tx.QueryRow(ctx, "SELECT id FROM projects WHERE tenant_id = $1 AND name = $2 FOR KEY SHARE",
			a.Tenant, a.Project).Scan(&projectID)
		if err != nil {
			return translate(err, fmt.Sprintf("project %q", a.Project))
		}
		var old string
		err = tx.QueryRow(ctx, `SELECT key FROM volume_archives
			WHERE project_id = $1 AND volume = $2 AND name = $3 FOR UPDATE`, projectID, a.Volume, a.Name).Scan(&old)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			stored, err = scanArchive(tx.QueryRow(ctx, `INSERT INTO volume_archives AS a
				(tenant_id, project_id, project, volume, name, key, size_bytes, files, node)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING `+archiveCols,
				a.Tenant, projectID, a.Project, a.Volume, a.Name, a.Key, a.SizeBytes, a.Files, a.Node))
			return translate(err, what)
		case err != nil:
			return translate(err, what)
		case !replace:
			return fmt.Errorf("%s exists: archive under another name, or ask to replace it: %w", what, errdefs.ErrAlreadyExists)
		}
		replaced = old
		stored, err = scanArchive(tx.QueryRow(ctx, `UPDATE volume_archives AS a
			SET key = $4, size_bytes = $5, files = $6, node = $7, created_at = now()
			WHERE project_id = $1 AND volume = $2 AND name = $3 RETURNING `+archiveCols,
			projectID, a.Volume, a.Name, a.Key, a.SizeBytes, a.Files, a.Node))
		return translate(err, what)
	})
	if err != nil {
		return Archive{}, "", err
	}
	return stored, replaced, nil
}

// GetArchive returns the archive name of the project's volume;
// ErrNotFound when the tenant's project has none.
func (s Volumes) GetArchive(ctx context.Context, tenant, project, volume, name string) (Archive, error) {
	a, err := scanArchive(s.db.QueryRow(ctx, `SELECT `+archiveCols+` FROM volume_archives a
		JOIN projects p ON p.id = a.project_id
		WHERE p.tenant_id = $1 AND p.name = $2 AND a.volume = $3 AND a.name = $4`, tenant, project, volume, name))
	return a, translate(err, fmt.Sprintf("archive %q of volume %q of project %q", name, volume, project))
}

// GetArchiveByKey returns the archive of the tenant's project stored under
// key (of any of its volumes); ErrNotFound for any other key.
func (s Volumes) GetArchiveByKey(ctx context.Context, tenant, project, key string) (Archive, error) {
	a, err := scanArchive(s.db.QueryRow(ctx, `SELECT `+archiveCols+` FROM volume_archives a
		JOIN projects p ON p.id = a.project_id
		WHERE p.tenant_id = $1 AND p.name = $2 AND a.key = $3`, tenant, project, key))
	return a, translate(err, fmt.Sprintf("archive %q of project %q", key, project))
}

// ListArchives lists the archives of the tenant's project, of one volume
// or of all ("" ), by volume, then newest first. ErrNotFound when the
// project does not exist.
func (s Volumes) ListArchives(ctx context.Context, tenant, project, volume string) ([]Archive, error) {
	what := fmt.Sprintf("archives of project %q", project)
	return WithTxV(ctx, s.db, func(tx pgx.Tx) ([]Archive, error) {
		var id int64
		err := tx.QueryRow(ctx, "SELECT id FROM projects WHERE tenant_id = $1 AND name = $2", tenant, project).Scan(&id)
		if err != nil {
			return nil, translate(err, fmt.Sprintf("project %q", project))
		}
		out, err := collectArchives(tx.Query(ctx, `SELECT `+archiveCols+` FROM volume_archives a
			WHERE a.project_id = $1 AND ($2 = '' OR a.volume = $2) AND a.checkpoint_id IS NULL ORDER BY a.volume, a.created_at DESC, a.id DESC`, id, volume))
		return out, translate(err, what)
	})
}

// DeleteArchive deletes the record of archive name of the project's volume
// and returns it, for the caller to delete its object after.
func (s Volumes) DeleteArchive(ctx context.Context, tenant, project, volume, name string) (Archive, error) {
	a, err := scanArchive(s.db.QueryRow(ctx, `DELETE FROM volume_archives a USING projects p
		WHERE p.id = a.project_id AND p.tenant_id = $1 AND p.name = $2 AND a.volume = $3 AND a.name = $4
		  AND a.checkpoint_id IS NULL
		RETURNING `+archiveCols, tenant, project, volume, name))
	return a, translate(err, fmt.Sprintf("archive %q of volume %q of project %q", name, volume, project))
}

// OrphanArchives returns up to limit archives whose project was deleted:
// their objects are to be deleted, then their records (ForgetArchive).
func (s Volumes) OrphanArchives(ctx context.Context, limit int) ([]Archive, error) {
	out, err := collectArchives(s.db.Query(ctx, `SELECT `+archiveCols+` FROM volume_archives a
		WHERE a.project_id IS NULL ORDER BY a.id LIMIT $1`, limit))
	return out, translate(err, "orphan archives")
}

// ForgetArchive deletes the record of an orphan archive (its project
// deleted) once its object is gone. Records of live projects are not
// touched; a missing record is not an error.
func (s Volumes) ForgetArchive(ctx context.Context, id int64) error {
	_, err := s.db.Exec(ctx, "DELETE FROM volume_archives WHERE id = $1 AND project_id IS NULL", id)
	return translate(err, fmt.Sprintf("archive record %d", id))
}
