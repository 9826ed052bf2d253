package versions_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/internal/pgserver/pgtest"
	"github.com/envd-dev/envd/versions"
)

// A token with a lifetime works until it ends by the database's clock,
// then gets ErrUnauthenticated; a revoked token at once. Listing shows
// ids, expiry, revocation and last use, scoped by tenant.
func TestTokenExpiryAndRevocation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)

	live, liveInfo, err := s.Access.NewToken(ctx, tenant, false, 0)
	require.NoError(t, err)
	assert.Nil(t, liveInfo.ExpiresAt, "no lifetime: never expires")
	short, shortInfo, err := s.Access.NewToken(ctx, tenant, false, 300*time.Millisecond)
	require.NoError(t, err)
	require.NotNil(t, shortInfo.ExpiresAt)
	assert.WithinDuration(t, shortInfo.CreatedAt.Add(300*time.Millisecond), *shortInfo.ExpiresAt, time.Millisecond)
	other, otherInfo, err := s.Access.NewToken(ctx, "other", false, 0)
	require.NoError(t, err)

	p, err := s.Access.Authenticate(ctx, short)
	require.NoError(t, err, "not yet expired")
	assert.Equal(t, versions.Principal{Tenant: tenant}, p)
	require.Eventually(t, func() bool {
		_, err := s.Access.Authenticate(ctx, short)
		return err != nil
	}, 10*time.Second, 50*time.Millisecond)
	_, err = s.Access.Authenticate(ctx, short)
	assert.ErrorIs(t, err, errdefs.ErrUnauthenticated)
	assert.ErrorContains(t, err, "expired")

	_, err = s.Access.Authenticate(ctx, live)
	require.NoError(t, err)
	revoked, err := s.Access.RevokeToken(ctx, tenant, liveInfo.ID)
	require.NoError(t, err)
	require.NotNil(t, revoked.RevokedAt)
	_, err = s.Access.Authenticate(ctx, live)
	assert.ErrorIs(t, err, errdefs.ErrUnauthenticated)
	assert.ErrorContains(t, err, "revoked")
	again, err := s.Access.RevokeToken(ctx, tenant, liveInfo.ID)
	require.NoError(t, err, "revoking twice answers the token as it is")
	assert.Equal(t, revoked.RevokedAt.UnixMicro(), again.RevokedAt.UnixMicro())

	// Tenant scoping: another tenant's id is not found and stays live.
	_, err = s.Access.RevokeToken(ctx, tenant, otherInfo.ID)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, err = s.Access.Authenticate(ctx, other)
	require.NoError(t, err)

	ts, err := s.Access.ListTokens(ctx, tenant)
	require.NoError(t, err)
	require.Len(t, ts, 2)
	assert.Equal(t, liveInfo.ID, ts[0].ID)
	assert.NotNil(t, ts[0].RevokedAt)
	require.NotNil(t, ts[0].LastUsedAt, "the use was recorded")
	assert.Equal(t, shortInfo.ID, ts[1].ID)
	assert.NotNil(t, ts[1].ExpiresAt)
	all, err := s.Access.ListTokens(ctx, "")
	require.NoError(t, err)
	assert.Len(t, all, 3)

	_, err = s.Access.RevokeToken(ctx, "", 1<<40)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, _, err = s.Access.NewToken(ctx, tenant, false, -time.Second)
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)
}

// The last live admin token cannot be revoked (the node would have no
// admin left); with another one, it can.
func TestRevokeLastAdminToken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)

	require.NoError(t, s.Access.EnsureAdminToken(ctx, "admin", "node-secret"))
	ts, err := s.Access.ListTokens(ctx, "admin")
	require.NoError(t, err)
	require.Len(t, ts, 1)
	_, err = s.Access.RevokeToken(ctx, "", ts[0].ID)
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition)
	_, err = s.Access.Authenticate(ctx, "node-secret")
	require.NoError(t, err, "still live")

	second, _, err := s.Access.NewToken(ctx, "admin", true, 0)
	require.NoError(t, err)
	_, err = s.Access.RevokeToken(ctx, "", ts[0].ID)
	require.NoError(t, err)
	_, err = s.Access.Authenticate(ctx, "node-secret")
	assert.ErrorIs(t, err, errdefs.ErrUnauthenticated)
	p, err := s.Access.Authenticate(ctx, second)
	require.NoError(t, err)
	assert.True(t, p.Admin)
}

// BenchmarkAuthenticate compares Authenticate (one statement that also
// checks expiry and revocation and bumps last_used_at at most once a
// minute) with the plain lookup by hash it replaced.
func BenchmarkAuthenticate(b *testing.B) {
	ctx := context.Background()
	s, err := versions.Open(ctx, pgtest.DSN(b))
	require.NoError(b, err)
	defer s.Close()
	tok, _, err := s.Access.NewToken(ctx, tenant, false, time.Hour)
	require.NoError(b, err)
	b.Run("authenticate", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.Access.Authenticate(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("plain-lookup", func(b *testing.B) {
		h := sha256.Sum256([]byte(tok))
		hash := hex.EncodeToString(h[:])
		for b.Loop() {
			var p versions.Principal
			if err := s.Pool().QueryRow(ctx, "SELECT tenant_id, admin FROM tokens WHERE token_hash = $1", hash).Scan(&p.Tenant, &p.Admin); err != nil {
				b.Fatal(err)
			}
		}
	})
}
