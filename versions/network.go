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

// SetProjectRuntimeClass sets the runtime class of a project's instances
// ("" = the node's default); instances already made keep theirs. The caller
// validates class. Fails with ErrNotFound for an unknown project.
func (s Projects) SetProjectRuntimeClass(ctx context.Context, tenant, project, class string) (Project, error) {
	p, err := scanProject(s.db.QueryRow(ctx, `UPDATE projects p SET runtime_class = $3, updated_at = now()
		WHERE p.tenant_id = $1 AND p.name = $2 RETURNING `+projectCols, tenant, project, class))
	if err != nil {
		return Project{}, translate(err, fmt.Sprintf("runtime class of project %q", project))
	}
	return p, nil
}

// SetProjectDocker sets whether a project's instances may run dockerd;
// instances already made keep what they were made with. The caller checks
// the project's class; the table refuses docker on any class but gvisor
// (ErrInvalidArgument), so a concurrent class change cannot slip past.
// Fails with ErrNotFound for an unknown project.
func (s Projects) SetProjectDocker(ctx context.Context, tenant, project string, docker bool) (Project, error) {
	p, err := scanProject(s.db.QueryRow(ctx, `UPDATE projects p SET docker = $3, updated_at = now()
		WHERE p.tenant_id = $1 AND p.name = $2 RETURNING `+projectCols, tenant, project, docker))
	if err != nil {
		return Project{}, translate(err, fmt.Sprintf("docker setting of project %q", project))
	}
	return p, nil
}
