package versions

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PreviewKey returns the cluster's preview token key, storing candidate as
// the key when there is none yet: concurrent first calls on several nodes
// all return the one key that was stored.
func (s Nodes) PreviewKey(ctx context.Context, candidate []byte) ([]byte, error) {
	if _, err := s.db.Exec(ctx, `INSERT INTO preview_key (id, key) VALUES (true, $1) ON CONFLICT (id) DO NOTHING`, candidate); err != nil {
		return nil, translate(err, "preview key")
	}
	var key []byte
	if err := s.db.QueryRow(ctx, `SELECT key FROM preview_key WHERE id`).Scan(&key); err != nil {
		return nil, translate(err, "preview key")
	}
	return key, nil
}

// PublicPorts returns the public ports of tenant's project, ascending.
// ErrNotFound for an unknown project.
func (s Projects) PublicPorts(ctx context.Context, tenant, project string) ([]int, error) {
	if _, err := s.GetProject(ctx, tenant, project); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `SELECT pp.port FROM project_ports pp JOIN projects p ON p.id = pp.project_id
		WHERE p.tenant_id = $1 AND p.name = $2 AND pp.public ORDER BY pp.port`, tenant, project)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("ports of project %q", project))
	}
	defer rows.Close()
	ports := []int{}
	for rows.Next() {
		var p int
		if err := rows.Scan(&p); err != nil {
			return nil, translate(err, fmt.Sprintf("ports of project %q", project))
		}
		ports = append(ports, p)
	}
	return ports, translate(rows.Err(), fmt.Sprintf("ports of project %q", project))
}

// ForwardedPort is a forwarded port of a project (types.ForwardedPort).
type ForwardedPort struct {
	Port   int
	Label  string
	Scheme string
}

// ForwardedPorts returns the forwarded ports of tenant's project,
// ascending. ErrNotFound for an unknown project.
func (s Projects) ForwardedPorts(ctx context.Context, tenant, project string) ([]ForwardedPort, error) {
	if _, err := s.GetProject(ctx, tenant, project); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, `SELECT pp.port, pp.label, pp.scheme FROM project_ports pp JOIN projects p ON p.id = pp.project_id
		WHERE p.tenant_id = $1 AND p.name = $2 AND pp.forwarded ORDER BY pp.port`, tenant, project)
	if err != nil {
		return nil, translate(err, fmt.Sprintf("ports of project %q", project))
	}
	defer rows.Close()
	out := []ForwardedPort{}
	for rows.Next() {
		var f ForwardedPort
		if err := rows.Scan(&f.Port, &f.Label, &f.Scheme); err != nil {
			return nil, translate(err, fmt.Sprintf("ports of project %q", project))
		}
		out = append(out, f)
	}
	return out, translate(rows.Err(), fmt.Sprintf("ports of project %q", project))
}

// SetPublicPorts replaces the public ports of tenant's project with ports
// (validated by the caller), in one transaction; its forwarded ports
// stay. ErrNotFound for an unknown project.
func (s Projects) SetPublicPorts(ctx context.Context, tenant, project string, ports []int) error {
	return s.SetPorts(ctx, tenant, project, ports, nil)
}

// SetPorts replaces the public ports of tenant's project and, unless
// forwarded is nil, its forwarded ports (both validated by the caller,
// ports unique), in one transaction. ErrNotFound for an unknown project.
func (s Projects) SetPorts(ctx context.Context, tenant, project string, public []int, forwarded []ForwardedPort) error {
	return WithTx(ctx, s.db, func(tx pgx.Tx) error {
		var id int64
		if err := tx.QueryRow(ctx, `SELECT id FROM projects WHERE tenant_id = $1 AND name = $2 FOR UPDATE`, tenant, project).Scan(&id); err != nil {
			return translate(err, fmt.Sprintf("project %q", project))
		}
		what := fmt.Sprintf("ports of project %q", project)
		if _, err := tx.Exec(ctx, `UPDATE project_ports SET public = false WHERE project_id = $1`, id); err != nil {
			return translate(err, what)
		}
		if forwarded != nil {
			if _, err := tx.Exec(ctx, `UPDATE project_ports SET forwarded = false, label = '', scheme = '' WHERE project_id = $1`, id); err != nil {
				return translate(err, what)
			}
			for _, f := range forwarded {
				if _, err := tx.Exec(ctx, `INSERT INTO project_ports (project_id, port, public, forwarded, label, scheme) VALUES ($1, $2, false, true, $3, $4)
					ON CONFLICT (project_id, port) DO UPDATE SET forwarded = true, label = $3, scheme = $4`, id, f.Port, f.Label, f.Scheme); err != nil {
					return translate(err, what)
				}
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO project_ports (project_id, port, public) SELECT $1, unnest($2::int[]), true
			ON CONFLICT (project_id, port) DO UPDATE SET public = true`, id, public); err != nil {
			return translate(err, what)
		}
		_, err := tx.Exec(ctx, `DELETE FROM project_ports WHERE project_id = $1 AND NOT public AND NOT forwarded`, id)
		return translate(err, what)
	})
}

// PortIsPublic reports whether port is public in the project of instance
// id, whatever its tenant (the host form checks it before it knows one),
// and returns the instance's tenant. ErrNotFound for an unknown instance.
func (s Instances) PortIsPublic(ctx context.Context, id string, port int) (tenant string, public bool, err error) {
	err = s.db.QueryRow(ctx, `SELECT i.tenant_id, EXISTS (SELECT 1 FROM project_ports pp
			WHERE pp.project_id = i.project_id AND pp.port = $2 AND pp.public)
		FROM instances i WHERE i.id = $1`, id, port).Scan(&tenant, &public)
	if err != nil {
		return "", false, translate(err, fmt.Sprintf("instance %q", id))
	}
	return tenant, public, nil
}
