package versions

import (
	"context"
	"fmt"
	"time"
)

// EgressDenial is a row of a project's egress denial log.
type EgressDenial struct {
	ID                                 int64
	At                                 time.Time
	Instance, Kind, Name, Dest, Reason string
}

// keptDenials is how many denials a project's log keeps (the newest).
const keptDenials = 1000

// AddEgressDenial appends to the denial log of project id and drops what
// is beyond the newest keptDenials. An unknown project is ErrFailedPrecondition
// (its row is gone: a denial of a deleted project is dropped by the caller).
func (s Projects) AddEgressDenial(ctx context.Context, projectID int64, d EgressDenial) error {
	var id int64
	err := s.db.QueryRow(ctx, `INSERT INTO egress_denials (project_id, instance, kind, name, dest, reason, at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`,
		projectID, d.Instance, d.Kind, d.Name, d.Dest, d.Reason, d.At).Scan(&id)
	if err != nil {
		return translate(err, fmt.Sprintf("egress denial of project %d", projectID))
	}
	if id%100 == 0 {
		_, err = s.db.Exec(ctx, `DELETE FROM egress_denials WHERE project_id = $1 AND id <= $2`, projectID, id-keptDenials)
	}
	return translate(err, fmt.Sprintf("egress denials of project %d", projectID))
}

// EgressDenials returns the newest denials of a project, newest first, at
// most limit, older than before when before > 0. ErrNotFound for an unknown
// project.
func (s Projects) EgressDenials(ctx context.Context, tenant, project string, limit int, before int64) ([]EgressDenial, error) {
	p, err := s.GetProject(ctx, tenant, project)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `SELECT id, at, instance, kind, name, dest, reason FROM egress_denials
		WHERE project_id = $1 AND ($2 = 0 OR id < $2) ORDER BY id DESC LIMIT $3`, p.ID, before, limit)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("egress denials of project %q", project))
	}
	defer rows.Close()
	var out []EgressDenial
	for rows.Next() {
		var d EgressDenial
		if err := rows.Scan(&d.ID, &d.At, &d.Instance, &d.Kind, &d.Name, &d.Dest, &d.Reason); err != nil {
			return nil, translate(err, "egress denial")
		}
		out = append(out, d)
	}
	return out, translate(rows.Err(), "egress denials")
}

// ProjectTenant returns the tenant of project id. ErrNotFound when gone.
func (s Projects) ProjectTenant(ctx context.Context, id int64) (string, error) {
	var t string
	err := s.db.QueryRow(ctx, `SELECT tenant_id FROM projects WHERE id = $1`, id).Scan(&t)
	return t, translate(err, fmt.Sprintf("project %d", id))
}

// Secret is a row of a tenant's secret store. Sealed is the encrypted
// value (the store never sees it in clear); Host "" = not bound; Scheme
// "http" or "https", the requests the binding applies to.
type Secret struct {
	Name                         string
	Sealed                       []byte
	Host, Header, Format, Scheme string
	CreatedAt, UpdatedAt         time.Time
}

const secretCols = `name, sealed, coalesce(host, ''), header, format, scheme, created_at, updated_at`

func scanSecret(row interface{ Scan(...any) error }) (Secret, error) {
	var s Secret
	err := row.Scan(&s.Name, &s.Sealed, &s.Host, &s.Header, &s.Format, &s.Scheme, &s.CreatedAt, &s.UpdatedAt)
	return s, err
}

// PutSecret stores or replaces the sealed value of a tenant's secret,
// keeping its binding.
func (s Tenants) PutSecret(ctx context.Context, tenant, name string, sealed []byte) (Secret, error) {
	sec, err := scanSecret(s.db.QueryRow(ctx, `INSERT INTO secrets (tenant_id, name, sealed) VALUES ($1, $2, $3)
		ON CONFLICT (tenant_id, name) DO UPDATE SET sealed = excluded.sealed, updated_at = now()
		RETURNING `+secretCols, tenant, name, sealed))
	return sec, translate(err, fmt.Sprintf("secret %q", name))
}

// BindSecret sets (b.Host != "") or clears the binding of a tenant's
// secret (b.Name and b.Sealed are not read). ErrNotFound for an unknown
// secret.
func (s Tenants) BindSecret(ctx context.Context, tenant, name string, b Secret) (Secret, error) {
	if b.Scheme == "" {
		b.Scheme = "http"
	}
	sec, err := scanSecret(s.db.QueryRow(ctx, `UPDATE secrets SET host = nullif($3, ''), header = $4, format = $5, scheme = $6, updated_at = now()
		WHERE tenant_id = $1 AND name = $2 RETURNING `+secretCols, tenant, name, b.Host, b.Header, b.Format, b.Scheme))
	return sec, translate(err, fmt.Sprintf("secret %q", name))
}

// DeleteSecret removes a tenant's secret. ErrNotFound for an unknown one.
func (s Tenants) DeleteSecret(ctx context.Context, tenant, name string) (Secret, error) {
	sec, err := scanSecret(s.db.QueryRow(ctx, `DELETE FROM secrets WHERE tenant_id = $1 AND name = $2 RETURNING `+secretCols, tenant, name))
	return sec, translate(err, fmt.Sprintf("secret %q", name))
}

// Secrets lists a tenant's secrets by name; boundOnly keeps those with a
// binding.
func (s Tenants) Secrets(ctx context.Context, tenant string, boundOnly bool) ([]Secret, error) {
	rows, err := s.db.Query(ctx, `SELECT `+secretCols+` FROM secrets WHERE tenant_id = $1 AND (NOT $2 OR host IS NOT NULL) ORDER BY name`, tenant, boundOnly)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("secrets of tenant %q", tenant))
	}
	defer rows.Close()
	var out []Secret
	for rows.Next() {
		sec, err := scanSecret(rows)
		if err != nil {
			return nil, translate(err, "secret")
		}
		out = append(out, sec)
	}
	return out, translate(rows.Err(), "secrets")
}
