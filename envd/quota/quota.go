// Package quota checks a tenant's quota before anything is made: an
// instance before it is recorded, a save after its layer is encoded and
// before it is uploaded, a volume before it is declared, a TTL before it
// is set. The store checks again, atomically, where it records (so these
// are the early, explaining checks). A refusal is errdefs.ErrQuotaExceeded
// (507) with the numbers in its details. It needs the store's quota and
// usage reads (Store).
package quota

import (
	"context"
	"time"

	"github.com/envd-dev/envd/envd/names"
	"github.com/envd-dev/envd/envd/spec"
	"github.com/envd-dev/envd/versions"
)

// Store is what the checks read of the store.
type Store interface {
	Quota(ctx context.Context, tenant string) (versions.Quota, error)
	Usage(ctx context.Context, tenant string) (versions.Usage, error)
	WritableLayerBytes(ctx context.Context, tenant string) (int64, error)
	ListProjects(ctx context.Context, tenant string) ([]versions.Project, error)
}

// Checker checks requests against the tenants' quotas.
type Checker struct {
	store Store
	// defaultTTL is an instance's lifetime when none is asked; maxTTL the
	// node's longest (0 = none).
	defaultTTL, maxTTL time.Duration
}

// New makes a checker reading store, with the node's default and maximum
// instance lifetimes.
func New(store Store, defaultTTL, maxTTL time.Duration) *Checker {
	return &Checker{store: store, defaultTTL: defaultTTL, maxTTL: maxTTL}
}

// TTL turns a requested TTL into an expiry within the node's and the
// tenant's maximum. Past the tenant's, or "none" while it has one, is a
// quota refusal; the default is cut to it.
func (c *Checker) TTL(ctx context.Context, tenant, ttl string) (*time.Time, error) {
	q, err := c.store.Quota(ctx, tenant)
	if err != nil {
		return nil, err
	}
	def := c.defaultTTL
	if q.MaxTTL > 0 {
		if ttl == "none" {
			return nil, versions.QuotaError("ttl_seconds", int64(q.MaxTTL/time.Second), 0, -1)
		}
		if d, err := time.ParseDuration(ttl); err == nil && d > q.MaxTTL {
			return nil, versions.QuotaError("ttl_seconds", int64(q.MaxTTL/time.Second), 0, int64(d/time.Second))
		}
		def = min(def, q.MaxTTL)
	}
	return names.ParseTTL(ttl, time.Now(), def, c.maxTTL)
}

// Start refuses to start one more live instance beyond the tenant's
// quota: an early check, before an operation exists; the store checks
// again, atomically, as it records a new instance or starts a stopped one.
func (c *Checker) Start(ctx context.Context, tenant string) error {
	return c.Starts(ctx, tenant, 1)
}

// Starts is Start for n instances started together (a fork into n): all
// of them fit, or the refusal names n as what was asked.
func (c *Checker) Starts(ctx context.Context, tenant string, n int) error {
	q, err := c.store.Quota(ctx, tenant)
	if err != nil || q.MaxInstances == 0 {
		return err
	}
	u, err := c.store.Usage(ctx, tenant)
	if err != nil {
		return err
	}
	if u.Instances+n > q.MaxInstances {
		return versions.QuotaError("instances", int64(q.MaxInstances), int64(u.Instances), int64(n))
	}
	return nil
}

// Save refuses a version of project adding layerBytes beyond the tenant's
// quota of versions per project or of stored bytes. It is the early check,
// before an upload; the commit checks again atomically
// (versions.Commit.Quota), counting the volume bytes returned here.
func (c *Checker) Save(ctx context.Context, tenant, project string, layerBytes int64) (volumeBytes int64, err error) {
	q, err := c.store.Quota(ctx, tenant)
	if err != nil || (q.MaxVersions == 0 && q.MaxStoredBytes == 0) {
		return 0, err
	}
	u, err := c.Usage(ctx, tenant)
	if err != nil {
		return 0, err
	}
	if q.MaxVersions > 0 && u.Versions[project] >= q.MaxVersions {
		return 0, versions.QuotaError("versions", int64(q.MaxVersions), int64(u.Versions[project]), 1)
	}
	if q.MaxStoredBytes > 0 && u.Stored()+layerBytes > q.MaxStoredBytes {
		return 0, versions.QuotaError("stored_bytes", q.MaxStoredBytes, u.Stored(), layerBytes)
	}
	return u.VolumeBytes, nil
}

// Volume refuses volumes of addBytes beyond the tenant's stored bytes.
func (c *Checker) Volume(ctx context.Context, tenant string, addBytes int64) error {
	q, err := c.store.Quota(ctx, tenant)
	if err != nil || q.MaxStoredBytes == 0 {
		return err
	}
	u, err := c.Usage(ctx, tenant)
	if err != nil {
		return err
	}
	if u.Stored()+addBytes > q.MaxStoredBytes {
		return versions.QuotaError("stored_bytes", q.MaxStoredBytes, u.Stored(), addBytes)
	}
	return nil
}

// Disk refuses an instance whose writable layer of diskBytes would take
// the tenant past max_stored_bytes (as a volume would); 0 = no limit, no
// check.
func (c *Checker) Disk(ctx context.Context, tenant string, diskBytes int64) error {
	if diskBytes == 0 {
		return nil
	}
	return c.Volume(ctx, tenant, diskBytes)
}

// Usage is what a tenant stores and runs: the store's counts plus the
// declared sizes of its volumes, which live in project specs.
type Usage struct {
	versions.Usage
	VolumeBytes int64
	DiskBytes   int64 // writable-layer limits of instances holding a layer
}

// Stored is what counts against max_stored_bytes.
func (u Usage) Stored() int64 { return u.LayerBytes + u.VolumeBytes + u.DiskBytes + u.CheckpointBytes }

// Usage reads a tenant's usage.
func (c *Checker) Usage(ctx context.Context, tenant string) (Usage, error) {
	u, err := c.store.Usage(ctx, tenant)
	if err != nil {
		return Usage{}, err
	}
	out := Usage{Usage: u}
	if out.DiskBytes, err = c.store.WritableLayerBytes(ctx, tenant); err != nil {
		return Usage{}, err
	}
	ps, err := c.store.ListProjects(ctx, tenant)
	if err != nil {
		return Usage{}, err
	}
	for _, p := range ps {
		ps, _ := spec.Parse(p.Spec)
		out.VolumeBytes += spec.VolumeBytes(ps.Volumes)
	}
	return out, nil
}
