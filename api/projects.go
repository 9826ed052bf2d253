package api

import (
	"context"
	"net/http"

	"github.com/envd-dev/envd/api/types"
)

// ProjectCore manages projects and their settings.
type ProjectCore interface {
	// CreateProject creates a project. A repeated call with the same
	// non-empty idempotencyKey and request returns the same project; with a
	// different request it is an errdefs.ErrIdempotencyReuse.
	CreateProject(ctx context.Context, p types.Principal, req types.CreateProjectRequest, idempotencyKey string) (types.Project, error)
	ListProjects(ctx context.Context, p types.Principal) ([]types.Project, error)
	GetProject(ctx context.Context, p types.Principal, name string) (types.Project, error)
	DeleteProject(ctx context.Context, p types.Principal, name string) error
	// SetRetention sets a project's version retention policy.
	SetRetention(ctx context.Context, p types.Principal, project string, r types.Retention) (types.Project, error)
	// SetProjectLimits replaces a project's resource limits.
	SetProjectLimits(ctx context.Context, p types.Principal, project string, l types.Limits) (types.Project, error)
	// SetProjectNetwork sets a project's network policy (egress, isolation).
	SetProjectNetwork(ctx context.Context, p types.Principal, project string, n types.ProjectNetwork) (types.Project, error)
	// SetProjectRuntimeClass sets the runtime class of a project's instances.
	SetProjectRuntimeClass(ctx context.Context, p types.Principal, project string, c types.ProjectRuntimeClass) (types.Project, error)
	// SetProjectDocker sets whether a project's instances may run dockerd.
	SetProjectDocker(ctx context.Context, p types.Principal, project string, d types.ProjectDocker) (types.Project, error)
}

type projects struct{ core ProjectCore }

func (g projects) routes() []route {
	return []route{
		{http.MethodPost, "/projects", handle(http.StatusCreated, func(r in, req types.CreateProjectRequest) (types.Project, error) {
			return g.core.CreateProject(r.ctx, r.p, req, r.key())
		})},
		{http.MethodGet, "/projects", handle(http.StatusOK, func(r in, _ none) ([]types.Project, error) {
			return items(g.core.ListProjects(r.ctx, r.p))
		})},
		{http.MethodGet, "/projects/:p", handle(http.StatusOK, func(r in, _ none) (types.Project, error) {
			return g.core.GetProject(r.ctx, r.p, r.param("p"))
		})},
		{http.MethodDelete, "/projects/:p", handle(http.StatusNoContent, func(r in, _ none) (none, error) {
			return none{}, g.core.DeleteProject(r.ctx, r.p, r.param("p"))
		})},
		{http.MethodPut, "/projects/:p/retention", handle(http.StatusOK, func(r in, req types.Retention) (types.Project, error) {
			return g.core.SetRetention(r.ctx, r.p, r.param("p"), req)
		})},
		{http.MethodPut, "/projects/:p/limits", handle(http.StatusOK, func(r in, req types.Limits) (types.Project, error) {
			return g.core.SetProjectLimits(r.ctx, r.p, r.param("p"), req)
		})},
		{http.MethodPut, "/projects/:p/network", handle(http.StatusOK, func(r in, req types.ProjectNetwork) (types.Project, error) {
			return g.core.SetProjectNetwork(r.ctx, r.p, r.param("p"), req)
		})},
		{http.MethodPut, "/projects/:p/runtime-class", handle(http.StatusOK, func(r in, req types.ProjectRuntimeClass) (types.Project, error) {
			return g.core.SetProjectRuntimeClass(r.ctx, r.p, r.param("p"), req)
		})},
		{http.MethodPut, "/projects/:p/docker", handle(http.StatusOK, func(r in, req types.ProjectDocker) (types.Project, error) {
			return g.core.SetProjectDocker(r.ctx, r.p, r.param("p"), req)
		})},
	}
}
