package versions_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/envd-dev/envd/errdefs"
	"github.com/envd-dev/envd/versions"
)

// sweepLock is the advisory lock of uploads and sweeps as pg_locks shows
// it (a bigint key is split into classid and objid).
const sweepLock = `locktype = 'advisory' AND classid = x'656e7664'::bigint AND objid = x'67630001'::bigint AND objsubid = 1
	AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`

// lockCount counts the sweep lock's holders or waiters in mode.
func lockCount(t *testing.T, s *versions.Store, mode string, granted bool) int {
	t.Helper()
	var n int
	require.NoError(t, s.Pool().QueryRow(context.Background(),
		"SELECT count(*) FROM pg_locks WHERE "+sweepLock+" AND mode = $1 AND granted = $2", mode, granted).Scan(&n))
	return n
}

// A sweep waits for the upload leases held (of any process: each lease is
// a connection of its own), and what they commit before ending is owned
// when the sweep reads the owned images.
func TestSweepWaitsForUploads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	other := newStoreOn(t, s) // a second node on the same database
	newProject(t, s)

	a, err := s.Content.BeginUpload(ctx)
	require.NoError(t, err)
	b, err := other.Content.BeginUpload(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, lockCount(t, s, "ShareLock", true))

	var owned map[string]bool
	swept := make(chan error, 1)
	go func() {
		swept <- other.Content.Sweep(ctx, func(ctx context.Context) error {
			var err error
			owned, err = other.Content.OwnedImages(ctx, "reg/")
			return err
		})
	}()
	require.Eventually(t, func() bool { return lockCount(t, s, "ExclusiveLock", false) == 1 }, 30*time.Second, 20*time.Millisecond,
		"the sweep waits for the leases")

	_, _, err = a.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", NoSwitch: true, Image: "reg/p@sha256:a"})
	require.NoError(t, err)
	a.End()
	select {
	case err := <-swept:
		t.Fatalf("the sweep ran while an upload lease was held: %v", err)
	default:
	}
	_, _, err = b.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", NoSwitch: true, Image: "reg/p@sha256:b"})
	require.NoError(t, err)
	b.End()
	b.End() // twice is harmless
	require.NoError(t, <-swept)
	assert.Equal(t, map[string]bool{"reg/base@sha256:aaa": true, "reg/p@sha256:a": true, "reg/p@sha256:b": true}, owned)

	_, _, err = a.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", NoSwitch: true, Image: "reg/p@sha256:c"})
	assert.ErrorIs(t, err, errdefs.ErrFailedPrecondition, "an ended lease commits nothing")
}

// An upload asked for during a sweep waits for it to end.
func TestUploadWaitsForSweep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	release := make(chan struct{})
	sweeping := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.Content.Sweep(ctx, func(context.Context) error {
			close(sweeping)
			<-release
			return nil
		})
	}()
	<-sweeping
	var mu sync.Mutex
	var up *versions.Upload
	began := make(chan error, 1)
	go func() {
		u, err := s.Content.BeginUpload(ctx)
		mu.Lock()
		up = u
		mu.Unlock()
		began <- err
	}()
	require.Eventually(t, func() bool { return lockCount(t, s, "ShareLock", false) == 1 }, 30*time.Second, 20*time.Millisecond,
		"the upload waits for the sweep")
	close(release)
	require.NoError(t, <-done)
	require.NoError(t, <-began)
	mu.Lock()
	defer mu.Unlock()
	up.End()
}

// An upload whose lock was lost with its connection (here: terminated)
// while a sweep ran cannot commit: the sweep may have deleted its content.
func TestUploadThatLostItsLockIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	newProject(t, s)
	u, err := s.Content.BeginUpload(ctx)
	require.NoError(t, err)
	defer u.End()
	img, err := s.Content.BeginUpload(ctx)
	require.NoError(t, err)
	defer img.End()
	_, err = s.Pool().Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_locks WHERE "+sweepLock+" AND mode = 'ShareLock'")
	require.NoError(t, err)
	require.Eventually(t, func() bool { return lockCount(t, s, "ShareLock", true) == 0 }, 30*time.Second, 20*time.Millisecond)

	require.NoError(t, s.Content.Sweep(ctx, func(context.Context) error { return nil }), "nothing holds the lock any more")
	_, _, err = u.CommitVersion(ctx, versions.Commit{Tenant: tenant, Project: "p", Image: "reg/p@sha256:lost", Expected: 1})
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)
	_, err = img.PutImage(ctx, versions.Image{Name: "lost", Repo: "reg/images/lost", Digest: "sha256:lost"})
	assert.ErrorIs(t, err, errdefs.ErrUnavailable)

	vs, err := s.Versions.ListVersions(ctx, tenant, "p")
	require.NoError(t, err)
	assert.Len(t, vs, 1, "nothing recorded")
	_, err = s.Content.GetImage(ctx, "lost")
	assert.ErrorIs(t, err, errdefs.ErrNotFound)
}

// A connection kept between leases that died while idle is replaced: the
// next lease still gets the lock.
func TestUploadReplacesADeadKeptConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newStore(t)
	u, err := s.Content.BeginUpload(ctx)
	require.NoError(t, err)
	u.End() // its connection is kept, unlocked
	var killed int
	require.NoError(t, s.Pool().QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'envd sweep lock'`).Scan(&killed))
	require.Equal(t, 1, killed)

	u, err = s.Content.BeginUpload(ctx)
	require.NoError(t, err)
	defer u.End()
	assert.Equal(t, 1, lockCount(t, s, "ShareLock", true))
}

// newStoreOn opens a second store (another node's pool) on s's database.
func newStoreOn(t *testing.T, s *versions.Store) *versions.Store {
	t.Helper()
	o, err := versions.Open(context.Background(), s.Pool().Config().ConnString())
	require.NoError(t, err)
	t.Cleanup(o.Close)
	return o
}

// BenchmarkUploadLease measures what an upload lease adds to a save: a
// connection of its own, the shared lock, the epoch read, and closing.
func BenchmarkUploadLease(b *testing.B) {
	s, err := versions.Open(context.Background(), pgtestDSN(b))
	require.NoError(b, err)
	defer s.Close()
	ctx := context.Background()
	for b.Loop() {
		u, err := s.Content.BeginUpload(ctx)
		if err != nil {
			b.Fatal(err)
		}
		u.End()
	}
}
