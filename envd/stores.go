package envd

import (
	"context"

	"github.com/envd-dev/envd/versions"
)

// What each part uses of the store: the aggregates its Store interface
// names, and no others. A part whose interface lies in one aggregate is
// given that aggregate directly (wire).

// gatewayStore answers the egress gateway's two lookups on every proxied
// request (a project's tenant, a tenant's bound secrets) from the secret
// cache (secretcache.go) when it holds them, and drops a tenant's entry
// at once after this node changed its secrets; other nodes learn of a
// change by its notification.
type gatewayStore struct {
	versions.Projects
	versions.Tenants
	cache *secretCache
}

func (g gatewayStore) ProjectTenant(ctx context.Context, id int64) (string, error) {
	t, ok, st := g.cache.tenantOf(id)
	if ok {
		return t, nil
	}
	t, err := g.Projects.ProjectTenant(ctx, id)
	if err != nil {
		return "", err
	}
	g.cache.putTenant(id, t, st)
	return t, nil
}

// Secrets: only the bound secrets (what the proxy asks) are cached; the
// list of all of them (the API's) asks the database.
func (g gatewayStore) Secrets(ctx context.Context, tenant string, boundOnly bool) ([]versions.Secret, error) {
	if !boundOnly {
		return g.Tenants.Secrets(ctx, tenant, false)
	}
	rows, ok, st := g.cache.boundSecrets(tenant)
	if ok {
		return rows, nil
	}
	rows, err := g.Tenants.Secrets(ctx, tenant, true)
	if err != nil {
		return nil, err
	}
	g.cache.putSecrets(tenant, rows, st)
	return rows, nil
}

func (g gatewayStore) PutSecret(ctx context.Context, tenant, name string, sealed []byte) (versions.Secret, error) {
	defer g.cache.changed("t:" + tenant)
	return g.Tenants.PutSecret(ctx, tenant, name, sealed)
}

func (g gatewayStore) BindSecret(ctx context.Context, tenant, name string, b versions.Secret) (versions.Secret, error) {
	defer g.cache.changed("t:" + tenant)
	return g.Tenants.BindSecret(ctx, tenant, name, b)
}

func (g gatewayStore) DeleteSecret(ctx context.Context, tenant, name string) (versions.Secret, error) {
	defer g.cache.changed("t:" + tenant)
	return g.Tenants.DeleteSecret(ctx, tenant, name)
}

type saveStore struct {
	versions.Instances
	versions.Projects
	versions.Versions
	versions.Operations
}

type volumeStore struct {
	versions.Projects
	versions.Instances
	versions.Volumes
	versions.Versions
}

type homeStore struct {
	versions.Volumes
	versions.Versions
}

type lifecycleStore struct {
	versions.Instances
	versions.Projects
	versions.Versions
	versions.Tenants
	versions.Nodes
}

type buildStore struct {
	versions.Projects
	versions.Versions
	versions.Content
}

type gcStore struct {
	versions.Projects
	versions.Versions
	versions.Content
}

type quotaStore struct {
	versions.Tenants
	versions.Projects
}

type rolloutStore struct {
	versions.Rollouts
	versions.Operations
	versions.Projects
	versions.Versions
}

// The stores of the parts of their own (parts.go).

type clusterStore struct {
	versions.Nodes
	versions.Instances
	versions.Operations
}

type checkpointStore struct {
	versions.Instances
	versions.Projects
	versions.Versions
	versions.Content
}

type portStore struct {
	versions.Nodes
	versions.Projects
	versions.Instances
}

type placerStore struct {
	versions.Projects
	versions.Versions
	versions.Nodes
	versions.Volumes
}
