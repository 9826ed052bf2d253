package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/client"
	"github.com/envd-dev/envd/errdefs"
)

// Tokens against a full node: an expired token and a revoked one get 401
// at once; a tenant lists and revokes its own tokens and no other's;
// listing never shows a token.
func TestRootTokens(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	tenant := fmt.Sprintf("tok-%d", projectSeq.Add(1))
	other := fmt.Sprintf("tok-%d", projectSeq.Add(1))

	short, err := env.c.CreateToken(c, tenant, types.CreateTokenRequest{ExpiresIn: "3s"})
	require.NoError(t, err)
	require.NotNil(t, short.ExpiresAt)
	assert.Positive(t, short.ID)
	long, err := env.c.CreateToken(c, tenant, types.CreateTokenRequest{ExpiresIn: "720h"})
	require.NoError(t, err)
	require.NotNil(t, long.ExpiresAt)
	assert.WithinDuration(t, time.Now().Add(720*time.Hour), *long.ExpiresAt, time.Minute)
	spare, err := env.c.CreateToken(c, tenant, types.CreateTokenRequest{})
	require.NoError(t, err)
	assert.Nil(t, spare.ExpiresAt)
	otherTok, err := env.c.CreateToken(c, other, types.CreateTokenRequest{})
	require.NoError(t, err)
	_, err = env.c.CreateToken(c, tenant, types.CreateTokenRequest{ExpiresIn: "-1h"})
	assert.ErrorIs(t, err, errdefs.ErrInvalidArgument)

	newClient := func(token string) *client.Client {
		cl, err := client.New(env.node.URL, token)
		require.NoError(t, err)
		return cl
	}
	cShort, cLong, cSpare, cOther := newClient(short.Token), newClient(long.Token), newClient(spare.Token), newClient(otherTok.Token)

	_, err = cShort.ListProjects(c)
	require.NoError(t, err, "works before it expires")
	require.Eventually(t, func() bool {
		_, err := cShort.ListProjects(c)
		return err != nil
	}, 30*time.Second, 200*time.Millisecond)
	_, err = cShort.ListProjects(c)
	assert.ErrorIs(t, err, errdefs.ErrUnauthenticated, "expired")

	// A tenant sees its own tokens only, and cannot use the admin routes.
	own, err := cLong.ListOwnTokens(c)
	require.NoError(t, err)
	ids := map[int64]bool{}
	for _, ti := range own {
		assert.Equal(t, tenant, ti.Tenant)
		ids[ti.ID] = true
	}
	assert.Equal(t, map[int64]bool{short.ID: true, long.ID: true, spare.ID: true}, ids)
	_, err = cLong.ListTokens(c, "")
	assert.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	_, err = cLong.RevokeToken(c, spare.ID)
	assert.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	_, err = cOther.RevokeOwnToken(c, spare.ID)
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "another tenant's token id")
	_, err = cSpare.ListProjects(c)
	require.NoError(t, err, "still live")

	// Revoked by its tenant, then by the admin: 401 on the next request.
	revoked, err := cLong.RevokeOwnToken(c, spare.ID)
	require.NoError(t, err)
	assert.NotNil(t, revoked.RevokedAt)
	_, err = cSpare.ListProjects(c)
	assert.ErrorIs(t, err, errdefs.ErrUnauthenticated, "revoked by its tenant")
	_, err = env.c.RevokeToken(c, long.ID)
	require.NoError(t, err)
	_, err = cLong.ListProjects(c)
	assert.ErrorIs(t, err, errdefs.ErrUnauthenticated, "revoked by the admin")
	_, err = cOther.ListProjects(c)
	require.NoError(t, err, "other tenants are untouched")

	// A tenant's plain token cannot revoke an admin token of its tenant.
	otherAdmin, err := env.c.CreateToken(c, other, types.CreateTokenRequest{Admin: true})
	require.NoError(t, err)
	_, err = cOther.RevokeOwnToken(c, otherAdmin.ID)
	assert.ErrorIs(t, err, errdefs.ErrPermissionDenied)
	_, err = env.c.RevokeToken(c, otherAdmin.ID)
	require.NoError(t, err)

	// Listing shows ids and states, never a token, nor its hash.
	all, err := env.c.ListTokens(c, tenant)
	require.NoError(t, err)
	require.Len(t, all, 3)
	for _, path := range []string{"/v1/admin/tokens", "/v1/admin/tokens?tenant=" + tenant, "/v1/admin/tenants/" + tenant + "/tokens", "/v1/tokens"} {
		req, err := http.NewRequestWithContext(c, http.MethodGet, env.node.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+env.node.Token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		assert.Contains(t, string(body), fmt.Sprintf(`"id":%d`, spare.ID), path)
		for _, secret := range []string{short.Token, long.Token, spare.Token, otherTok.Token, otherAdmin.Token, env.node.Token} {
			assert.NotContains(t, string(body), secret, path)
		}
		assert.NotContains(t, string(body), "hash", path)
		assert.False(t, strings.Contains(string(body), `"token"`), path)
	}
}
