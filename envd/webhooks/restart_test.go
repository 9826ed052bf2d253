package webhooks

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/api/types"
	"github.com/envd-dev/envd/internal/pgserver/pgtest"
	"github.com/envd-dev/envd/versions"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// awaitLog waits until done holds for hook's delivery log (newest first).
func awaitLog(t *testing.T, s *versions.Store, hook string, done func([]versions.WebhookDelivery) bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		log, err := s.Webhooks.WebhookDeliveries(context.Background(), "acme", hook, 100)
		require.NoError(t, err)
		if done(log) {
			return
		}
		require.True(t, time.Now().Before(deadline), "delivery log: %+v", log)
	}
}

// Deliveries are rows: events made while the receiver is down, tried by
// one node that then stops, are delivered by a node started after it
// (another store on the same database), in order, with the tries of the
// first node counted.
func TestDeliveriesOutliveRestart(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	s1, err := versions.Open(ctx, dsn)
	require.NoError(t, err)

	// The receiver's address, free: nothing listens there yet.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	cfg := Config{AllowLoopback: true, Poll: 20 * time.Millisecond, BackoffBase: 50 * time.Millisecond, BackoffCap: 200 * time.Millisecond}
	h1 := New(s1.Webhooks, cfg, nil)
	hook, err := h1.CreateWebhook(ctx, types.Principal{Tenant: "acme"}, types.WebhookRequest{URL: "http://" + addr + "/h"})
	require.NoError(t, err)
	for range 3 {
		_, err := h1.TestWebhook(ctx, types.Principal{Tenant: "acme"}, hook.ID)
		require.NoError(t, err)
	}
	run1, stop1 := context.WithCancel(ctx)
	h1.Run(run1)
	awaitLog(t, s1, hook.ID, func(log []versions.WebhookDelivery) bool {
		head := log[len(log)-1]
		return head.Attempts >= 2 && head.State == versions.DeliveryPending && log[0].Attempts == 0
	})
	stop1()
	h1.Wait()
	s1.Close()

	var mu sync.Mutex
	var ids []int64
	var attempts []int
	ln, err = net.Listen("tcp", addr)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := strconv.ParseInt(r.Header.Get(types.WebhookIDHeader), 10, 64)
		n, _ := strconv.Atoi(r.Header.Get(types.WebhookAttemptHeader))
		mu.Lock()
		ids, attempts = append(ids, id), append(attempts, n)
		mu.Unlock()
	})}
	go srv.Serve(ln) //nolint:errcheck
	defer srv.Close()

	s2, err := versions.Open(ctx, dsn)
	require.NoError(t, err)
	defer s2.Close()
	h2 := New(s2.Webhooks, cfg, nil)
	run2, stop2 := context.WithCancel(ctx)
	defer func() { stop2(); h2.Wait() }()
	h2.Run(run2)
	var log []versions.WebhookDelivery
	awaitLog(t, s2, hook.ID, func(l []versions.WebhookDelivery) bool {
		log = l
		for _, d := range l {
			if d.State != versions.DeliveryDelivered {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, log, 3)
	assert.Equal(t, []int64{log[2].ID, log[1].ID, log[0].ID}, ids, "each once, oldest first")
	assert.GreaterOrEqual(t, attempts[0], 3, "the first node's tries are counted")
	assert.Equal(t, attempts[0], log[2].Attempts)
	assert.Equal(t, []int{1, 1}, attempts[1:], "the later ones waited for the first")
}
