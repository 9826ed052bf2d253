package versions

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/envd-dev/envd/errdefs"
)

// Uploads and sweeps of the registry, across every node that shares this
// database.
//
// Terms:
//
//   - upload: content pushed to the registry (blobs, then a manifest) for a
//     version or image whose row is not committed yet. No row owns it, so a
//     sweep would take it for garbage.
//   - upload lease (Upload): held from before the first blob is pushed until
//     the row that owns the content is committed, or the upload is given
//     up. It is a shared PostgreSQL advisory lock held on a connection of
//     its own, outside the pool: a session lock belongs to one connection,
//     and a pooled one would go back to the pool still holding it, and
//     leases holding pooled connections could starve their own commits.
//     The cost is one extra connection per upload in flight; a few are
//     kept, unlocked, between leases.
//   - sweep (Sweep): deletion of registry content that no row owns. It
//     takes the same lock exclusively, so it starts only when no upload
//     lease is held on any node, and leases asked for meanwhile wait until
//     it ends. One sweep at a time in the cluster.
//   - epoch: a counter a sweep increments before it deletes anything and
//     again after. A lease reads it when it gets the lock, and its commit
//     checks, in the commit's transaction, that it has not changed: a lease
//     whose connection broke (and with it the lock) while a sweep ran
//     cannot commit content the sweep may have deleted.

// sweepLockKey is the advisory lock of uploads (shared) and sweeps
// (exclusive): "envdgc" and 1 in ASCII.
const sweepLockKey int64 = 0x656e766467630001

// Upload is a lease that keeps sweeps away from an upload; see the terms
// above. End it once the content is committed or abandoned.
type Upload struct {
	db    DB // the executor the lease's commits run on
	conns *lockConnPool
	conn  *pgx.Conn
	epoch int64

	mu    sync.Mutex
	ended bool
}

// BeginUpload takes an upload lease. It waits while a sweep runs (any
// node's); ctx bounds the wait.
func (s Content) BeginUpload(ctx context.Context) (*Upload, error) {
	for {
		conn, kept, err := s.conns.get(ctx, s)
		if err != nil {
			return nil, err
		}
		u := &Upload{db: s.db, conns: s.conns, conn: conn}
		_, err = conn.Exec(ctx, "SELECT pg_advisory_lock_shared($1)", sweepLockKey)
		if err == nil {
			err = conn.QueryRow(ctx, "SELECT epoch FROM gc_epoch").Scan(&u.epoch)
		}
		if err == nil {
			return u, nil
		}
		u.End()
		if !kept || ctx.Err() != nil {
			return nil, translate(err, "upload lease")
		}
		// A kept connection may have died while idle: try a new one.
	}
}

// End releases the lease. Safe to call more than once.
func (u *Upload) End() {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.ended {
		return
	}
	u.ended = true
	u.conns.put(u.conn)
}

// check refuses, in tx, a commit whose lease ended or saw a sweep: tx
// holds the epoch row shared until it commits, so a sweep cannot start
// deleting between the check and the commit.
func (u *Upload) check(ctx context.Context, tx pgx.Tx) error {
	u.mu.Lock()
	ended := u.ended
	u.mu.Unlock()
	if ended {
		return fmt.Errorf("upload lease already ended: %w", errdefs.ErrFailedPrecondition)
	}
	var epoch int64
	if err := tx.QueryRow(ctx, "SELECT epoch FROM gc_epoch FOR SHARE").Scan(&epoch); err != nil {
		return translate(err, "upload lease")
	}
	if epoch != u.epoch {
		return fmt.Errorf("a registry sweep ran during the upload (its lock was lost with its connection); the content may be gone, ask again: %w",
			errdefs.ErrUnavailable)
	}
	return nil
}

// CommitVersion is Versions.CommitVersion for an image pushed under this
// lease: it fails with ErrUnavailable, recording nothing, if a sweep may
// have deleted part of it.
func (u *Upload) CommitVersion(ctx context.Context, c Commit) (Version, bool, error) {
	return Versions{db: u.db}.commitVersion(ctx, c, u.check)
}

// PutImage is Content.PutImage for an image pushed under this lease.
func (u *Upload) PutImage(ctx context.Context, img Image) (Image, error) {
	return WithTxV(ctx, u.db, func(tx pgx.Tx) (Image, error) {
		if err := u.check(ctx, tx); err != nil {
			return Image{}, err
		}
		return putImage(ctx, tx, img)
	})
}

// Sweep runs fn while it holds the sweep lock exclusively: every upload
// lease of every node has ended, and new ones wait. It waits for the lock
// (ctx bounds the wait). The epoch is incremented before fn and again
// after it, the second time on the pool, so that if the lock's connection
// broke during fn, an upload that began meanwhile is refused at commit.
func (s Content) Sweep(ctx context.Context, fn func(ctx context.Context) error) error {
	conn, err := s.lockConn(ctx)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", sweepLockKey); err != nil {
		return translate(err, "sweep lock")
	}
	if _, err := conn.Exec(ctx, "UPDATE gc_epoch SET epoch = epoch + 1"); err != nil {
		return translate(err, "sweep epoch")
	}
	ferr := fn(ctx)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(cctx, "UPDATE gc_epoch SET epoch = epoch + 1"); err != nil && ferr == nil {
		return translate(err, "sweep epoch")
	}
	return ferr
}

// lockConnPool keeps a few connections for upload leases, outside the
// pool, so that a lease does not pay a connection's setup (tens of ms with
// password authentication). A connection is kept only once its lock is
// released; one whose unlock fails is closed, which ends its lock.
type lockConnPool struct {
	mu     sync.Mutex
	idle   []*pgx.Conn
	closed bool
}

// maxIdleLockConns bounds the connections kept between leases.
const maxIdleLockConns = 4

// get returns a kept connection (kept true) or a new one.
func (p *lockConnPool) get(ctx context.Context, s Content) (c *pgx.Conn, kept bool, err error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		c = p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if !c.IsClosed() {
			p.mu.Unlock()
			return c, true, nil
		}
	}
	p.mu.Unlock()
	c, err = s.lockConn(ctx)
	return c, false, err
}

// put releases c's lock and keeps c for the next lease, or closes it.
func (p *lockConnPool) put(c *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var released bool
	err := c.QueryRow(ctx, "SELECT pg_advisory_unlock_shared($1)", sweepLockKey).Scan(&released)
	p.mu.Lock()
	if err == nil && released && !p.closed && len(p.idle) < maxIdleLockConns {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	_ = c.Close(ctx)
}

// close closes the kept connections.
func (p *lockConnPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range idle {
		_ = c.Close(ctx)
	}
}

// lockConnName is the application_name of the sweep lock's connections,
// as pg_stat_activity shows them.
const lockConnName = "envd sweep lock"

// lockConn opens a connection outside the pool, with the pool's settings.
func (s Content) lockConn(ctx context.Context) (*pgx.Conn, error) {
	cfg := s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = lockConnName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, translate(err, "connect for the sweep lock")
	}
	return conn, nil
}

// squashedInUse is true for a squashed version v (SQL) while an instance
// that is not terminated was started from it or sits on it: its rootfs may
// read the layers of the image before the squash lazily, so that manifest
// (and so its blobs) stays until the last such instance ends.
const squashedInUse = `v.squashed_from IS NOT NULL AND EXISTS (SELECT 1 FROM instances i
	WHERE i.project_id = v.project_id AND i.state NOT IN ('Terminated', 'Failed')
	  AND (i.version = v.number OR i.layer_version = v.number))`

// OwnedImages returns the images ("repo@digest") under repoPrefix that a
// row owns: a version of any state, an imported image, or
// the image a squashed version had while an instance may read it. A sweep reads
// them once it holds the lock; what it finds under the prefix and not
// here is an orphan.
func (s Content) OwnedImages(ctx context.Context, repoPrefix string) (map[string]bool, error) {
	rows, err := s.db.Query(ctx, `SELECT image FROM versions WHERE starts_with(image, $1)
		UNION SELECT repo || '@' || digest FROM images WHERE starts_with(repo, $1)
		UNION SELECT v.squashed_from FROM versions v WHERE starts_with(v.squashed_from, $1) AND `+squashedInUse+`
		UNION SELECT memory_image FROM checkpoints WHERE memory_image <> '' AND starts_with(memory_image, $1)`, repoPrefix)
	if err != nil {
		return nil, translate(err, "owned images")
	}
	imgs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, translate(err, "owned images")
	}
	out := make(map[string]bool, len(imgs))
	for _, img := range imgs {
		out[img] = true
	}
	return out, nil
}

// ImageOwned reports whether a version that is not being deleted, or an
// imported image, has image ("repo@digest"): its manifest must then stay.
func (s Content) ImageOwned(ctx context.Context, image string) (bool, error) {
	repo, digest, ok := strings.Cut(image, "@")
	if !ok {
		return false, fmt.Errorf("image %q is not repo@digest: %w", image, errdefs.ErrInvalidArgument)
	}
	var owned bool
	err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM versions WHERE image = $1 AND state <> 'deleting')
		OR EXISTS (SELECT 1 FROM images WHERE repo = $2 AND digest = $3)
		OR EXISTS (SELECT 1 FROM versions v WHERE v.squashed_from = $1 AND `+squashedInUse+`)
		OR EXISTS (SELECT 1 FROM checkpoints WHERE memory_image = $1)`, image, repo, digest).Scan(&owned)
	if err != nil {
		return false, translate(err, fmt.Sprintf("image %q", image))
	}
	return owned, nil
}
