package versions_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Keys are a tenant's: the same key twice is a conflict, another tenant
// may register it too, listing and removal are scoped. A login resolves
// to the instance's tenant only when that tenant registered the key; an
// unknown instance, an unknown key and another tenant's key are the same
// not found.
func TestSSHKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	newInstance(t, s, "i1")

	k := versions.SSHKey{Tenant: tenant, Name: "laptop", Fingerprint: "SHA256:aaa", PublicKey: "ssh-ed25519 AAAA"}
	added, err := s.Access.AddSSHKey(ctx, k)
	require.NoError(t, err)
	assert.Positive(t, added.ID)
	assert.False(t, added.CreatedAt.IsZero())
	_, err = s.Access.AddSSHKey(ctx, k)
	assert.ErrorIs(t, err, errdefs.ErrAlreadyExists, "the same key twice")
	other := k
	other.Tenant, other.Name = "other", "theirs"
	theirs, err := s.Access.AddSSHKey(ctx, other)
	require.NoError(t, err, "another tenant may register the same key")
	otherOnly := versions.SSHKey{Tenant: "other", Name: "b", Fingerprint: "SHA256:bbb", PublicKey: "ssh-ed25519 BBBB"}
	_, err = s.Access.AddSSHKey(ctx, otherOnly)
	require.NoError(t, err)

	keys, err := s.Access.ListSSHKeys(ctx, tenant)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	assert.Equal(t, "laptop", keys[0].Name)

	tests := []struct {
		name, instance, fingerprint string
		want                        string // tenant; "" = refused
	}{
		{"own key, own instance", "i1", "SHA256:aaa", tenant},
		{"another tenant's key", "i1", "SHA256:bbb", ""},
		{"unknown key", "i1", "SHA256:zzz", ""},
		{"unknown instance", "i-none", "SHA256:aaa", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Access.SSHKeyTenant(ctx, tc.instance, tc.fingerprint)
			if tc.want == "" {
				assert.ErrorIs(t, err, errdefs.ErrNotFound)
				assert.Empty(t, got)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}

	_, err = s.Access.DeleteSSHKey(ctx, tenant, theirs.ID)
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "another tenant's key id")
	gone, err := s.Access.DeleteSSHKey(ctx, tenant, added.ID)
	require.NoError(t, err)
	assert.Equal(t, "SHA256:aaa", gone.Fingerprint)
	_, err = s.Access.SSHKeyTenant(ctx, "i1", "SHA256:aaa")
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "a removed key logs in no more")
	keys, err = s.Access.ListSSHKeys(ctx, "other")
	require.NoError(t, err)
	assert.Len(t, keys, 2, "the other tenant's keys are untouched")
}
