package versions_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// Concurrent first calls, as of several nodes starting at once, all get
// the one key stored; later calls keep it.
func TestPreviewKeyIsShared(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	keys := make([][]byte, 8)
	var wg sync.WaitGroup
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := s.Nodes.PreviewKey(ctx, bytes.Repeat([]byte{byte(i + 1)}, 32))
			assert.NoError(t, err)
			keys[i] = k
		}()
	}
	wg.Wait()
	require.Len(t, keys[0], 32)
	for _, k := range keys {
		assert.Equal(t, keys[0], k)
	}
	again, err := s.Nodes.PreviewKey(ctx, bytes.Repeat([]byte{0xff}, 32))
	require.NoError(t, err)
	assert.Equal(t, keys[0], again)
}

func TestPublicPorts(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	newProject(t, s)
	newInstance(t, s, "p-1")

	ports, err := s.Projects.PublicPorts(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Empty(t, ports)
	tn, public, err := s.Instances.PortIsPublic(ctx, "p-1", 3000)
	require.NoError(t, err)
	assert.Equal(t, tenant, tn)
	assert.False(t, public)

	require.NoError(t, s.Projects.SetPublicPorts(ctx, tenant, "p", []int{8080, 3000}))
	ports, err = s.Projects.PublicPorts(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, []int{3000, 8080}, ports)
	_, public, err = s.Instances.PortIsPublic(ctx, "p-1", 3000)
	require.NoError(t, err)
	assert.True(t, public)

	require.NoError(t, s.Projects.SetPublicPorts(ctx, tenant, "p", []int{}))
	ports, err = s.Projects.PublicPorts(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Empty(t, ports)

	for name, err := range map[string]error{
		"set, other tenant": s.Projects.SetPublicPorts(ctx, "other", "p", []int{1}),
		"set, no project":   s.Projects.SetPublicPorts(ctx, tenant, "missing", []int{1}),
	} {
		assert.ErrorIs(t, err, errdefs.ErrNotFound, name)
	}
	_, err = s.Projects.PublicPorts(ctx, "other", "p")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	_, _, err = s.Instances.PortIsPublic(ctx, "nope", 3000)
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
	assert.Error(t, s.Projects.SetPublicPorts(ctx, tenant, "p", []int{70000}), "the table refuses a port out of range")
}

// Forwarded ports live beside public ones: setting one list keeps the
// other, a port can be both, and a port in neither has no row left.
func TestForwardedPorts(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	newProject(t, s)
	newInstance(t, s, "p-1")

	fwd := []versions.ForwardedPort{{Port: 3000, Label: "web", Scheme: "https"}, {Port: 5432}}
	require.NoError(t, s.Projects.SetPorts(ctx, tenant, "p", []int{3000, 8080}, fwd))
	got, err := s.Projects.ForwardedPorts(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, fwd, got)
	public, err := s.Projects.PublicPorts(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, []int{3000, 8080}, public)

	// The public list alone (nil forwarded) keeps the forwarded ports.
	require.NoError(t, s.Projects.SetPublicPorts(ctx, tenant, "p", []int{}))
	got, err = s.Projects.ForwardedPorts(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, fwd, got)
	_, isPublic, err := s.Instances.PortIsPublic(ctx, "p-1", 3000)
	require.NoError(t, err)
	assert.False(t, isPublic, "forwarded is not public")

	require.NoError(t, s.Projects.SetPorts(ctx, tenant, "p", []int{8080}, []versions.ForwardedPort{}))
	got, err = s.Projects.ForwardedPorts(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Empty(t, got)
	public, err = s.Projects.PublicPorts(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Equal(t, []int{8080}, public)

	err = s.Projects.SetPorts(ctx, tenant, "p", nil, []versions.ForwardedPort{{Port: 1, Scheme: "ftp"}})
	assert.Error(t, err, "the database refuses a scheme it does not know")
	_, err = s.Projects.ForwardedPorts(ctx, "other", "p")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}
