package envd_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/versions"
)

// A node records the certificate its API serves when it joins and, after
// the certificate changed (an operator's renewed on disk), at its next
// lease renewal. A node that joins with a join token is given a database
// role of its own, which is not the admin's.
func TestCoreNodeCertificateAndJoinRole(t *testing.T) {
	t.Parallel()
	var cert atomic.Pointer[[]byte]
	first, renewed := []byte("certificate one"), []byte("certificate two")
	cert.Store(&first)
	var dsn string
	e := newCoreEnv(t, func(c *envd.Config) {
		c.Cluster = envd.ClusterConfig{Lease: 600 * time.Millisecond,
			TLSCertificate: func() []byte { return *cert.Load() },
			JoinConfig:     func() (types.JoinConfig, error) { return types.JoinConfig{Database: dsn}, nil }}
	})
	dsn = e.store.Pool().Config().ConnString()
	require.NoError(t, e.svc.RegisterNode(e.ctx, "https://node-a.test:7443"))
	got, err := e.svc.NodeCertificate(e.ctx, testNode)
	require.NoError(t, err)
	assert.Equal(t, first, got, "recorded at join")

	cert.Store(&renewed)
	require.Eventually(t, func() bool {
		got, err := e.svc.NodeCertificate(e.ctx, testNode)
		return err == nil && string(got) == string(renewed)
	}, 10*time.Second, 50*time.Millisecond, "the renewed certificate is recorded within a renewal")

	jt, err := e.svc.CreateJoinToken(e.ctx, e.admin, types.JoinTokenRequest{})
	require.NoError(t, err)
	jc, err := e.svc.Join(e.ctx, jt.Token, types.JoinRequest{Node: "node-b"})
	require.NoError(t, err)
	assert.NotEqual(t, dsn, jc.Database, "not the admin's credentials")
	assert.Contains(t, jc.Database, "user="+versions.NodeRole("node-b"))
	joined, err := versions.Open(e.ctx, jc.Database)
	require.NoError(t, err)
	defer joined.Close()
	admin, err := joined.Nodes.AdminRole(e.ctx)
	require.NoError(t, err)
	assert.False(t, admin, "the joined node's role may not make tokens")
	_, _, err = joined.Access.NewToken(e.ctx, "intruder", true, 0)
	require.Error(t, err)
}
