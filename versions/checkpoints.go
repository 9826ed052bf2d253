package versions

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// Checkpoint is one freeze of an instance recorded as one unit: the
// version that holds its rootfs and one archive per volume of its project,
// all taken at the same moment.
//
// Terms: Number is per project and never reused. While the checkpoint
// exists its version is never collected (retention skips it, and the
// version's row cannot be deleted under it) and its archives are neither
// listed, replaced nor deleted as user archives. Retention counts
// checkpoints as units of their own (ExpiredCheckpoints); deleting one
// (DeleteCheckpoint) releases its version and its archives together.
type Checkpoint struct {
	ID        int64
	Tenant    string
	Project   string
	Number    int
	Version   int
	Instance  string
	Message   string
	Node      string
	FreezeMS  int64
	CreatedAt time.Time
	// VersionBytes is the layer the version added (versions.layer_bytes).
	VersionBytes int64
	Archives     []Archive // by volume
	Memory       CheckpointMemory
}

// CheckpointMemory is a checkpoint's memory image (registry/memimage);
// zero for a checkpoint without one.
type CheckpointMemory struct {
	Image     string // "repo@digest" of the artifact, "" for none
	Bytes     int64  // what the artifact holds
	NewBytes  int64  // what its push added to the repository (stored bytes)
	FreezeMS  int64  // the engine's part of the freeze
	ResumedBy string // the instance that resumed it last, "" for none
}

// Bytes is what the checkpoint stores: its version's layer, its archives
// and what its memory image added.
func (c Checkpoint) Bytes() int64 {
	n := c.VersionBytes + c.Memory.NewBytes
	for _, a := range c.Archives {
		n += a.SizeBytes
	}
	return n
}

// CheckpointRecord is what a commit records with its version as a
// checkpoint (Commit.Checkpoint): the archives are already written.
type CheckpointRecord struct {
	Message  string
	Node     string
	FreezeMS int64
	Archives []Archive // Volume, Key, SizeBytes, Files; the names are chosen here
	// Memory is the memory image pushed for it (Image "" for none); its
	// NewBytes count in the quota check.
	Memory CheckpointMemory
}

// archiveBytes is what the record's archives store.
func (r *CheckpointRecord) archiveBytes() int64 {
	if r == nil {
		return 0
	}
	var n int64
	for _, a := range r.Archives {
		n += a.SizeBytes
	}
	return n + r.Memory.NewBytes
}

// CheckpointArchiveName is the name of a checkpoint's archive of a volume:
// it starts with '@', outside the grammar of user archive names.
func CheckpointArchiveName(number int) string { return fmt.Sprintf("@checkpoint-%d", number) }

// recordCheckpoint inserts the checkpoint of version n of project pid and
// its archives, in the commit's transaction (the project row is locked).
func recordCheckpoint(ctx context.Context, tx pgx.Tx, c Commit, pid int64, n int) error {
	var number int
	err := tx.QueryRow(ctx, "UPDATE projects SET next_checkpoint = next_checkpoint + 1 WHERE id = $1 RETURNING next_checkpoint - 1", pid).Scan(&number)
	if err != nil {
		return translate(err, fmt.Sprintf("checkpoint of project %q", c.Project))
	}
	var id int64
	mem := c.Checkpoint.Memory
	err = tx.QueryRow(ctx, `INSERT INTO checkpoints (project_id, number, version, instance, message, node, freeze_ms,
			memory_image, memory_bytes, memory_new_bytes, memory_freeze_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id`,
		pid, number, n, c.InstanceID, c.Checkpoint.Message, c.Checkpoint.Node, c.Checkpoint.FreezeMS,
		mem.Image, mem.Bytes, mem.NewBytes, mem.FreezeMS).Scan(&id)
	if err != nil {
		return translate(err, fmt.Sprintf("checkpoint %d of project %q", number, c.Project))
	}
	for _, a := range c.Checkpoint.Archives {
		_, err := tx.Exec(ctx, `INSERT INTO volume_archives (tenant_id, project_id, project, volume, name, key, size_bytes, files, node, checkpoint_id)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			c.Tenant, pid, c.Project, a.Volume, CheckpointArchiveName(number), a.Key, a.SizeBytes, a.Files, c.Checkpoint.Node, id)
		if err != nil {
			return translate(err, fmt.Sprintf("archive of volume %q of checkpoint %d of project %q", a.Volume, number, c.Project))
		}
	}
	return nil
}

const checkpointCols = `c.id, p.tenant_id, p.name, c.number, c.version, c.instance, c.message, c.node, c.freeze_ms, c.created_at,
	COALESCE((SELECT v.layer_bytes FROM versions v WHERE v.project_id = c.project_id AND v.number = c.version), 0),
	c.memory_image, c.memory_bytes, c.memory_new_bytes, c.memory_freeze_ms, c.resumed_by`

func scanCheckpoint(row pgx.Row) (Checkpoint, error) {
	var c Checkpoint
	m := &c.Memory
	err := row.Scan(&c.ID, &c.Tenant, &c.Project, &c.Number, &c.Version, &c.Instance, &c.Message, &c.Node, &c.FreezeMS, &c.CreatedAt, &c.VersionBytes,
		&m.Image, &m.Bytes, &m.NewBytes, &m.FreezeMS, &m.ResumedBy)
	return c, err
}

// withArchives reads the archives of cs.
func withArchives(ctx context.Context, q rowsQuerier, cs []Checkpoint) ([]Checkpoint, error) {
	if len(cs) == 0 {
		return cs, nil
	}
	ids := make([]int64, len(cs))
	at := map[int64]int{}
	for i, c := range cs {
		ids[i], at[c.ID] = c.ID, i
	}
	rows, err := q.Query(ctx, `SELECT a.checkpoint_id, `+archiveCols+` FROM volume_archives a
		WHERE a.checkpoint_id = ANY($1) ORDER BY a.volume`, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var cid int64
		var a Archive
		if err := rows.Scan(&cid, &a.ID, &a.Tenant, &a.Project, &a.Volume, &a.Name, &a.Key, &a.SizeBytes, &a.Files, &a.Node, &a.CreatedAt); err != nil {
			return nil, err
		}
		c := &cs[at[cid]]
		c.Archives = append(c.Archives, a)
	}
	return cs, rows.Err()
}

// rowsQuerier is what both the pool and a transaction offer.
type rowsQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// ListCheckpoints lists the tenant's project's checkpoints, newest first.
// ErrNotFound when the project does not exist.
func (s Versions) ListCheckpoints(ctx context.Context, tenant, project string) ([]Checkpoint, error) {
	what := fmt.Sprintf("checkpoints of project %q", project)
	return WithTxV(ctx, s.db, func(tx pgx.Tx) ([]Checkpoint, error) {
		var id int64
		err := tx.QueryRow(ctx, "SELECT id FROM projects WHERE tenant_id = $1 AND name = $2", tenant, project).Scan(&id)
		if err != nil {
			return nil, translate(err, fmt.Sprintf("project %q", project))
		}
		rows, err := tx.Query(ctx, `SELECT `+checkpointCols+` FROM checkpoints c JOIN projects p ON p.id = c.project_id
			WHERE c.project_id = $1 ORDER BY c.number DESC`, id)
		if err != nil {
			return nil, translate(err, what)
		}
		cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Checkpoint, error) { return scanCheckpoint(r) })
		if err != nil {
			return nil, translate(err, what)
		}
		cs, err = withArchives(ctx, tx, cs)
		return cs, translate(err, what)
	})
}

// GetCheckpoint returns checkpoint number of the tenant's project;
// ErrNotFound when there is none.
func (s Versions) GetCheckpoint(ctx context.Context, tenant, project string, number int) (Checkpoint, error) {
	what := fmt.Sprintf("checkpoint %d of project %q", number, project)
	c, err := scanCheckpoint(s.db.QueryRow(ctx, `SELECT `+checkpointCols+` FROM checkpoints c JOIN projects p ON p.id = c.project_id
		WHERE p.tenant_id = $1 AND p.name = $2 AND c.number = $3`, tenant, project, number))
	if err != nil {
		return Checkpoint{}, translate(err, what)
	}
	cs, err := withArchives(ctx, s.db, []Checkpoint{c})
	if err != nil {
		return Checkpoint{}, translate(err, what)
	}
	return cs[0], nil
}

// DeleteCheckpoint deletes checkpoint number of the tenant's project and
// returns it, releasing its parts together, in one transaction under the
// project's row lock (as MarkCollectable): its archives lose their project
// (their objects are then the orphan-archive cleanup's: see
// OrphanArchives), and its version is marked deleting unless something
// else keeps it (current, pinned, used by an instance that is not
// Terminated, moved by a migration, or held by another checkpoint). A
// version marked deleting is the caller's to collect (its manifest, then
// DeleteVersion), as a GC does; the returned bool says so.
func (s Versions) DeleteCheckpoint(ctx context.Context, tenant, project string, number int) (Checkpoint, bool, error) {
	r, err := WithTxV(ctx, s.db, func(tx pgx.Tx) (deletedCheckpoint, error) {
		var pid int64
		err := tx.QueryRow(ctx, "SELECT id FROM projects WHERE tenant_id = $1 AND name = $2 FOR UPDATE", tenant, project).Scan(&pid)
		if err != nil {
			return deletedCheckpoint{}, translate(err, fmt.Sprintf("project %q", project))
		}
		return deleteCheckpointTx(ctx, tx, pid, project, number)
	})
	return r.c, r.released, err
}

// deletedCheckpoint is a deleted checkpoint and whether its version was
// marked deleting.
type deletedCheckpoint struct {
	c        Checkpoint
	released bool
}

func deleteCheckpointTx(ctx context.Context, tx pgx.Tx, pid int64, project string, number int) (deletedCheckpoint, error) {
	var r deletedCheckpoint
	what := fmt.Sprintf("checkpoint %d of project %q", number, project)
	c, err := scanCheckpoint(tx.QueryRow(ctx, `SELECT `+checkpointCols+` FROM checkpoints c JOIN projects p ON p.id = c.project_id
		WHERE c.project_id = $1 AND c.number = $2`, pid, number))
	if err != nil {
		return r, translate(err, what)
	}
	cs, err := withArchives(ctx, tx, []Checkpoint{c})
	if err != nil {
		return r, translate(err, what)
	}
	r.c = cs[0]
	if _, err := tx.Exec(ctx, "UPDATE volume_archives SET project_id = NULL WHERE checkpoint_id = $1", c.ID); err != nil {
		return r, translate(err, what)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM checkpoints WHERE id = $1", c.ID); err != nil {
		return r, translate(err, what)
	}
	tag, err := tx.Exec(ctx, `UPDATE versions v SET state = 'deleting'
		FROM projects p
		WHERE p.id = v.project_id AND v.project_id = $1 AND v.number = $2 AND v.state = 'ready' AND v.kind <> 'base'
		  AND NOT v.pinned AND v.number IS DISTINCT FROM p.current_version
		  AND NOT EXISTS (SELECT 1 FROM checkpoints o WHERE o.project_id = $1 AND o.version = $2)
		  AND NOT EXISTS (SELECT 1 FROM instances i
		                  WHERE i.project_id = $1 AND i.state <> 'Terminated'
		                    AND $2 IN (i.version, i.last_saved_version, i.layer_version, i.hibernated_version))
		  AND NOT EXISTS (SELECT 1 FROM versions d
		                  WHERE d.project_id = $1 AND d.kind = 'migration' AND d.parent = $2 AND d.state <> 'deleting')`,
		pid, c.Version)
	if err != nil {
		return r, translate(err, what)
	}
	r.released = tag.RowsAffected() == 1
	return r, nil
}

// ExpireCheckpoints applies the project's retention policy to its
// checkpoints as units: those neither among the newest KeepLast
// checkpoints nor newer than KeepNewerThan at now, nor what a hibernated
// instance wakes from (instances.hibernated_checkpoint), are deleted as
// DeleteCheckpoint does (with dryRun: only returned). A project without a
// policy keeps every checkpoint. The versions they release are left
// deleting for the caller's collection (MarkCollectable returns them).
func (s Versions) ExpireCheckpoints(ctx context.Context, tenant, project string, now time.Time, dryRun bool) ([]Checkpoint, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) ([]Checkpoint, error) {
		var pid int64
		err := tx.QueryRow(ctx, "SELECT id FROM projects WHERE tenant_id = $1 AND name = $2 FOR UPDATE", tenant, project).Scan(&pid)
		if err != nil {
			return nil, translate(err, fmt.Sprintf("project %q", project))
		}
		rows, err := tx.Query(ctx, `SELECT r.number FROM
			(SELECT c.number, c.created_at, row_number() OVER (ORDER BY c.number DESC) AS newest
			 FROM checkpoints c WHERE c.project_id = $1) r
			JOIN projects p ON p.id = $1
			WHERE `+hasPolicy+`
			  AND (p.keep_last IS NULL OR r.newest > p.keep_last)
			  AND (p.keep_newer_than_s IS NULL
			       OR r.created_at <= $2::timestamptz - make_interval(secs => p.keep_newer_than_s))
			  AND NOT EXISTS (SELECT 1 FROM instances i WHERE i.project_id = $1 AND i.hibernated_checkpoint = r.number
			                  AND i.state NOT IN ('Terminated', 'Failed'))
			ORDER BY r.number`, pid, now)
		if err != nil {
			return nil, translate(err, fmt.Sprintf("checkpoints of project %q", project))
		}
		numbers, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return nil, translate(err, fmt.Sprintf("checkpoints of project %q", project))
		}
		var out []Checkpoint
		for _, n := range numbers {
			if dryRun {
				c, err := scanCheckpoint(tx.QueryRow(ctx, `SELECT `+checkpointCols+` FROM checkpoints c JOIN projects p ON p.id = c.project_id
					WHERE c.project_id = $1 AND c.number = $2`, pid, n))
				if err != nil {
					return nil, translate(err, fmt.Sprintf("checkpoint %d of project %q", n, project))
				}
				cs, err := withArchives(ctx, tx, []Checkpoint{c})
				if err != nil {
					return nil, translate(err, fmt.Sprintf("checkpoint %d of project %q", n, project))
				}
				out = append(out, cs[0])
				continue
			}
			r, err := deleteCheckpointTx(ctx, tx, pid, project, n)
			if err != nil {
				return nil, err
			}
			out = append(out, r.c)
		}
		return out, nil
	})
}

// CheckpointArchiveBytes is what the tenant's checkpoints' archives store
// (part of its stored bytes).
func (s Versions) CheckpointArchiveBytes(ctx context.Context, tenant string) (int64, error) {
	var n int64
	err := s.db.QueryRow(ctx, checkpointArchiveBytes, tenant).Scan(&n)
	return n, translate(err, fmt.Sprintf("checkpoint archives of %q", tenant))
}

// checkpointArchiveBytes sums the archive bytes of tenant $1's checkpoints
// and what their memory images added to the registry (memory_new_bytes:
// chunks shared with an earlier image of the project are counted once).
const checkpointArchiveBytes = `SELECT (SELECT COALESCE(sum(a.size_bytes), 0)::bigint FROM volume_archives a
	WHERE a.tenant_id = $1 AND a.project_id IS NOT NULL AND a.checkpoint_id IS NOT NULL)
	+ (SELECT COALESCE(sum(c.memory_new_bytes), 0)::bigint FROM checkpoints c JOIN projects p ON p.id = c.project_id
	WHERE p.tenant_id = $1)`

// errNoCheckpointArchive is the error of a checkpoint without an archive
// of the volume asked.
func errNoCheckpointArchive(project, volume string, number int) error {
	return fmt.Errorf("checkpoint %d of project %q has no archive of volume %q (the volume was added after it): %w", number, project, volume, errdefs.ErrNotFound)
}

// CheckpointArchive returns the archive of volume of checkpoint number of
// the tenant's project; ErrNotFound when the checkpoint or the archive
// does not exist.
func (s Versions) CheckpointArchive(ctx context.Context, tenant, project string, number int, volume string) (Archive, error) {
	c, err := s.GetCheckpoint(ctx, tenant, project, number)
	if err != nil {
		return Archive{}, err
	}
	for _, a := range c.Archives {
		if a.Volume == volume {
			return a, nil
		}
	}
	return Archive{}, errNoCheckpointArchive(project, volume, number)
}

// ClaimCheckpointMemory records instance as the one resuming the memory of
// checkpoint number of the tenant's project, unless another instance that
// is neither Terminated nor Failed holds it (ErrConflict, naming it): one
// checkpoint's processes run in one instance at a time, so two resumes on
// two nodes give one winner. The instance's row must exist (Pending). A
// checkpoint without memory is ErrFailedPrecondition.
func (s Versions) ClaimCheckpointMemory(ctx context.Context, tenant, project string, number int, instance string) error {
	what := fmt.Sprintf("checkpoint %d of project %q", number, project)
	return WithTx(ctx, s.db, func(tx pgx.Tx) error {
		var id int64
		var image, holder string
		err := tx.QueryRow(ctx, `SELECT c.id, c.memory_image, c.resumed_by FROM checkpoints c JOIN projects p ON p.id = c.project_id
			WHERE p.tenant_id = $1 AND p.name = $2 AND c.number = $3 FOR UPDATE OF c`, tenant, project, number).Scan(&id, &image, &holder)
		if err != nil {
			return translate(err, what)
		}
		if image == "" {
			return fmt.Errorf("%s has no memory image: %w", what, errdefs.ErrFailedPrecondition)
		}
		if holder != "" && holder != instance {
			var live bool
			err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM instances WHERE id = $1 AND state NOT IN ('Terminated', 'Failed'))`, holder).Scan(&live)
			if err != nil {
				return translate(err, what)
			}
			if live {
				return errdefs.WithDetails(fmt.Errorf("%s is resumed by instance %s, which still runs its processes: remove it first (one checkpoint's processes run in one instance at a time): %w",
					what, holder, errdefs.ErrConflict), map[string]any{"instance": holder})
			}
		}
		_, err = tx.Exec(ctx, "UPDATE checkpoints SET resumed_by = $2 WHERE id = $1", id, instance)
		return translate(err, what)
	})
}

// SetCheckpointMemoryNewBytes records n as what the memory image of
// checkpoint number of the tenant's project adds to its repository
// (memory_new_bytes, counted in the tenant's stored bytes): a recount after
// the images it shared chunks with changed. ErrNotFound when there is no
// such checkpoint.
func (s Versions) SetCheckpointMemoryNewBytes(ctx context.Context, tenant, project string, number int, n int64) error {
	what := fmt.Sprintf("checkpoint %d of project %q", number, project)
	tag, err := s.db.Exec(ctx, `UPDATE checkpoints c SET memory_new_bytes = $4 FROM projects p
		WHERE p.id = c.project_id AND p.tenant_id = $1 AND p.name = $2 AND c.number = $3 AND c.memory_image <> ''`, tenant, project, number, n)
	if err != nil {
		return translate(err, what)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%s with a memory image: %w", what, errdefs.ErrNotFound)
	}
	return nil
}
