package e2e

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/envd-dev/envd/api/types"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/envd"
	"github.com/envd-dev/envd/errdefs"
)

// The node's per-tenant save and build limits. The test holds the slots
// that concurrent saves and builds of the tenant would hold, through the
// service the node runs, and then asks over HTTP as a client would.
func TestTenantSaveAndBuildLimits(t *testing.T) {
	svc := env.node.Service
	admin := types.Principal{Tenant: "admin", Admin: true}
	p := newProject(t, "admission")
	in := up(t, p, 0)
	// A second instance: a second save of the first one would be refused
	// as one-save-at-a-time (409) before the tenant's limit is looked at.
	other := up(t, p, 0)
	require.Zero(t, svc.AdmissionInUse("admin", types.AdmitSaves), "no save runs before the test")

	// A save accepted with a key holds one slot until it ends.
	first, err := env.c.Save(ctx(t), in.ID, types.SaveRequest{Message: "first"}, "admission-key")
	require.NoError(t, err)
	held := holdAll(t, svc, admin, types.AdmitSaves)

	_, err = env.c.Save(ctx(t), other.ID, types.SaveRequest{Message: "second"}, "")
	assertExhausted(t, err, "saves")
	// Its retry is never refused: it is the same operation.
	again, err := env.c.Save(ctx(t), in.ID, types.SaveRequest{Message: "first"}, "admission-key")
	require.NoError(t, err)
	assert.Equal(t, first.ID, again.ID)

	// The raw answer carries Retry-After.
	req, err := http.NewRequest(http.MethodPost, env.node.URL+"/v1/instances/"+other.ID+"/save", strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+env.node.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "10", resp.Header.Get("Retry-After"))

	for _, release := range held {
		release()
	}
	waitSave(t, first.ID)
	require.Eventually(t, func() bool { return svc.AdmissionInUse("admin", types.AdmitSaves) == 0 },
		10*time.Second, 50*time.Millisecond, "the finished save freed its slot")
	_, res := save(t, in.ID, "after the limit")
	assert.Positive(t, res.Version)

	// Builds: refused before anything starts.
	held = holdAll(t, svc, admin, types.AdmitBuilds)
	before := snapshotState(t)
	_, err = env.c.Build(ctx(t), p, types.BuildRequest{Manager: "apk", Packages: []string{"curl"}})
	assertExhausted(t, err, "builds")
	for _, release := range held {
		release()
	}
	assert.Equal(t, before, snapshotState(t))
	assert.Zero(t, svc.AdmissionInUse("admin", types.AdmitBuilds))
}

// holdAll takes every free slot of kind for p's tenant and returns their
// releases (also run at cleanup).
func holdAll(t *testing.T, svc *envd.Service, p types.Principal, kind string) []func() {
	t.Helper()
	var held []func()
	for range 1000 {
		release, err := svc.Admit(p, kind)
		if err != nil {
			require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
			t.Cleanup(func() {
				for _, r := range held {
					r()
				}
			})
			return held
		}
		held = append(held, release)
	}
	t.Fatalf("%s: no limit after 1000 slots", kind)
	return nil
}

func assertExhausted(t *testing.T, err error, kind string) {
	t.Helper()
	require.ErrorIs(t, err, errdefs.ErrResourceExhausted)
	var ce *types.Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, http.StatusTooManyRequests, ce.Status)
	assert.Equal(t, kind, ce.Details["kind"])
}
