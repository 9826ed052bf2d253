package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// Version kinds.
const (
	KindBase      = "base"
	KindBuild     = "build"
	KindSnapshot  = "snapshot"
	KindMigration = "migration"
)

// Version states. Only StateReady versions can be current or restored.
const (
	StateCreating = "creating"
	StateReady    = "ready"
	StateFailed   = "failed"
	StateDeleting = "deleting"
)

// InstanceTerminated is the instance state DeleteProject waits for.
const InstanceTerminated = "Terminated"

// Project is one lineage of versions of a tenant.
type Project struct {
	ID          int64
	Tenant      string
	Name        string
	BaseImage   string          // repo@digest
	Spec        json.RawMessage // declared spec; {} when none
	Excludes    []string        // paths a save skips, besides the built-in ones
	Compression string          // layer encoding of saves; "" = default
	Current     int             // current version; 0 = none
	Prefetch    []string        // files instances read first after a restore, in order
	// PrefetchHead is how many of Prefetch the recorded instance had read
	// when its first command ended; 0: not known.
	PrefetchHead int
	Retention    Retention // which versions GC keeps; zero = all
	CreatedAt    time.Time
	UpdatedAt    time.Time

	// Egress is the network egress policy of the project's instances, in
	// runtime.ParseEgress's text form; "" = open. IsolateInstances keeps
	// them from connecting to each other (migration 0010).
	Egress           string
	IsolateInstances bool

	// Validate are argv commands every migration of the project runs in
	// its trial instance; RolloutFailure is set ({"rollout", "status",
	// "message", "at"}) while a rollout's failure to move the project is
	// unanswered: the next successful SetCurrent clears it (migration 0016).
	Validate       [][]string
	RolloutFailure json.RawMessage

	// RuntimeClass is the runtime class (runtime.Class) the project's
	// instances run on; "" = the node's default (migration 0032).
	RuntimeClass string
	// Docker: its instances may run dockerd (runtime.InstanceSpec.Docker);
	// only with RuntimeClass "gvisor", which the table checks (migration
	// 0041).
	Docker bool
}

// Version is one numbered version of a project.
type Version struct {
	Project    string // project name
	Number     int
	Kind       string // KindBase, KindBuild, KindSnapshot, KindMigration
	State      string // StateCreating, StateReady, StateFailed, StateDeleting
	Image      string // repo@digest
	Parent     int    // 0 = none
	Message    string
	SizeBytes  int64
	Layers     int
	Pinned     bool   // kept by retention
	InstanceID string // the instance a snapshot was saved from; "" = none
	CreatedAt  time.Time
	Current    bool // computed: the project's current version
}

var projectColumns = columns[Project]{
	{"p.id", func(p *Project) any { return &p.ID }},
	{"p.tenant_id", func(p *Project) any { return &p.Tenant }},
	{"p.name", func(p *Project) any { return &p.Name }},
	{"p.base_image", func(p *Project) any { return &p.BaseImage }},
	{"p.spec", func(p *Project) any { return &p.Spec }},
	{"p.excludes", func(p *Project) any { return &p.Excludes }},
	{"p.compression", func(p *Project) any { return &p.Compression }},
	{"COALESCE(p.current_version, 0)", func(p *Project) any { return &p.Current }},
	{"p.created_at", func(p *Project) any { return &p.CreatedAt }},
	{"p.updated_at", func(p *Project) any { return &p.UpdatedAt }},
	{"p.prefetch", func(p *Project) any { return &p.Prefetch }},
	{"p.prefetch_head", func(p *Project) any { return &p.PrefetchHead }},
	{"COALESCE(p.keep_last, 0)", func(p *Project) any { return &p.Retention.KeepLast }},
	{"COALESCE(p.keep_newer_than_s, 0)", func(p *Project) any { return seconds{&p.Retention.KeepNewerThan} }},
	{"p.egress", func(p *Project) any { return &p.Egress }},
	{"p.isolate_instances", func(p *Project) any { return &p.IsolateInstances }},
	{"p.validate", func(p *Project) any { return &p.Validate }},
	{"p.rollout_failure", func(p *Project) any { return &p.RolloutFailure }},
	{"p.runtime_class", func(p *Project) any { return &p.RuntimeClass }},
	{"p.docker", func(p *Project) any { return &p.Docker }},
}

// projectCols needs projects as p.
var projectCols = projectColumns.list()

func scanProject(row pgx.Row) (Project, error) { return projectColumns.scan(row) }

// versionColumns needs versions as v joined with projects as p.
var versionColumns = columns[Version]{
	{"p.name", func(v *Version) any { return &v.Project }},
	{"v.number", func(v *Version) any { return &v.Number }},
	{"v.kind", func(v *Version) any { return &v.Kind }},
	{"v.state", func(v *Version) any { return &v.State }},
	{"v.image", func(v *Version) any { return &v.Image }},
	{"COALESCE(v.parent, 0)", func(v *Version) any { return &v.Parent }},
	{"v.message", func(v *Version) any { return &v.Message }},
	{"v.size_bytes", func(v *Version) any { return &v.SizeBytes }},
	{"v.layers", func(v *Version) any { return &v.Layers }},
	{"v.pinned", func(v *Version) any { return &v.Pinned }},
	{"COALESCE(v.instance_id, '')", func(v *Version) any { return &v.InstanceID }},
	{"v.created_at", func(v *Version) any { return &v.CreatedAt }},
	{"COALESCE(v.number = p.current_version, false)", func(v *Version) any { return &v.Current }},
}

var versionCols = versionColumns.list()

func scanVersion(row pgx.Row) (Version, error) { return versionColumns.scan(row) }

func nullInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// CreateProject creates project p of p.Tenant (creating the tenant if
// needed) with version 1 as its current version, in one transaction. Version
// 1 is base (ready): its Kind defaults to KindBase and its Image to
// p.BaseImage; its Message, SizeBytes, Layers and Pinned are taken from base.
// Fails with ErrAlreadyExists if the tenant has a project of that name.
func (s Projects) CreateProject(ctx context.Context, p Project, base Version) (Project, Version, error) {
	if base.Kind == "" {
		base.Kind = KindBase
	}
	if base.Image == "" {
		base.Image = p.BaseImage
	}
	type pv struct {
		p Project
		v Version
	}
	r, err := WithTxV(ctx, s.db, func(tx pgx.Tx) (pv, error) {
		if err := ensureTenant(ctx, tx, p.Tenant); err != nil {
			return pv{}, err
		}
		// current_version=1 before version 1 exists: the foreign key is
		// deferred to commit.
		np, err := scanProject(tx.QueryRow(ctx, `INSERT INTO projects AS p
				(tenant_id, name, base_image, spec, excludes, compression, current_version, next_version,
				 egress, isolate_instances, runtime_class, docker)
			VALUES ($1, $2, $3, COALESCE($4::jsonb, '{}'), COALESCE($5::text[], '{}'), $6, 1, 2,
				COALESCE(NULLIF($7, ''), 'open'), $8, $9, $10)
			RETURNING `+projectCols,
			p.Tenant, p.Name, p.BaseImage, rawJSON(p.Spec), p.Excludes, p.Compression, p.Egress, p.IsolateInstances, p.RuntimeClass, p.Docker))
		if err != nil {
			return pv{}, translate(err, fmt.Sprintf("project %q", p.Name))
		}
		var v Version
		err = tx.QueryRow(ctx, `INSERT INTO versions (project_id, number, kind, state, image, message, size_bytes, layers, pinned)
			VALUES ($1, 1, $2, 'ready', $3, $4, $5, $6, $7) RETURNING created_at`,
			np.ID, base.Kind, base.Image, base.Message, base.SizeBytes, base.Layers, base.Pinned).Scan(&v.CreatedAt)
		if err != nil {
			return pv{}, translate(err, fmt.Sprintf("version 1 of project %q", p.Name))
		}
		v.Project, v.Number, v.Kind, v.State, v.Image = np.Name, 1, base.Kind, StateReady, base.Image
		v.Message, v.SizeBytes, v.Layers, v.Pinned, v.Current = base.Message, base.SizeBytes, base.Layers, base.Pinned, true
		return pv{np, v}, nil
	})
	return r.p, r.v, err
}

// GetProject returns project name of tenant; ErrNotFound if there is none.
func (s Projects) GetProject(ctx context.Context, tenant, name string) (Project, error) {
	p, err := scanProject(s.db.QueryRow(ctx, "SELECT "+projectCols+" FROM projects p WHERE p.tenant_id = $1 AND p.name = $2",
		tenant, name))
	if err != nil {
		return Project{}, translate(err, fmt.Sprintf("project %q", name))
	}
	return p, nil
}

// ListProjects returns tenant's projects ordered by name.
func (s Projects) ListProjects(ctx context.Context, tenant string) ([]Project, error) {
	rows, err := s.db.Query(ctx, "SELECT "+projectCols+" FROM projects p WHERE p.tenant_id = $1 ORDER BY p.name", tenant)
	if err != nil {
		return nil, translate(err, "list projects")
	}
	ps, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Project, error) { return scanProject(r) })
	return ps, translate(err, "list projects")
}

// DeleteProject deletes a project with its versions and instance rows, and
// returns the images ("repo@digest") its versions had, for the caller to
// delete those no other row owns (ImageOwned). It fails with
// ErrFailedPrecondition while any of its instances is not Terminated (the
// message names one).
func (s Projects) DeleteProject(ctx context.Context, tenant, name string) ([]string, error) {
	var images []string
	err := WithTx(ctx, s.db, func(tx pgx.Tx) error {
		var id int64
		// FOR UPDATE conflicts with the key-share lock an instance insert
		// takes on its project: no instance can appear after the check.
		err := tx.QueryRow(ctx, "SELECT id FROM projects WHERE tenant_id = $1 AND name = $2 FOR UPDATE", tenant, name).Scan(&id)
		if err != nil {
			return translate(err, fmt.Sprintf("project %q", name))
		}
		rows, err := tx.Query(ctx, `SELECT id || ' is ' || state FROM instances
			WHERE project_id = $1 AND state <> $2 ORDER BY created_at, id`, id, InstanceTerminated)
		if err != nil {
			return err
		}
		live, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(live) > 0 {
			return fmt.Errorf("project %q has %d instances not %s (%s): %w",
				name, len(live), InstanceTerminated, strings.Join(live[:min(len(live), 3)], ", "), errdefs.ErrFailedPrecondition)
		}
		rows, err = tx.Query(ctx, "SELECT DISTINCT image FROM versions WHERE project_id = $1 ORDER BY image", id)
		if err != nil {
			return err
		}
		if images, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, "DELETE FROM projects WHERE id = $1", id)
		return err
	})
	if err != nil {
		return nil, err
	}
	return images, nil
}

// GetVersion returns version n of a project; ErrNotFound if the project or
// the version does not exist.
func (s Versions) GetVersion(ctx context.Context, tenant, project string, n int) (Version, error) {
	v, err := scanVersion(s.db.QueryRow(ctx, "SELECT "+versionCols+` FROM versions v JOIN projects p ON p.id = v.project_id
		WHERE p.tenant_id = $1 AND p.name = $2 AND v.number = $3`, tenant, project, n))
	if err != nil {
		return Version{}, translate(err, fmt.Sprintf("version %d of project %q", n, project))
	}
	return v, nil
}

// ListVersions returns a project's versions by number; ErrNotFound if the
// project does not exist.
func (s Versions) ListVersions(ctx context.Context, tenant, project string) ([]Version, error) {
	return s.ListVersionsAfter(ctx, tenant, project, 0, 0)
}

// ListVersionsAfter is a page of ListVersions: at most limit versions (0 =
// all) numbered above after, in order. It reads by the versions' primary
// key, so a page costs the same at version 10 and at version 10,000.
func (s Versions) ListVersionsAfter(ctx context.Context, tenant, project string, after, limit int) ([]Version, error) {
	return WithTxV(ctx, s.db, func(tx pgx.Tx) ([]Version, error) {
		var id int64
		if err := tx.QueryRow(ctx, "SELECT id FROM projects WHERE tenant_id = $1 AND name = $2", tenant, project).Scan(&id); err != nil {
			return nil, translate(err, fmt.Sprintf("project %q", project))
		}
		rows, err := tx.Query(ctx, "SELECT "+versionCols+` FROM versions v JOIN projects p ON p.id = v.project_id
			WHERE p.id = $1 AND v.number > $2 ORDER BY v.number LIMIT NULLIF($3, 0)`, id, after, limit)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Version, error) { return scanVersion(r) })
	})
}

// Commit describes a version to record (step 6 of the save path).
type Commit struct {
	Tenant, Project string
	// Expected is the current the new version is based on (0 = none).
	Expected int
	// InstanceID, if set, is the instance saved from, and Generation the
	// generation the save was made under.
	InstanceID string
	Generation int64
	Kind       string // default KindSnapshot
	Image      string // repo@digest, already pushed and verified
	Message    string
	Parent     int // 0 = none
	SizeBytes  int64
	Layers     int
	LayerBytes int64 // the size of the layer this version added
	Validated  bool  // a build or migration without validation commands
	// NoSwitch records the version without trying to make it current
	// (a build asked not to switch).
	NoSwitch bool
	// Quota says whether the tenant's MaxVersions and MaxStoredBytes are
	// checked in the commit's transaction, under the tenant's row lock, so
	// that concurrent commits cannot together pass a limit: QuotaEnforced
	// (the zero value) or QuotaExempt (the node's own idle hibernation).
	Quota QuotaPolicy
	// OtherStoredBytes is what the tenant stores besides version layers
	// (declared volume sizes), counted with them against MaxStoredBytes.
	OtherStoredBytes int64
	// Checkpoint, if set, records the version as a checkpoint with its
	// volume archives, in the same transaction (see Checkpoint); the
	// archives' bytes count against MaxStoredBytes with the layer's.
	Checkpoint *CheckpointRecord
	// Spec is the declared spec a build was made from, kept with the
	// version (VersionSpec); nil = none.
	Spec json.RawMessage
}

// CommitVersion records a version whose image is pushed, in one transaction:
//
//  1. lock the project row (serialises commits of a project);
//  2. if c.InstanceID is set, lock the instance row and refuse with
//     ErrStaleGeneration, writing nothing, if its generation is not
//     c.Generation (a newer start or owner exists);
//  3. insert the version as ready with the project's next number;
//  4. compare-and-swap current: UPDATE projects SET current_version = new
//     WHERE current_version IS NOT DISTINCT FROM expected;
//  5. record the version as the instance's last_saved_version, unless
//     c.NoSwitch: a version that does not compete for current (a
//     hibernation, a build's) is not the instance's save, and its next save
//     must still expect what it expected before.
//
// If current is no longer c.Expected, the version stays (ready, not current),
// switched is false and err is nil: the caller reports the conflict and the
// user may switch to it later with SetCurrent.
//
// Unless c.Quota is QuotaExempt, a version beyond the tenant's MaxVersions
// for the project, or whose LayerBytes would take the tenant's stored bytes
// past MaxStoredBytes, is refused with ErrQuotaExceeded and nothing is
// written.
func (s Versions) CommitVersion(ctx context.Context, c Commit) (v Version, switched bool, err error) {
	return s.commitVersion(ctx, c, nil)
}

// commitVersion is CommitVersion; check, if set, runs first in the
// transaction and refuses the commit by failing.
func (s Versions) commitVersion(ctx context.Context, c Commit, check func(ctx context.Context, tx pgx.Tx) error) (v Version, switched bool, err error) {
	if c.Kind == "" {
		c.Kind = KindSnapshot
	}
	type res struct {
		v        Version
		switched bool
	}
	r, err := WithTxV(ctx, s.db, func(tx pgx.Tx) (res, error) {
		if check != nil {
			if err := check(ctx, tx); err != nil {
				return res{}, err
			}
		}
		var pid int64
		var n int
		// Locks are taken project first, then instance, everywhere both
		// are locked (DeleteProject locks the project, then deletes
		// instances), so the two cannot deadlock. NO KEY UPDATE blocks
		// other commits and SetCurrent, not instance inserts.
		err := tx.QueryRow(ctx, `SELECT id, next_version FROM projects WHERE tenant_id = $1 AND name = $2 FOR NO KEY UPDATE`,
			c.Tenant, c.Project).Scan(&pid, &n)
		if err != nil {
			return res{}, translate(err, fmt.Sprintf("project %q", c.Project))
		}
		if c.InstanceID != "" {
			var gen int64
			var ipid int64
			err := tx.QueryRow(ctx, "SELECT generation, project_id FROM instances WHERE id = $1 FOR NO KEY UPDATE", c.InstanceID).
				Scan(&gen, &ipid)
			if err != nil {
				return res{}, translate(err, fmt.Sprintf("instance %q", c.InstanceID))
			}
			if ipid != pid {
				return res{}, fmt.Errorf("instance %q is not of project %q: %w", c.InstanceID, c.Project, errdefs.ErrInvalidArgument)
			}
			if gen != c.Generation {
				return res{}, fmt.Errorf("save of instance %q under generation %d, newest is %d: %w",
					c.InstanceID, c.Generation, gen, errdefs.ErrStaleGeneration)
			}
		}
		if c.Quota != QuotaExempt {
			if err := checkCommitQuota(ctx, tx, c, pid); err != nil {
				return res{}, err
			}
		}
		if _, err := tx.Exec(ctx, "UPDATE projects SET next_version = $2 WHERE id = $1", pid, n+1); err != nil {
			return res{}, err
		}
		_, err = tx.Exec(ctx, `INSERT INTO versions (project_id, number, kind, state, image, parent, message, size_bytes, layers, instance_id, layer_bytes, validated)
			VALUES ($1, $2, $3, 'ready', $4, $5, $6, $7, $8, $9, $10, $11)`,
			pid, n, c.Kind, c.Image, nullInt(c.Parent), c.Message, c.SizeBytes, c.Layers, nullString(c.InstanceID), c.LayerBytes, c.Validated)
		if err != nil {
			return res{}, translate(err, fmt.Sprintf("version %d of project %q", n, c.Project))
		}
		if c.Checkpoint != nil {
			if err := recordCheckpoint(ctx, tx, c, pid, n); err != nil {
				return res{}, err
			}
		}
		if err := putVersionSpec(ctx, tx, pid, n, c.Spec); err != nil {
			return res{}, err
		}
		switched := false
		if !c.NoSwitch {
			tag, err := tx.Exec(ctx, `UPDATE projects SET current_version = $2, updated_at = now()
				WHERE id = $1 AND current_version IS NOT DISTINCT FROM $3`, pid, n, nullInt(c.Expected))
			if err != nil {
				return res{}, err
			}
			switched = tag.RowsAffected() == 1
		}
		if c.InstanceID != "" && !c.NoSwitch {
			if _, err := tx.Exec(ctx, "UPDATE instances SET last_saved_version = $2 WHERE id = $1", c.InstanceID, n); err != nil {
				return res{}, err
			}
		}
		v, err := scanVersion(tx.QueryRow(ctx, "SELECT "+versionCols+` FROM versions v JOIN projects p ON p.id = v.project_id
			WHERE v.project_id = $1 AND v.number = $2`, pid, n))
		return res{v, switched}, err
	})
	return r.v, r.switched, err
}

// SetCurrent makes version n the project's current by compare-and-swap:
// expected is the current the caller saw (0 = none); there is no blind
// write (a negative expected is ErrInvalidArgument). Fails with ErrNotFound
// if the project or version does not exist, ErrFailedPrecondition if the
// version is not ready, ErrConflict if current is not expected (nothing
// changed). Setting the version that is already current is a no-op.
func (s Versions) SetCurrent(ctx context.Context, tenant, project string, n, expected int) (Project, error) {
	if expected < 0 {
		return Project{}, fmt.Errorf("expected current %d of project %q: %w", expected, project, errdefs.ErrInvalidArgument)
	}
	// One statement: the project's row is locked only while it runs, so
	// contending switches queue on PostgreSQL's row lock for one
	// statement's time, as a bare compare-and-swap would (not for a
	// transaction's round trips). When it changes nothing, a second look
	// says why; if the reason is gone by then (current moved back), the
	// switch is tried again.
	for range 3 {
		p, err := scanProject(s.db.QueryRow(ctx, `UPDATE projects p SET current_version = $3, rollout_failure = NULL, updated_at = now()
			WHERE p.tenant_id = $1 AND p.name = $2 AND p.current_version IS NOT DISTINCT FROM NULLIF($4, 0) AND p.current_version IS DISTINCT FROM $3
			  AND EXISTS (SELECT 1 FROM versions v WHERE v.project_id = p.id AND v.number = $3 AND v.state = 'ready')
			RETURNING `+projectCols, tenant, project, n, expected))
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return Project{}, translate(err, fmt.Sprintf("project %q", project))
		}
		p, err = s.whyNotSwitched(ctx, tenant, project, n, expected)
		if err != nil || p.ID != 0 {
			return p, err
		}
	}
	return Project{}, fmt.Errorf("current version of project %q keeps changing: %w", project, errdefs.ErrConflict)
}

// whyNotSwitched explains a switch that changed nothing: the error, or the
// project when n is already current as expected (a no-op); neither when
// nothing stands in the way any more.
func (s Versions) whyNotSwitched(ctx context.Context, tenant, project string, n, expected int) (Project, error) {
	p, err := Projects{db: s.db}.GetProject(ctx, tenant, project)
	if err != nil {
		return Project{}, err
	}
	var state string
	err = s.db.QueryRow(ctx, "SELECT state FROM versions WHERE project_id = $1 AND number = $2", p.ID, n).Scan(&state)
	if err != nil {
		return Project{}, translate(err, fmt.Sprintf("version %d of project %q", n, project))
	}
	if state != StateReady {
		return Project{}, fmt.Errorf("version %d of project %q is %s, not %s: %w", n, project, state, StateReady, errdefs.ErrFailedPrecondition)
	}
	if p.Current != expected {
		return Project{}, fmt.Errorf("current version of project %q is %d, expected %d: %w", project, p.Current, expected, errdefs.ErrConflict)
	}
	if p.Current == n {
		return p, nil
	}
	return Project{}, nil
}

// Pin sets whether version n is pinned (kept by retention whatever its age).
// It fails with ErrFailedPrecondition for a version GC is deleting.
func (s Versions) Pin(ctx context.Context, tenant, project string, n int, pinned bool) (Version, error) {
	// The state test is in the UPDATE so that it is checked again after
	// waiting for a MarkCollectable that holds the row.
	v, err := scanVersion(s.db.QueryRow(ctx, `UPDATE versions v SET pinned = $4 FROM projects p
		WHERE p.id = v.project_id AND p.tenant_id = $1 AND p.name = $2 AND v.number = $3 AND v.state <> 'deleting'
		RETURNING `+versionCols, tenant, project, n, pinned))
	if errors.Is(err, pgx.ErrNoRows) {
		return Version{}, s.whyNotPinned(ctx, tenant, project, n)
	}
	if err != nil {
		return Version{}, translate(err, fmt.Sprintf("version %d of project %q", n, project))
	}
	return v, nil
}

// rawJSON passes empty JSON as NULL (so column defaults apply) and anything
// else as text for a ::jsonb cast.
func rawJSON(b json.RawMessage) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// marshalJSON encodes v for a jsonb argument; nil stays NULL.
func marshalJSON(v any) (*string, error) {
	if v == nil {
		return nil, nil
	}
	if r, ok := v.(json.RawMessage); ok {
		return rawJSON(r), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %v: %w", v, err, errdefs.ErrInvalidArgument)
	}
	return rawJSON(b), nil
}

// SetProjectSpec replaces a project's declared spec (volumes, packages).
func (s Projects) SetProjectSpec(ctx context.Context, tenant, name string, spec json.RawMessage) (Project, error) {
	p, err := scanProject(s.db.QueryRow(ctx, `UPDATE projects p SET spec = $3, updated_at = now()
		WHERE p.tenant_id = $1 AND p.name = $2 RETURNING `+projectCols, tenant, name, rawJSON(spec)))
	if err != nil {
		return Project{}, translate(err, fmt.Sprintf("project %q", name))
	}
	return p, nil
}

// SetProjectPrefetch records the files the project's instances read first,
// and how many of them were read by the end of the first command (head;
// 0: not known). Unless replace is set, a list shorter than the project's
// is not recorded (no error): a recording cut short does not replace a
// longer one.
func (s Projects) SetProjectPrefetch(ctx context.Context, tenant, name string, files []string, head int, replace bool) error {
	head = min(max(head, 0), len(files))
	tag, err := s.db.Exec(ctx, `UPDATE projects SET prefetch = $3, prefetch_head = $4, updated_at = now()
		WHERE tenant_id = $1 AND name = $2 AND ($5 OR cardinality(prefetch) <= $6)`,
		tenant, name, files, head, replace, len(files))
	if err != nil {
		return translate(err, fmt.Sprintf("project %q", name))
	}
	if tag.RowsAffected() == 0 && replace {
		return fmt.Errorf("project %q: %w", name, errdefs.ErrNotFound)
	}
	return nil
}
