package versions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// SetCheckpointEvery sets how often tenant's project checkpoints its
// retained instances; 0 = never.
func (s Projects) SetCheckpointEvery(ctx context.Context, tenant, project string, every time.Duration) error {
	var secs *int64
	if every > 0 {
		v := int64((every + time.Second - 1) / time.Second)
		secs = &v
	}
	tag, err := s.db.Exec(ctx, `UPDATE projects SET checkpoint_every_s = $3 WHERE tenant_id = $1 AND name = $2`, tenant, project, secs)
	if err != nil {
		return translate(err, fmt.Sprintf("project %q", project))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("project %q: %w", project, errdefs.ErrNotFound)
	}
	return nil
}

// CheckpointEvery is the project's checkpoint interval, 0 = never.
func (s Projects) CheckpointEvery(ctx context.Context, tenant, project string) (time.Duration, error) {
	var secs *int64
	err := s.db.QueryRow(ctx, `SELECT checkpoint_every_s FROM projects WHERE tenant_id = $1 AND name = $2`, tenant, project).Scan(&secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("project %q: %w", project, errdefs.ErrNotFound)
	}
	if err != nil || secs == nil {
		return 0, translate(err, fmt.Sprintf("project %q", project))
	}
	return time.Duration(*secs) * time.Second, nil
}

// CheckpointDue lists node's Running retained instances whose project
// checkpoints them and whose last checkpoint (or start) is older than the
// project's interval, by the database's clock.
func (s Instances) CheckpointDue(ctx context.Context, node string) ([]Instance, error) {
	return collectInstances(s.db.Query(ctx, "SELECT "+instanceCols+instanceFrom+
		`WHERE i.node = $1 AND i.state = 'Running' AND i.retain AND p.checkpoint_every_s IS NOT NULL
		   AND COALESCE(i.checkpoint_at, i.last_transition_at) < now() - p.checkpoint_every_s * interval '1 second'
		 ORDER BY i.id`, node))
}

// InstanceCheckpoint is an instance's latest automatic checkpoint
// (checkpoint_every): a version, and for a project with volumes the
// coordinated checkpoint that holds it with the volumes' archives.
type InstanceCheckpoint struct {
	Version int
	At      time.Time
	// Number is the coordinated checkpoint of Version (`up --checkpoint
	// N`); 0 when the version alone was taken (a project without volumes).
	Number int
}

// SetInstanceCheckpoint records that instance id was checkpointed as version v now.
func (s Instances) SetInstanceCheckpoint(ctx context.Context, id string, v int) error {
	_, err := s.db.Exec(ctx, `UPDATE instances SET checkpoint_version = $2, checkpoint_at = now() WHERE id = $1`, id, v)
	return translate(err, fmt.Sprintf("instance %q", id))
}

// InstanceCheckpoint is instance id's latest checkpoint; ok false when none.
func (s Instances) InstanceCheckpoint(ctx context.Context, id string) (InstanceCheckpoint, bool, error) {
	var v *int
	var at *time.Time
	err := s.db.QueryRow(ctx, `SELECT checkpoint_version, checkpoint_at FROM instances WHERE id = $1`, id).Scan(&v, &at)
	if err != nil {
		return InstanceCheckpoint{}, false, translate(err, fmt.Sprintf("instance %q", id))
	}
	if v == nil || at == nil {
		return InstanceCheckpoint{}, false, nil
	}
	return InstanceCheckpoint{Version: *v, At: *at}, true, nil
}
