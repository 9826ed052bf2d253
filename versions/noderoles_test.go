package versions_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// A node that joined logs in as its own role, member of envd_node: it does
// a node's work (joins, renews its lease, creates projects and instances
// under the quota's lock, authenticates and revokes tokens), but
// PostgreSQL refuses it an API token, a quota and a join token.
func TestNodeRoleCannotCreateTokens(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtestDSN(t)
	admin, err := versions.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	_, err = admin.Tenants.SetQuota(ctx, tenant, versions.Quota{MaxInstances: 5})
	require.NoError(t, err)
	token, info, err := admin.Access.NewToken(ctx, tenant, false, 0)
	require.NoError(t, err)

	role, password, err := admin.Nodes.CreateNodeRole(ctx, "node-b")
	require.NoError(t, err)
	assert.Equal(t, versions.NodeRole("node-b"), role)
	nodeDSN, err := versions.DSNWithRole(dsn, role, password)
	require.NoError(t, err)
	node, err := versions.Open(ctx, nodeDSN) // the schema is up to date: nothing to migrate
	require.NoError(t, err)
	t.Cleanup(node.Close)
	isAdmin, err := admin.Nodes.AdminRole(ctx)
	require.NoError(t, err)
	assert.True(t, isAdmin)
	isAdmin, err = node.Nodes.AdminRole(ctx)
	require.NoError(t, err)
	assert.False(t, isAdmin, "a node's role is not the admin's")

	// What PostgreSQL refuses the node.
	_, _, err = node.Access.NewToken(ctx, tenant, true, 0)
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "a node's role may not create an API token")
	assert.Contains(t, err.Error(), "permission denied for table tokens")
	conn, err := pgx.Connect(ctx, nodeDSN)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var pgErr *pgconn.PgError
	_, err = conn.Exec(ctx, `INSERT INTO tokens (token_hash, tenant_id, admin) VALUES ('forged', $1, true)`, tenant)
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "42501", pgErr.Code, "insufficient_privilege")
	_, err = conn.Exec(ctx, `UPDATE tokens SET admin = true`)
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "42501", pgErr.Code, "nor make a token an admin's")
	_, err = node.Tenants.SetQuota(ctx, tenant, versions.Quota{MaxInstances: 1000})
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "nor change a quota")
	_, err = node.Nodes.CreateJoinToken(ctx, "envdjoin_x", "admin", time.Hour)
	require.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "nor make a join token")
	_, err = conn.Exec(ctx, `UPDATE cluster_key SET key = key`)
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "42501", pgErr.Code, "nor change the cluster's key")
	_, _, err = node.Nodes.CreateNodeRole(ctx, "node-c")
	require.Error(t, err, "nor make roles")

	// What a node does.
	_, err = node.Nodes.Join(ctx, versions.Registration{Name: "node-b", APIURL: "https://b", Lease: time.Minute})
	require.NoError(t, err)
	_, err = node.Nodes.RenewLease(ctx, "node-b")
	require.NoError(t, err)
	_, err = node.Nodes.ClusterKey(ctx)
	require.NoError(t, err)
	p, err := node.Access.Authenticate(ctx, token)
	require.NoError(t, err)
	assert.Equal(t, tenant, p.Tenant)
	newProject(t, node)
	_, err = node.Instances.CreateInstance(ctx, versions.Instance{ID: "i-1", Tenant: tenant, Project: "p", Node: "node-b", Version: 1, State: "Running"})
	require.NoError(t, err, "under the quota's row lock")
	revoked, err := node.Access.RevokeToken(ctx, tenant, info.ID)
	require.NoError(t, err, "a tenant revokes its token through any node")
	assert.NotNil(t, revoked.RevokedAt)
}
