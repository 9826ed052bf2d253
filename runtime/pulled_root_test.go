package runtime

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRootPullCachedWithoutRegistry: a ref pinned by digest that is already
// pulled starts with the registry gone; a tag, or an image no longer in
// containerd, still needs the registry.
func TestRootPullCachedWithoutRegistry(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	tagged := pushBusyboxImage(t, env.reg, "test/tagged")
	tag := tagged[:strings.Index(tagged, "@")] + ":latest"
	require.NoError(t, env.rt.Pull(ctx, tag))
	gone := pushBusyboxImage(t, env.reg, "test/gone")
	require.NoError(t, env.rt.Pull(ctx, gone))
	cctx := namespaces.WithNamespace(ctx, "envd")
	require.NoError(t, env.rt.Client().ImageService().Delete(cctx, gone, images.SynchronousDelete()))

	require.NoError(t, env.reg.srv.Close()) // the registry is down from here on

	for _, tc := range []struct {
		name, ref string
		pulls     bool
	}{
		{"pinned and pulled", env.ref, true},
		{"tag", tag, false},
		{"pinned, deleted from containerd", gone, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := env.rt.Pull(ctx, tc.ref)
			if !tc.pulls {
				assert.Error(t, err)
				return
			}
			require.NoError(t, err)
			id := "pulled-" + strings.ReplaceAll(tc.name, " ", "-")
			env.create(t, InstanceSpec{ID: id, Image: tc.ref})
			out, _, code := env.run(t, id, "echo", "up")
			assert.Equal(t, 0, code)
			assert.Equal(t, "up\n", out)
			require.NoError(t, env.rt.Remove(ctx, id))
		})
	}
}

// TestRootConcurrentPullsOfOneRefFetchOnce: Pulls of one new ref at the
// same time (a fork's copies starting together) make as many requests for
// its manifest as one Pull does, and all of them succeed with the image
// usable.
func TestRootConcurrentPullsOfOneRefFetchOnce(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t, freeSubnet(t))
	ctx := context.Background()
	manifestRequests := func(ref string) int {
		repo, digest, _ := strings.Cut(ref[strings.Index(ref, "/")+1:], "@")
		p := "/v2/" + repo + "/manifests/" + digest
		return env.reg.count("GET", p) + env.reg.count("HEAD", p)
	}
	one := pushBusyboxImage(t, env.reg, "test/one")
	require.NoError(t, env.rt.Pull(ctx, one))
	single := manifestRequests(one)
	require.NotZero(t, single)

	four := pushBusyboxImage(t, env.reg, "test/four")
	errs := make([]error, 4)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = env.rt.Pull(ctx, four) })
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, single, manifestRequests(four), "one pull's requests for four Pulls at once")
	env.create(t, InstanceSpec{ID: "pulled-four", Image: four})
	out, _, code := env.run(t, "pulled-four", "echo", "up")
	assert.Equal(t, 0, code)
	assert.Equal(t, "up\n", out)
	require.NoError(t, env.rt.Remove(ctx, "pulled-four"))
}
