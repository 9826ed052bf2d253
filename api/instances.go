package api

import (
	"context"
	"net/http"
	"strings"

	"github.com/envd-dev/envd/api/types"

	"github.com/gin-gonic/gin"
)

// InstanceCore starts instances and moves them through their lifecycle.
type InstanceCore interface {
	// CreateInstance starts an instance. A repeated call with the same
	// non-empty idempotencyKey and request returns the same instance; with
	// a different request it is an errdefs.ErrIdempotencyReuse.
	CreateInstance(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Instance, error)
	// Restore starts an instance as an operation of kind "restore" (POST
	// .../instances with Prefer: respond-async).
	Restore(ctx context.Context, p types.Principal, project string, req types.CreateInstanceRequest, idempotencyKey string) (types.Operation, error)
	// ListInstances lists the instances of project, of all projects when
	// project is "".
	ListInstances(ctx context.Context, p types.Principal, project string) ([]types.Instance, error)
	// ListInstancesPage is one page of ListInstances and the next page's
	// token ("" after the last).
	ListInstancesPage(ctx context.Context, p types.Principal, project string, page types.Page) ([]types.Instance, string, error)
	GetInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
	DeleteInstance(ctx context.Context, p types.Principal, id string) (types.Instance, error)
}

// LifecycleCore moves an instance through its lifecycle; an illegal
// transition is an errdefs.ErrFailedPrecondition whose details hold the
// current "state".
type LifecycleCore interface {
	// InstanceVerb runs the plain verb called name (an entry of
	// types.InstanceVerbs: stop, start, pause, resume, ...) on instance id.
	// A name that is not in the list is an errdefs.ErrNotFound.
	InstanceVerb(ctx context.Context, p types.Principal, id, name string) (types.Instance, error)
	// HibernateInstance saves a stopped retained instance as a version and
	// frees its layer on the node; with req.Memory, a Running instance with
	// its processes (errdefs.ErrMemoryUnsupported where they cannot be
	// kept, before anything changes).
	HibernateInstance(ctx context.Context, p types.Principal, id string, req types.HibernateRequest) (types.Instance, error)
	// RenewInstance sets the instance's expiry to now + ttl ("none": never).
	RenewInstance(ctx context.Context, p types.Principal, id, ttl string) (types.Instance, error)
}

type instances struct{ core InstanceCore }

func (g instances) routes() []route {
	list := handle(http.StatusOK, func(r in, _ none) ([]types.Instance, error) {
		page, ok, err := r.page()
		if err != nil {
			return nil, err
		}
		if !ok {
			return items(g.core.ListInstances(r.ctx, r.p, r.param("p"))) // "" on /instances: all
		}
		return paged(r, func() ([]types.Instance, string, error) {
			return g.core.ListInstancesPage(r.ctx, r.p, r.param("p"), page)
		})
	})
	return []route{
		{http.MethodPost, "/projects/:p/instances", g.create()},
		{http.MethodGet, "/projects/:p/instances", list},
		{http.MethodGet, "/instances", list},
		{http.MethodGet, "/instances/:i", onInstance(g.core.GetInstance)},
		{http.MethodDelete, "/instances/:i", onInstance(g.core.DeleteInstance)},
	}
}

type lifecycle struct{ core LifecycleCore }

// routes serves one route per plain verb of types.InstanceVerbs, so a new
// verb needs no line here. They are separate routes rather than one
// /instances/:i/:verb so that the router keeps answering an unknown verb
// as it answers any unknown route (404 not_found, "no route ...") and
// docs/openapi.yaml, checked against these routes, names each verb.
func (g lifecycle) routes() []route {
	rs := make([]route, 0, len(types.InstanceVerbs)+2)
	for _, v := range types.InstanceVerbs {
		name := v.Name
		rs = append(rs, route{http.MethodPost, "/instances/:i/" + name, onInstance(func(ctx context.Context, p types.Principal, id string) (types.Instance, error) {
			return g.core.InstanceVerb(ctx, p, id, name)
		})})
	}
	return append(rs, []route{
		{http.MethodPost, "/instances/:i/hibernate", handle(http.StatusOK, func(r in, req types.HibernateRequest) (types.Instance, error) {
			return g.core.HibernateInstance(r.ctx, r.p, r.param("i"), req)
		})},
		{http.MethodPost, "/instances/:i/renew", handle(http.StatusOK, func(r in, req types.RenewRequest) (types.Instance, error) {
			return g.core.RenewInstance(r.ctx, r.p, r.param("i"), req.TTL)
		})},
	}...)
}

// create starts an instance, or with Prefer: respond-async a restore
// operation that starts it.
func (g instances) create() gin.HandlerFunc {
	restore := started(func(r in, req types.CreateInstanceRequest) (types.Operation, error) {
		op, err := g.core.Restore(r.ctx, r.p, r.param("p"), req, r.key())
		if err == nil {
			r.c.Header("Preference-Applied", "respond-async")
		}
		return op, err
	})
	create := handle(http.StatusCreated, func(r in, req types.CreateInstanceRequest) (types.Instance, error) {
		return g.core.CreateInstance(r.ctx, r.p, r.param("p"), req, r.key())
	})
	return func(c *gin.Context) {
		if respondAsync(c) {
			restore(c)
			return
		}
		create(c)
	}
}

// respondAsync reports whether the client asked for an operation instead of
// waiting (RFC 7240 Prefer: respond-async).
func respondAsync(c *gin.Context) bool {
	for _, h := range c.Request.Header.Values("Prefer") {
		for pref := range strings.SplitSeq(h, ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if strings.EqualFold(strings.TrimSpace(name), "respond-async") {
				return true
			}
		}
	}
	return false
}

// onInstance serves a call on instance :i without a body.
func onInstance(call func(ctx context.Context, p types.Principal, id string) (types.Instance, error)) gin.HandlerFunc {
	return handle(http.StatusOK, func(r in, _ none) (types.Instance, error) {
		return call(r.ctx, r.p, r.param("i"))
	})
}
