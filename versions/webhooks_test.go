package versions_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

func newHook(t *testing.T, s *versions.Store, id, tenant string, events ...string) versions.Webhook {
	t.Helper()
	if len(events) == 0 {
		events = []string{"*"}
	}
	h, err := s.Webhooks.CreateWebhook(context.Background(), versions.Webhook{ID: id, Tenant: tenant, URL: "http://127.0.0.1:1/",
		Events: events, Secret: "s"}, 0)
	require.NoError(t, err)
	return h
}

// types of a hook's deliveries, oldest first.
func deliveryTypes(t *testing.T, s *versions.Store, tenant, hook string) []string {
	t.Helper()
	ds, err := s.Webhooks.WebhookDeliveries(context.Background(), tenant, hook, 100)
	require.NoError(t, err)
	var out []string
	for i := len(ds) - 1; i >= 0; i-- {
		out = append(out, ds[i].EventType)
	}
	return out
}

// TestWebhookEvents: the changes a tenant's hooks are told of are
// recorded with the change, for the hooks subscribed to their type only,
// and never for another tenant's hooks.
func TestWebhookEvents(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	newHook(t, s, "wh_all", tenant)
	newHook(t, s, "wh_quota", tenant, types.WebhookQuotaRefused)
	newHook(t, s, "wh_ops", tenant, "operation.*")
	newHook(t, s, "wh_other", "someone-else")

	newInstance(t, s, "i1")
	_, err := s.Instances.Transition(ctx, "i1", []types.InstanceState{types.StateRunning}, types.StateStopping, "stop", "")
	require.NoError(t, err)
	_, err = s.Instances.Transition(ctx, "i1", []types.InstanceState{types.StateStopping}, types.StateStopped, "stopped", "")
	require.NoError(t, err)
	op, _, err := s.Operations.CreateOperation(ctx, versions.Operation{ID: "op1", Tenant: tenant, Kind: types.OpKindSave, Target: "i1", State: types.OpRunning})
	require.NoError(t, err)
	require.NoError(t, s.Operations.FinishOperation(ctx, op.ID, types.OpFailed, nil, &versions.OpError{Code: "quota_exceeded", Message: "over"}))

	assert.Equal(t, []string{"instance.state", "instance.state", "instance.state", "operation.save", "quota.refused"}, deliveryTypes(t, s, tenant, "wh_all"))
	assert.Equal(t, []string{"quota.refused"}, deliveryTypes(t, s, tenant, "wh_quota"))
	assert.Equal(t, []string{"operation.save"}, deliveryTypes(t, s, tenant, "wh_ops"))
	assert.Empty(t, deliveryTypes(t, s, "someone-else", "wh_other"))

	ds, err := s.Webhooks.WebhookDeliveries(ctx, tenant, "wh_all", 100)
	require.NoError(t, err)
	var in types.Instance
	require.NoError(t, json.Unmarshal(ds[2].EventData, &in)) // the newest instance event
	assert.Equal(t, types.Instance{ID: "i1", Project: "p", Node: "n1", Version: 1, Generation: 1, State: types.StateStopped, Reason: "stopped",
		CreatedAt: in.CreatedAt, LastTransitionAt: in.LastTransitionAt}, in)
	var got types.Operation
	require.NoError(t, json.Unmarshal(ds[0].EventData, &got))
	assert.Equal(t, types.OpFailed, got.State)
	assert.Equal(t, "quota_exceeded", got.Error.Code)

	_, err = s.Webhooks.WebhookDeliveries(ctx, "someone-else", "wh_all", 10)
	assert.ErrorIs(t, err, errdefs.ErrNotFound, "another tenant's hook")
	_, err = s.Webhooks.DeleteWebhook(ctx, "someone-else", "wh_all")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

// TestWebhookDeliverNext: two stores (two nodes) sending at once deliver
// each delivery once, and a hook's deliveries in order even when one
// fails and is tried again.
func TestWebhookDeliverNext(t *testing.T) {
	ctx := context.Background()
	dsn := pgtestDSN(t)
	a, err := versions.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err := versions.Open(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	newHook(t, a, "wh_a", tenant)
	newHook(t, a, "wh_b", tenant)
	const n = 8
	for i := range n {
		_, _, err := a.Operations.CreateOperation(ctx, versions.Operation{ID: "op" + string(rune('a'+i)), Tenant: tenant, Kind: types.OpKindGC, State: types.OpRunning})
		require.NoError(t, err)
		require.NoError(t, a.Operations.FinishOperation(ctx, "op"+string(rune('a'+i)), types.OpSucceeded, nil, nil))
	}

	var mu sync.Mutex
	sent := map[string][]int64{} // hook -> event ids delivered, in the order sent
	tries := map[int64]int{}     // delivery -> tries
	send := func(_ context.Context, c versions.Claimed) versions.Attempt {
		mu.Lock()
		tries[c.ID]++
		first := tries[c.ID] == 1
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // hold the claim while others look
		if first && c.EventID%3 == 0 {   // some fail once, to be tried again
			return versions.Attempt{ResponseCode: 500, Error: "answered 500", RetryIn: 10 * time.Millisecond}
		}
		mu.Lock()
		sent[c.Hook] = append(sent[c.Hook], c.EventID)
		mu.Unlock()
		return versions.Attempt{Delivered: true, ResponseCode: 204}
	}
	var wg sync.WaitGroup
	for _, s := range []*versions.Store{a, b, a, b} {
		wg.Go(func() {
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
				did, err := s.Webhooks.DeliverNext(ctx, send)
				assert.NoError(t, err)
				if !did {
					ds, err := s.Webhooks.WebhookDeliveries(ctx, tenant, "wh_a", 100)
					require.NoError(t, err)
					db, err := s.Webhooks.WebhookDeliveries(ctx, tenant, "wh_b", 100)
					require.NoError(t, err)
					if ds[0].State == versions.DeliveryDelivered && db[0].State == versions.DeliveryDelivered {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()

	for _, hook := range []string{"wh_a", "wh_b"} {
		ds, err := a.Webhooks.WebhookDeliveries(ctx, tenant, hook, 100)
		require.NoError(t, err)
		require.Len(t, ds, n)
		var want []int64
		for i := len(ds) - 1; i >= 0; i-- {
			d := ds[i]
			want = append(want, d.EventID)
			assert.Equal(t, versions.DeliveryDelivered, d.State, "delivery %d", d.ID)
			wantTries := 1
			if d.EventID%3 == 0 {
				wantTries = 2
			}
			assert.Equal(t, wantTries, d.Attempts, "delivery %d", d.ID)
			assert.Equal(t, 204, d.ResponseCode)
		}
		assert.Equal(t, want, sent[hook], "hook %s: each event once, in order", hook)
	}
}
