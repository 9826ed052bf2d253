package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
)

// Instance is a container of a project on one node.
type Instance struct {
	ID      string
	Tenant  string
	Project string // project name
	Node    string
	// Version is the version the instance started from: the expected
	// current of its next save. LastSavedVersion is its latest committed
	// save (0 = none).
	Version          int
	LastSavedVersion int
	Generation       int64 // fencing token; 1 at creation
	State            types.InstanceState
	Reason           string // machine-readable cause of the last transition
	Message          string
	Retain           bool // keep the writable layer when stopped
	// LayerVersion is the version whose image the rootfs sits on when that
	// is not Version (after waking from hibernation); 0 = Version.
	LayerVersion int
	// HibernatedVersion is set while a stopped instance has no local layer
	// and lives as that version; 0 = not hibernated.
	HibernatedVersion int
	// HibernatedCheckpoint, with HibernatedVersion, is the checkpoint
	// whose memory image a wake resumes (hibernated with memory); it stays
	// set through the wake's Pending and is cleared once the instance
	// runs. 0 = none: a wake starts from the version alone.
	HibernatedCheckpoint int
	// MemoryNotKept is the stable reason why a hibernation asked to keep
	// memory (idle action hibernate-memory) kept only the disk; "" while
	// not so. Cleared once the instance runs again.
	MemoryNotKept    string
	ExpiresAt        *time.Time // absolute; nil = no TTL
	CreatedAt        time.Time
	LastTransitionAt time.Time
	Spec             json.RawMessage // {} when none
	Placement        string          // why the instance runs on Node ("" = not recorded)
}

// instanceCols needs instances as i joined with projects as p.
const instanceCols = `i.id, i.tenant_id, p.name, i.node, i.version, COALESCE(i.last_saved_version, 0), i.generation,
	i.state, i.reason, i.message, i.retain, i.expires_at, i.created_at, i.last_transition_at, i.spec,
	COALESCE(i.layer_version, 0), COALESCE(i.hibernated_version, 0), i.placement,
	COALESCE(i.hibernated_checkpoint, 0), i.memory_not_kept`

const instanceFrom = " FROM instances i JOIN projects p ON p.id = i.project_id "

func scanInstance(row pgx.Row) (Instance, error) {
	var in Instance
	err := row.Scan(&in.ID, &in.Tenant, &in.Project, &in.Node, &in.Version, &in.LastSavedVersion, &in.Generation,
		&in.State, &in.Reason, &in.Message, &in.Retain, &in.ExpiresAt, &in.CreatedAt, &in.LastTransitionAt, &in.Spec,
		&in.LayerVersion, &in.HibernatedVersion, &in.Placement, &in.HibernatedCheckpoint, &in.MemoryNotKept)
	return in, err
}

func collectInstances(rows pgx.Rows, err error) ([]Instance, error) {
	if err != nil {
		return nil, translate(err, "list instances")
	}
	ins, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Instance, error) { return scanInstance(r) })
	return ins, translate(err, "list instances")
}

// CreateInstance records a new instance of in.Project (of in.Tenant) with
// generation 1; State defaults to "Pending". Fails with ErrNotFound if the
// project does not exist, ErrAlreadyExists if the id is taken.
func (s Instances) CreateInstance(ctx context.Context, in Instance) (Instance, error) {
	if in.ID == "" {
		return Instance{}, fmt.Errorf("empty instance id: %w", errdefs.ErrInvalidArgument)
	}
	if in.State == "" {
		in.State = "Pending"
	}
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (Instance, error) {
		// The project's row, shared, orders this with a GC's marking (which
		// holds it exclusively): either the GC sees this instance and keeps
		// its version, or this sees the version deleting and refuses.
		var state *string
		err := tx.QueryRow(ctx, `SELECT v.state FROM projects p
			LEFT JOIN versions v ON v.project_id = p.id AND v.number = $3
			WHERE p.tenant_id = $1 AND p.name = $2 FOR SHARE OF p`, in.Tenant, in.Project, in.Version).Scan(&state)
		if errors.Is(err, pgx.ErrNoRows) {
			return Instance{}, fmt.Errorf("project %q: %w", in.Project, errdefs.ErrNotFound)
		}
		if err != nil {
			return Instance{}, translate(err, fmt.Sprintf("instance %q", in.ID))
		}
		if state == nil {
			return Instance{}, fmt.Errorf("version %d of project %q: %w", in.Version, in.Project, errdefs.ErrNotFound)
		}
		if *state != StateReady {
			return Instance{}, fmt.Errorf("version %d of project %q is %s, only ready versions can be started: %w", in.Version, in.Project, *state, errdefs.ErrFailedPrecondition)
		}
		if err := checkInstanceQuota(ctx, tx, in.Tenant); err != nil {
			return Instance{}, err
		}
		spec := rawJSON(in.Spec)
		tag, err := tx.Exec(ctx, `INSERT INTO instances
				(id, project_id, tenant_id, node, version, generation, state, reason, message, retain, expires_at, spec, placement)
			SELECT $1, p.id, p.tenant_id, $4, $5, 1, $6, $7, $8, $9, $10, COALESCE($11::jsonb, '{}'), $12
			FROM projects p WHERE p.tenant_id = $2 AND p.name = $3`,
			in.ID, in.Tenant, in.Project, in.Node, in.Version, in.State, in.Reason, in.Message, in.Retain, in.ExpiresAt, spec, in.Placement)
		if err != nil {
			return Instance{}, translate(err, fmt.Sprintf("instance %q", in.ID))
		}
		if tag.RowsAffected() == 0 {
			return Instance{}, fmt.Errorf("project %q: %w", in.Project, errdefs.ErrNotFound)
		}
		return scanInstance(tx.QueryRow(ctx, "SELECT "+instanceCols+instanceFrom+"WHERE i.id = $1", in.ID))
	})
}

// GetInstance returns instance id of tenant; tenant "" matches any tenant
// (internal callers: reconciler, reaper).
func (s Instances) GetInstance(ctx context.Context, tenant, id string) (Instance, error) {
	in, err := scanInstance(s.db.QueryRow(ctx, "SELECT "+instanceCols+instanceFrom+
		"WHERE i.id = $1 AND ($2 = '' OR (i.tenant_id = $2 AND "+notPooled+"))", id, tenant))
	if err != nil {
		return Instance{}, translate(err, fmt.Sprintf("instance %q", id))
	}
	return in, nil
}

// ListInstances returns tenant's instances, of one project or of all
// (project ""), oldest first. ErrNotFound if a named project does not exist.
func (s Instances) ListInstances(ctx context.Context, tenant, project string) ([]Instance, error) {
	return s.ListInstancesAfter(ctx, tenant, project, InstanceCursor{}, 0)
}

// InstanceCursor is where a page of instances ends: the last instance's
// creation time and id (the list's order). The zero cursor is the start.
type InstanceCursor struct {
	CreatedAt time.Time
	ID        string
}

// ListInstancesAfter is a page of ListInstances: at most limit instances
// (0 = all) after the cursor, in order.
func (s Instances) ListInstancesAfter(ctx context.Context, tenant, project string, after InstanceCursor, limit int) ([]Instance, error) {
	var at *time.Time
	if !after.CreatedAt.IsZero() {
		at = &after.CreatedAt
	}
	ins, err := collectInstances(s.db.Query(ctx, "SELECT "+instanceCols+instanceFrom+
		`WHERE i.tenant_id = $1 AND ($2 = '' OR p.name = $2) AND ($3::timestamptz IS NULL OR (i.created_at, i.id) > ($3, $4))
		  AND `+notPooled+`
		ORDER BY i.created_at, i.id LIMIT NULLIF($5, 0)`, tenant, project, at, after.ID, limit))
	if err != nil || len(ins) > 0 || project == "" {
		return ins, err
	}
	if _, err := (Projects{db: s.db}).GetProject(ctx, tenant, project); err != nil {
		return nil, err
	}
	return ins, nil
}

// ListNodeInstances returns every instance placed on node, oldest first.
func (s Instances) ListNodeInstances(ctx context.Context, node string) ([]Instance, error) {
	return collectInstances(s.db.Query(ctx, "SELECT "+instanceCols+instanceFrom+
		"WHERE i.node = $1 ORDER BY i.created_at, i.id", node))
}

// Transition sets an instance's state, reason and message (and
// last_transition_at) only if its state is one of from; an empty from
// matches any state. Otherwise it fails with ErrFailedPrecondition, naming
// the current state, and changes nothing.
//
// A transition that starts an instance again (from a state that holds no
// compute, such as Stopped, to one that does) checks the tenant's
// MaxInstances in the same transaction, under the tenant's row lock as
// CreateInstance does, so concurrent starts cannot both take the last
// place: ErrQuotaExceeded, nothing changed.
func (s Instances) Transition(ctx context.Context, id string, from []types.InstanceState, to types.InstanceState, reason, message string) (Instance, error) {
	return s.transition(ctx, id, from, to, reason, message, Hibernation{})
}

// Hibernation is what a hibernated instance lives as: a version, and the
// checkpoint whose memory image its wake resumes (0 = none), or why memory
// was asked for and not kept.
type Hibernation struct {
	Version       int
	Checkpoint    int
	MemoryNotKept string
}

// Hibernated records, in the same update as the transition to Stopped with
// reason and message, that a Stopped instance now lives as version v (its
// local layer is to be freed): no reader sees one without the other.
func (s Instances) Hibernated(ctx context.Context, id string, v int, reason, message string) (Instance, error) {
	if v <= 0 {
		return Instance{}, fmt.Errorf("hibernation version %d: %w", v, errdefs.ErrInvalidArgument)
	}
	return s.transition(ctx, id, []types.InstanceState{types.StateStopped}, types.StateStopped, reason, message, Hibernation{Version: v})
}

// StopHibernated is Hibernated for an instance still Stopping: the stop
// and the hibernation are one update, so no reader sees it Stopped with
// its layer about to go and no version to wake from.
func (s Instances) StopHibernated(ctx context.Context, id string, v int, reason, message string) (Instance, error) {
	if v <= 0 {
		return Instance{}, fmt.Errorf("hibernation version %d: %w", v, errdefs.ErrInvalidArgument)
	}
	return s.transition(ctx, id, []types.InstanceState{types.StateStopping}, types.StateStopped, reason, message, Hibernation{Version: v})
}

// StopHibernatedWith is StopHibernated recording the whole hibernation: a
// checkpoint whose memory image the wake resumes, or why memory was not
// kept.
func (s Instances) StopHibernatedWith(ctx context.Context, id string, h Hibernation, reason, message string) (Instance, error) {
	if h.Version <= 0 {
		return Instance{}, fmt.Errorf("hibernation version %d: %w", h.Version, errdefs.ErrInvalidArgument)
	}
	return s.transition(ctx, id, []types.InstanceState{types.StateStopping}, types.StateStopped, reason, message, h)
}

// TransitionHibernating is Transition recording checkpoint as the one
// the instance is being hibernated on (Running -> Stopping of a
// hibernation with memory), in the same update: a crash before the stop
// is recorded leaves it for Rehibernate.
func (s Instances) TransitionHibernating(ctx context.Context, id string, from []types.InstanceState, to types.InstanceState, checkpoint int, reason, message string) (Instance, error) {
	if checkpoint <= 0 {
		return Instance{}, fmt.Errorf("hibernation checkpoint %d: %w", checkpoint, errdefs.ErrInvalidArgument)
	}
	return s.transition(ctx, id, from, to, reason, message, Hibernation{Checkpoint: checkpoint})
}

// Rehibernate puts an instance whose hibernation or wake with memory was
// cut short (left Stopping or Pending by a crash, or its resume failed)
// back to Stopped, hibernated on its checkpoint's version, so that the
// next access wakes it with its processes. It fails with
// ErrFailedPrecondition unless the instance is Stopping or Pending, not
// hibernated, with a hibernated checkpoint that still exists.
func (s Instances) Rehibernate(ctx context.Context, id, reason, message string) (Instance, error) {
	in, err := scanInstance(s.db.QueryRow(ctx, `UPDATE instances i
		SET state = 'Stopped', reason = $2, message = $3, last_transition_at = now(), hibernated_version = c.version
		FROM projects p, checkpoints c
		WHERE p.id = i.project_id AND i.id = $1 AND i.state IN ('Pending', 'Stopping') AND i.hibernated_version IS NULL
		  AND i.hibernated_checkpoint IS NOT NULL AND c.project_id = i.project_id AND c.number = i.hibernated_checkpoint
		RETURNING `+instanceCols, id, reason, message))
	if errors.Is(err, pgx.ErrNoRows) {
		return Instance{}, fmt.Errorf("instance %q is not a hibernation or wake with memory cut short: %w", id, errdefs.ErrFailedPrecondition)
	}
	if err != nil {
		return Instance{}, translate(err, fmt.Sprintf("instance %q", id))
	}
	return in, nil
}

// transition is Transition that also records hibernated when its Version
// is > 0. A transition to Running clears the hibernated checkpoint and
// memory_not_kept: the instance runs again.
func (s Instances) transition(ctx context.Context, id string, from []types.InstanceState, to types.InstanceState, reason, message string, hibernated Hibernation) (Instance, error) {
	if from == nil {
		from = []types.InstanceState{}
	}
	if slices.Contains(computeStates, to) {
		return WithTxV(ctx, s.db, func(tx pgx.Tx) (Instance, error) {
			var state types.InstanceState
			var tenant string
			// The instance first, then the tenant: CommitVersion locks in
			// that order too.
			err := tx.QueryRow(ctx, "SELECT state, tenant_id FROM instances WHERE id = $1 FOR NO KEY UPDATE", id).Scan(&state, &tenant)
			if err != nil {
				return Instance{}, translate(err, fmt.Sprintf("instance %q", id))
			}
			if len(from) > 0 && !slices.Contains(from, state) {
				return Instance{}, notInState(id, state, from, to)
			}
			if !slices.Contains(computeStates, state) {
				if err := checkInstanceQuota(ctx, tx, tenant); err != nil {
					return Instance{}, err
				}
			}
			return updateState(ctx, tx, id, from, to, reason, message, hibernated)
		})
	}
	in, err := updateState(ctx, s.db, id, from, to, reason, message, hibernated)
	if err == nil || !errors.Is(err, errNoRow) {
		return in, err
	}
	var state types.InstanceState
	if err := s.db.QueryRow(ctx, "SELECT state FROM instances WHERE id = $1", id).Scan(&state); err != nil {
		return Instance{}, translate(err, fmt.Sprintf("instance %q", id))
	}
	return Instance{}, notInState(id, state, from, to)
}

// errNoRow is updateState's answer when no instance matched.
var errNoRow = errors.New("no such instance in those states")

func updateState(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, id string, from []types.InstanceState, to types.InstanceState, reason, message string, hibernated Hibernation) (Instance, error) {
	in, err := scanInstance(db.QueryRow(ctx, `UPDATE instances i
		SET state = $2, reason = $3, message = $4, last_transition_at = now(),
		    hibernated_version = COALESCE(NULLIF($6::int, 0), i.hibernated_version),
		    hibernated_checkpoint = CASE WHEN $2 = 'Running' THEN NULL WHEN $6::int > 0 OR $7::int > 0 THEN NULLIF($7::int, 0) ELSE i.hibernated_checkpoint END,
		    memory_not_kept = CASE WHEN $2 = 'Running' THEN '' WHEN $6::int > 0 THEN $8 ELSE i.memory_not_kept END
		FROM projects p WHERE p.id = i.project_id AND i.id = $1 AND (cardinality($5::text[]) = 0 OR i.state = ANY($5))
		RETURNING `+instanceCols, id, string(to), reason, message, stateNames(from), hibernated.Version, hibernated.Checkpoint, hibernated.MemoryNotKept))
	if errors.Is(err, pgx.ErrNoRows) {
		return Instance{}, errNoRow
	}
	if err != nil {
		return Instance{}, translate(err, fmt.Sprintf("instance %q", id))
	}
	return in, nil
}

func notInState(id string, state types.InstanceState, from []types.InstanceState, to types.InstanceState) error {
	return errdefs.WithDetails(fmt.Errorf("instance %q is %s, not %s: cannot become %s: %w",
		id, state, strings.Join(stateNames(from), " or "), to, errdefs.ErrFailedPrecondition), map[string]any{"state": state})
}

// stateNames is states as the text[] the queries compare with.
func stateNames(states []types.InstanceState) []string {
	out := make([]string, len(states))
	for i, st := range states {
		out[i] = string(st)
	}
	return out
}

// BumpGeneration increments an instance's generation (on every start or
// ownership move) and returns the new one. Saves made under older
// generations are then refused by CommitVersion.
func (s Instances) BumpGeneration(ctx context.Context, id string) (int64, error) {
	var gen int64
	err := s.db.QueryRow(ctx, "UPDATE instances SET generation = generation + 1 WHERE id = $1 RETURNING generation", id).Scan(&gen)
	if err != nil {
		return 0, translate(err, fmt.Sprintf("instance %q", id))
	}
	return gen, nil
}

// SetNode records the node an instance is placed on (use with
// BumpGeneration when ownership moves).
func (s Instances) SetNode(ctx context.Context, id, node string) (Instance, error) {
	return s.updateInstance(ctx, id, "node = $2", node)
}

// SetExpiry sets an instance's absolute expiry; nil removes it.
func (s Instances) SetExpiry(ctx context.Context, id string, at *time.Time) (Instance, error) {
	return s.updateInstance(ctx, id, "expires_at = $2", at)
}

func (s Instances) updateInstance(ctx context.Context, id, set string, arg any) (Instance, error) {
	in, err := scanInstance(s.db.QueryRow(ctx, "UPDATE instances i SET "+set+
		" FROM projects p WHERE p.id = i.project_id AND i.id = $1 RETURNING "+instanceCols, id, arg))
	if err != nil {
		return Instance{}, translate(err, fmt.Sprintf("instance %q", id))
	}
	return in, nil
}

// ExpiredInstances lists the instances of node whose expiry has passed and
// that are not yet Terminated or Failed.
func (s Instances) ExpiredInstances(ctx context.Context, node string, now time.Time) ([]Instance, error) {
	rows, err := s.db.Query(ctx, "SELECT "+instanceCols+instanceFrom+
		`WHERE i.node = $1 AND i.expires_at IS NOT NULL AND i.expires_at <= $2
		   AND i.state NOT IN ('Terminated', 'Failed') AND NOT (i.retain AND i.state = 'Stopped')
		 ORDER BY i.expires_at`, node, now)
	return collectInstances(rows, err)
}

// NextExpiry returns the earliest expiry among node's live instances, nil
// when none expires.
func (s Instances) NextExpiry(ctx context.Context, node string) (*time.Time, error) {
	var at *time.Time
	err := s.db.QueryRow(ctx, `SELECT min(expires_at) FROM instances
		WHERE node = $1 AND state NOT IN ('Terminated', 'Failed') AND NOT (retain AND state = 'Stopped')`, node).Scan(&at)
	if err != nil {
		return nil, translate(err, "next expiry")
	}
	return at, nil
}

// Rehome begins the wake of a hibernated Stopped instance on node: in one
// update it becomes Pending (reason, message) there, sitting on
// layerVersion, with a new generation and its hibernation cleared (a
// hibernated checkpoint stays, for a wake with memory to fall back on); the
// caller then provisions it. One update, not a transition and then a
// rehome: a crash between the two left a Pending row that still looked
// hibernated, which no recovery matched (the reconciler failed it at the
// provision timeout). A start, so the tenant's MaxInstances is checked as
// Transition does. It fails with ErrFailedPrecondition unless the instance
// is Stopped and hibernated.
func (s Instances) Rehome(ctx context.Context, id, node string, layerVersion int, reason, message string) (Instance, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) (Instance, error) {
		var state types.InstanceState
		var tenant string
		var hibernated *int
		err := tx.QueryRow(ctx, "SELECT state, tenant_id, hibernated_version FROM instances WHERE id = $1 FOR NO KEY UPDATE", id).
			Scan(&state, &tenant, &hibernated)
		if err != nil {
			return Instance{}, translate(err, fmt.Sprintf("instance %q", id))
		}
		if state != types.StateStopped {
			return Instance{}, notInState(id, state, []types.InstanceState{types.StateStopped}, types.StatePending)
		}
		if hibernated == nil {
			return Instance{}, errdefs.WithDetails(fmt.Errorf("instance %q is not hibernated: %w", id, errdefs.ErrFailedPrecondition),
				map[string]any{"state": state})
		}
		if err := checkInstanceQuota(ctx, tx, tenant); err != nil {
			return Instance{}, err
		}
		return scanInstance(tx.QueryRow(ctx, `UPDATE instances i
			SET state = 'Pending', reason = $4, message = $5, last_transition_at = now(),
			    node = $2, layer_version = $3, hibernated_version = NULL, generation = i.generation + 1
			FROM projects p WHERE p.id = i.project_id AND i.id = $1
			RETURNING `+instanceCols, id, node, layerVersion, reason, message))
	})
}

// IdleRetained lists node's stopped, retained, not hibernated instances
// whose last transition is older than before.
func (s Instances) IdleRetained(ctx context.Context, node string, before time.Time) ([]Instance, error) {
	rows, err := s.db.Query(ctx, "SELECT "+instanceCols+instanceFrom+
		`WHERE i.node = $1 AND i.retain AND i.state = 'Stopped' AND i.hibernated_version IS NULL
		   AND i.last_transition_at < $2 ORDER BY i.last_transition_at`, node, before)
	return collectInstances(rows, err)
}

// InstanceCount is the number of node's instances in one state, and how
// many of them have no expiry.
type InstanceCount struct {
	State    types.InstanceState
	Count    int
	NoExpiry int
}

// CountInstances counts node's instances by state.
func (s Instances) CountInstances(ctx context.Context, node string) ([]InstanceCount, error) {
	rows, err := s.db.Query(ctx, `SELECT state, count(*), count(*) FILTER (WHERE expires_at IS NULL)
		FROM instances WHERE node = $1 GROUP BY state ORDER BY state`, node)
	if err != nil {
		return nil, translate(err, "count instances")
	}
	defer rows.Close()
	var out []InstanceCount
	for rows.Next() {
		var c InstanceCount
		if err := rows.Scan(&c.State, &c.Count, &c.NoExpiry); err != nil {
			return nil, translate(err, "count instances")
		}
		out = append(out, c)
	}
	return out, translate(rows.Err(), "count instances")
}
