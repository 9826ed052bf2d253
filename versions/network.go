package versions

import (
	"context"
	"fmt"
)

// SetProjectNetwork sets the network policy of a project's instances:
// egress in runtime.ParseEgress's normalized text form ("" = open), and
// whether its instances are kept from each other. The caller validates
// egress. Fails with ErrNotFound for an unknown project.
func (s Projects) SetProjectNetwork(ctx context.Context, tenant, project, egress string, isolate bool) (Project, error) {
	if egress == "" {
		egress = "open"
	}
	p, err := scanProject(s.db.QueryRow(ctx, `UPDATE projects p SET egress = $3, isolate_instances = $4, updated_at = now()
		WHERE p.tenant_id = $1 AND p.name = $2 RETURNING `+projectCols, tenant, project, egress, isolate))
	if err != nil {
		return Project{}, translate(err, fmt.Sprintf("network policy of project %q", project))
	}
	return p, nil
}
