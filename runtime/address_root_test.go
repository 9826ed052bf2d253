package runtime

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRootAddress: Address gives what Status gives while the instance
// lives, and "" once it is removed or for a name that is no instance id.
func TestRootAddress(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	env.create(t, InstanceSpec{ID: "addr1"})
	st, err := env.rt.Status(ctx, "addr1")
	require.NoError(t, err)
	require.NotNil(t, net.ParseIP(st.Address), "status address %q", st.Address)
	assert.Equal(t, st.Address, env.rt.Address("addr1"))

	require.NoError(t, env.rt.Stop(ctx, "addr1"))
	st, err = env.rt.Status(ctx, "addr1")
	require.NoError(t, err)
	assert.Equal(t, st.Address, env.rt.Address("addr1"), "stopped")

	require.NoError(t, env.rt.Remove(ctx, "addr1"))
	assert.Equal(t, "", env.rt.Address("addr1"))
	assert.Equal(t, "", env.rt.Address("../../etc"))
}
