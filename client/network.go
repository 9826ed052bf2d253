package client

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// SetProjectNetwork sets a project's network policy: PUT
// /v1/projects/{p}/network. Egress "" is open.
func (c *Client) SetProjectNetwork(ctx context.Context, project string, n types.ProjectNetwork) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/network", n)
}

// SetProjectRuntimeClass sets the runtime class of a project's instances:
// PUT /v1/projects/{p}/runtime-class. Class "" is the node's default.
func (c *Client) SetProjectRuntimeClass(ctx context.Context, project, class string) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/runtime-class", types.ProjectRuntimeClass{RuntimeClass: class})
}

// SetProjectDocker sets whether a project's instances may run dockerd:
// PUT /v1/projects/{p}/docker (runtime class gvisor only).
func (c *Client) SetProjectDocker(ctx context.Context, project string, docker bool) (types.Project, error) {
	return post[types.Project](ctx, c, http.MethodPut, "/v1/projects/"+esc(project)+"/docker", types.ProjectDocker{Docker: docker})
}
